"""ONNX models on core: `OnnxRunner(model)(inputs)`, an onnx.backend implementation (core.onnx.backend), and compile once, run
anywhere (`compile_model`, `load_compiled`, `python -m core.onnx compile|run`). Needs the optional dependency `onnx` (pip install core[onnx])."""
from core.onnx.registry import OnnxError, OPS
from core.onnx.runner import OnnxRunner
from core.onnx.compiled import CompiledModel, compile_model, load_compiled

__all__ = ["OnnxRunner", "OnnxError", "OPS", "CompiledModel", "compile_model", "load_compiled"]
