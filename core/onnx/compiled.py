"""Compile once, run anywhere: an ONNX model run once under a Jit on one device, saved as its compiled programs and weights
(core/engine/export.py), and loaded later on the same device kind to run new inputs without compiling anything."""
from __future__ import annotations
import os
from typing import Any
import numpy as np
from core.ir.dtype import to_np
from core.engine.export import CompiledFileError, CompiledGraph, load_replay, read_graph

def _input_specs(model: Any, runner: Any, shapes: dict[str, tuple[int, ...]]) -> list[tuple[str, tuple[int, ...], Any]]:
  """(name, shape, numpy dtype) of each graph input: dims from `shapes`, else the model's fixed dims (unknown dims: 1)."""
  from core.onnx.dtypes import onnx_dtype
  by_name = {i.name: i for i in model.graph.input}
  out = []
  for name in runner.input_names:
    tt = by_name[name].type.tensor_type
    shape = shapes.get(name) or tuple(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else 1 for d in tt.shape.dim)
    out.append((name, tuple(shape), to_np(onnx_dtype(tt.elem_type, f"input {name!r}: "))))
  return out

def random_input(shape: tuple[int, ...], dtype: Any, rng: np.random.Generator) -> np.ndarray:
  """A random input of `shape`/`dtype`: standard normal floats, small non-negative integers, random booleans."""
  dt = np.dtype(dtype)
  if dt.kind == "f": return rng.standard_normal(shape).astype(dt)
  if dt.kind == "b": return rng.integers(0, 2, shape).astype(dt)
  return rng.integers(0, 4, shape).astype(dt)

def compile_model(model: Any, device: str | None = None, shapes: dict[str, tuple[int, ...]] | None = None,
                  inputs: dict[str, np.ndarray] | None = None, float16: bool | None = None) -> CompiledGraph:
  """Runs `model` (a ModelProto or a path) under a Jit on `device` (default: DEV) until its kernels are captured and returns them as
  a CompiledGraph (save it with .save(path)). The inputs are `inputs`, else random ones of `shapes` (else the model's own shapes)."""
  import onnx
  from core.device.registry import Device
  from core.tensor.tensor import Tensor
  from core.tensor.jit import Jit
  from core.tensor.jit_export import export_jit
  from core.onnx.runner import OnnxRunner
  if isinstance(model, (str, os.PathLike)): model = onnx.load(os.fspath(model))
  device = Device.canonicalize(device or Device.DEFAULT)
  runner = OnnxRunner(model, device=device, float16=float16)
  specs = _input_specs(model, runner, {**(shapes or {}), **{k: tuple(v.shape) for k, v in (inputs or {}).items()}})
  rng = np.random.default_rng(0)
  arrays = [np.asarray((inputs or {}).get(n, random_input(s, dt, rng)), dtype=dt) for n, s, dt in specs]
  names = runner.input_names
  def step(*xs: Tensor) -> tuple[Tensor, ...]:
    outs = runner(dict(zip(names, xs)))
    return tuple(outs[n].contiguous() for n in runner.output_names)
  jit = Jit(step)
  for _ in range(2): rets = jit(*[Tensor(a, device=device) for a in arrays])   # call 1 runs eagerly, call 2 captures
  meta = {"inputs": [{"name": n, "shape": list(s), "dtype": np.dtype(dt).name} for n, s, dt in specs],
          "outputs": [{"name": n, "shape": list(t.shape), "dtype": np.dtype(to_np(t.dtype)).name} for n, t in zip(runner.output_names, rets)],
          "source": model.graph.name}
  return export_jit(jit, meta)

class CompiledModel:
  """A compiled ONNX model loaded on a device: model({name: ndarray | Tensor}) -> {output name: ndarray}. Nothing is compiled:
  the saved binaries are loaded with the device's runtime, or on devices that run kernels only in their command queues handed to
  core's HCQ pipeline (`queues`: True/False forces either where a device has both, as the CPU does)."""
  def __init__(self, graph: CompiledGraph, device: str | None = None, queues: bool | None = None):
    from core.device.registry import Device
    self.graph = graph
    self.device = Device.canonicalize(device or Device.DEFAULT)
    try:
      self.inputs = [(d["name"], tuple(d["shape"]), np.dtype(d["dtype"])) for d in graph.meta["inputs"]]
      self.outputs = [(d["name"], tuple(d["shape"]), np.dtype(d["dtype"])) for d in graph.meta["outputs"]]
    except (KeyError, TypeError, ValueError) as e: raise CompiledFileError(f"malformed compiled ONNX model: its input/output table is damaged ({e!r})") from None
    if len(self.inputs) != len(graph.inputs) or len(self.outputs) != len(graph.outputs):
      raise CompiledFileError("malformed compiled ONNX model: its input/output table does not match its buffers")
    self.replay = load_replay(graph, self.device, queues)
    self._out_views: list[np.ndarray | None] | None = None   # made by the first call (_output_views)

  @property
  def input_names(self) -> list[str]: return [n for n, _, _ in self.inputs]
  @property
  def output_names(self) -> list[str]: return [n for n, _, _ in self.outputs]

  def __call__(self, inputs: dict[str, Any]) -> dict[str, np.ndarray]:
    arrays = []
    for name, shape, dt in self.inputs:
      if name not in inputs: raise ValueError(f"missing input {name!r} (the compiled model takes {self.input_names})")
      v = inputs[name]
      a = np.ascontiguousarray(v.numpy() if hasattr(v, "numpy") and not isinstance(v, np.ndarray) else v)
      if a.shape != shape or a.dtype != dt:
        raise ValueError(f"input {name!r}: compiled for {shape} {dt.name}, got {a.shape} {a.dtype.name} (compile again for other shapes)")
      arrays.append(a)
    bufs = self.replay([a.data.cast("B") for a in arrays])
    if (views := self._out_views) is None: views = self._out_views = _output_views(self.outputs, bufs)
    outs = {}
    for (name, shape, dt), b, view in zip(self.outputs, bufs, views):
      if view is not None: outs[name] = view.copy()   # the output buffer's memory, copied once into the returned array
      else:
        if (o := np.empty(shape, dt)).nbytes: b.copyout(o.data.cast("B"))   # straight into the returned array: one copy
        outs[name] = o
    return outs

def _output_views(outputs: list[tuple[str, tuple[int, ...], Any]], bufs: list[Any]) -> list[np.ndarray | None]:
  """Per output, a numpy view of its buffer's memory where the device's memory is host memory (its .copy() skips np.empty and
  Buffer.copyout's checks and device lookup: about 1 us a call); None elsewhere or when it is empty. A replay returns the same
  buffers, which keep their memory as long as it lives: the views stay valid."""
  views: list[np.ndarray | None] = []
  for (_, shape, dt), b in zip(outputs, bufs):
    mv = b.host_view() if b.nbytes else None
    views.append(None if mv is None else np.frombuffer(mv, dt).reshape(shape))
  return views

def load_compiled(path: str | os.PathLike, device: str | None = None, queues: bool | None = None) -> CompiledModel:
  """Loads a file written by `python -m core.onnx compile` (or compile_model(...).save) on `device` (default: DEV); refuses a file
  made for another device kind or core version, and a damaged one, with a CompiledFileError."""
  return CompiledModel(read_graph(os.fspath(path)), device, queues)
