"""ONNX models on core: `OnnxRunner(model)(inputs)` and an onnx.backend implementation (core.onnx.backend).
Needs the optional dependency `onnx` (pip install core[onnx])."""
from core.onnx.registry import OnnxError, OPS
from core.onnx.runner import OnnxRunner

__all__ = ["OnnxRunner", "OnnxError", "OPS"]
