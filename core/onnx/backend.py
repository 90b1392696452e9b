"""core as an ONNX backend (onnx.backend.base.Backend), so onnx's shipped node tests run through BackendTest."""
from __future__ import annotations
from typing import Any
import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep
from core.onnx.runner import OnnxRunner

class CoreRep(BackendRep):
  def __init__(self, runner: OnnxRunner): self.runner = runner
  def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
    if isinstance(inputs, dict): feed = dict(inputs)
    else:
      vals = [inputs] if isinstance(inputs, np.ndarray) else list(inputs)
      feed = dict(zip(self.runner.input_names, vals))
    outs = self.runner.numpy(feed)
    return tuple(outs[n] for n in self.runner.output_names)

class CoreBackend(Backend):
  @classmethod
  def is_compatible(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> bool: return True
  @classmethod
  def supports_device(cls, device: str) -> bool: return device == "CPU"   # onnx's device names; the tensors go to DEV
  @classmethod
  def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> CoreRep: return CoreRep(OnnxRunner(model))
  @classmethod
  def run_model(cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple[np.ndarray, ...]:
    return cls.prepare(model, device).run(inputs)
  @classmethod
  def run_node(cls, node: onnx.NodeProto, inputs: Any, device: str = "CPU", outputs_info: Any = None, **kwargs: Any) -> tuple[np.ndarray, ...]:
    from onnx import helper
    ins = [helper.make_tensor_value_info(n, onnx.TensorProto.UNDEFINED, None) for n in node.input if n]
    outs = [helper.make_tensor_value_info(n, onnx.TensorProto.UNDEFINED, None) for n in node.output if n]
    model = helper.make_model(helper.make_graph([node], "node", ins, outs))
    return cls.run_model(model, [np.asarray(v) for v in inputs], device)

prepare, run_model, run_node, supports_device = CoreBackend.prepare, CoreBackend.run_model, CoreBackend.run_node, CoreBackend.supports_device
