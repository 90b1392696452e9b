"""OnnxRunner: runs an ONNX graph node by node with core Tensors.

Values known on the host (initializers, Constant nodes, Shape results and what is computed from only those) are kept as
numpy arrays beside their Tensors, so shape-like inputs (Reshape's shape, Slice's starts, ...) never need a device read;
such host-only nodes are evaluated once per distinct input and cached, which also keeps them out of a Jit capture.
Values of ONNX types core has no dtype for (float8, 4-bit, ...) are held in a wider dtype and tracked by name (core.onnx.narrow)."""
from __future__ import annotations
import os
from dataclasses import dataclass, field
from typing import Any
import numpy as np
from core.helpers import getenv
from core.ir.dtype import dtypes
from core.tensor.tensor import Tensor
from core.onnx.dtypes import onnx_dtype, to_numpy, to_tensor
from core.onnx.narrow import NARROW, Narrow, from_storage, narrow_elem, storage_array
from core.onnx.registry import ATTR_ALIASES, OPS, OnnxError, OpDef
import core.onnx.ops  # noqa: F401  (registers the ops)

HOST_LIMIT = 4096  # elements: host copies are kept for values at most this big (shapes, axes, small constants)

@dataclass
class _Node:
  name: str
  op_type: str
  inputs: list[str]
  outputs: list[str]
  opdef: OpDef
  kwargs: dict[str, Any]   # attributes (parsed once) and context parameters

@dataclass
class _Env:
  tensors: dict[str, Tensor] = field(default_factory=dict)
  host: dict[str, np.ndarray] = field(default_factory=dict)
  narrow: dict[str, int] = field(default_factory=dict)   # name -> the ONNX element type a narrow value holds

def _attr_value(a: Any) -> Any:
  from onnx import helper, numpy_helper
  v = helper.get_attribute_value(a)
  if a.type == a.TENSOR: return numpy_helper.to_array(v)
  if isinstance(v, bytes): return v.decode()
  if isinstance(v, list) and v and isinstance(v[0], bytes): return [s.decode() for s in v]
  return v

def _node_label(n: Any, i: int) -> str: return n.name or f"#{i} ({', '.join(n.output)})"

class OnnxRunner:
  """Runs an ONNX model (a ModelProto or a path) on `device` (default: DEV). runner({name: Tensor | ndarray}) -> {output: Tensor}.
  float16 (default: the FLOAT16 env var) keeps float32 weights and inputs in half, so the model computes in half."""
  def __init__(self, model: Any, device: str | None = None, float16: bool | None = None):
    import onnx
    from onnx import numpy_helper
    if isinstance(model, (str, os.PathLike)): model = onnx.load(os.fspath(model))
    self.model = model
    self.device = device
    self.float16 = bool(getenv("FLOAT16", 0)) if float16 is None else float16
    self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
    newest = onnx.defs.onnx_opset_version()
    if self.opset > newest: raise OnnxError(f"model opset {self.opset} is newer than the installed onnx knows ({newest})")
    g = model.graph
    self.consts = _Env()
    for init in g.initializer:
      arr = numpy_helper.to_array(init)
      if init.data_type not in NARROW: onnx_dtype(init.data_type, f"initializer {init.name!r}: ")
      self._put(self.consts, init.name, arr)
    self.input_names = [i.name for i in g.input if i.name not in self.consts.tensors]
    self.output_names = [o.name for o in g.output]
    self.nodes = [self._prepare(n, i) for i, n in enumerate(g.node)]
    self._fold_cache: dict[tuple, tuple[list[Any], list[Tensor | None]]] = {}

  def _half(self, t: Tensor) -> Tensor: return t.cast(dtypes.float16) if self.float16 and t.dtype is dtypes.float32 else t

  def _put(self, env: _Env, name: str, v: Any) -> None:
    """Stores an input or initializer (a Tensor or array); small arrays are kept on the host too, narrow ones as storage."""
    if isinstance(v, Tensor):
      env.tensors[name] = self._half(v)
      env.host.pop(name, None)
    elif (elem := narrow_elem(v)) is not None:
      env.tensors[name], env.narrow[name] = to_tensor(storage_array(v, elem), self.device), elem
      env.host.pop(name, None)
      return
    else:
      arr = np.asarray(v)
      env.tensors[name] = self._half(to_tensor(arr, self.device))
      if arr.size <= HOST_LIMIT: env.host[name] = arr
      else: env.host.pop(name, None)
    env.narrow.pop(name, None)

  def _prepare(self, n: Any, i: int) -> _Node:
    label = _node_label(n, i)
    if n.domain not in ("", "ai.onnx"): raise OnnxError(f"node {label}: op {n.domain}.{n.op_type} (domain {n.domain!r}) is not supported")
    if (opdef := OPS.get(n.op_type)) is None: raise OnnxError(f"node {label}: op {n.op_type} is not supported")
    kwargs: dict[str, Any] = {}
    for a in n.attribute:
      key = ATTR_ALIASES.get(a.name, a.name)
      if key not in opdef.attrs: raise OnnxError(f"node {label}: op {n.op_type} attribute {a.name!r} is not supported")
      kwargs[key] = _attr_value(a)
    if "_opset" in opdef.context: kwargs["_opset"] = self.opset
    if "_nout" in opdef.context: kwargs["_nout"] = len(n.output)
    if "_device" in opdef.context: kwargs["_device"] = self.device
    return _Node(label, n.op_type, list(n.input), list(n.output), opdef, kwargs)

  def _tensor(self, env: _Env, name: str) -> Tensor:
    if (t := env.tensors.get(name)) is None:
      t = env.tensors[name] = self._half(to_tensor(env.host[name], self.device))
    return t

  def _host(self, env: _Env, name: str) -> np.ndarray:
    if (h := env.host.get(name)) is None: h = env.host[name] = to_numpy(env.tensors[name])   # a data-dependent shape: read it back
    return h

  def _run_node(self, idx: int, node: _Node, env: _Env) -> None:
    names = [n for n in node.inputs if n]
    for nm in names:
      if nm not in env.tensors and nm not in env.host: raise OnnxError(f"node {node.name}: input {nm!r} is not computed by the graph")
    foldable = names and all(n in env.host for n in names)
    key: tuple | None = None
    if foldable:
      key = (idx,) + tuple((env.host[n].dtype.str, env.host[n].shape, env.host[n].tobytes()) for n in names)
      if (hit := self._fold_cache.get(key)) is not None:
        self._store(node, env, *hit)
        return
    args = [None if not nm else (self._host(env, nm) if i in node.opdef.static else self._tensor(env, nm)) for i, nm in enumerate(node.inputs)]
    kwargs = node.kwargs
    if "_narrow" in node.opdef.context: kwargs = {**kwargs, "_narrow": [env.narrow.get(nm) if nm else None for nm in node.inputs]}
    elif bad := [nm for nm in names if nm in env.narrow]:
      raise OnnxError(f"node {node.name}: op {node.op_type} does not take {NARROW[env.narrow[bad[0]]].name} inputs ({bad[0]!r})")
    try: out = node.opdef.fn(*args, **kwargs)
    except OnnxError as e: raise OnnxError(f"node {node.name}: {e}") from None
    outs = list(out) if isinstance(out, (list, tuple)) else [out]
    for nm, o in zip(node.outputs, outs):
      if isinstance(o, Narrow): env.narrow[nm] = o.elem
      elif isinstance(o, np.ndarray) and (elem := narrow_elem(o)) is not None: env.narrow[nm] = elem   # a narrow Constant
      else: env.narrow.pop(nm, None)
    outs = [o.t if isinstance(o, Narrow) else (to_tensor(storage_array(o, env.narrow[nm]), self.device) if nm in env.narrow else o)
            for nm, o in zip(node.outputs, outs)]
    hosts: list[Any] = [o if isinstance(o, np.ndarray) else None for o in outs]
    tensors: list[Tensor | None] = [o if isinstance(o, Tensor) else None for o in outs]
    if (key is not None or not names) and not any(nm in env.narrow for nm in node.outputs):
      # computed from host values only: keep small results on the host, once
      hosts = [h if h is not None else (to_numpy(t) if t is not None and t.numel() <= HOST_LIMIT else None) for h, t in zip(hosts, tensors)]
      if key is not None: self._fold_cache[key] = (hosts, tensors)
    self._store(node, env, hosts, tensors)

  def _store(self, node: _Node, env: _Env, hosts: list[Any], tensors: list[Tensor | None]) -> None:
    for nm, h, t in zip(node.outputs, hosts, tensors):
      if not nm: continue
      if h is not None: env.host[nm] = h
      else: env.host.pop(nm, None)
      if t is not None: env.tensors[nm] = t
      else: env.tensors.pop(nm, None)

  def _execute(self, inputs: dict[str, Any]) -> _Env:
    env = _Env(dict(self.consts.tensors), dict(self.consts.host), dict(self.consts.narrow))
    for name in self.input_names:
      if name not in inputs: raise OnnxError(f"missing input {name!r} (the model takes {self.input_names})")
    for name, v in inputs.items():
      self._put(env, name, v)
      env.host.pop(name, None)   # graph inputs change between calls: never folded
    for i, node in enumerate(self.nodes): self._run_node(i, node, env)
    return env

  def __call__(self, inputs: dict[str, Any]) -> dict[str, Tensor]:
    """The outputs as Tensors; an output of a narrow ONNX type (float8, int4, ...) comes in its storage dtype."""
    env = self._execute(inputs)
    return {name: self._tensor(env, name) for name in self.output_names}

  def numpy(self, inputs: dict[str, Any]) -> dict[str, np.ndarray]:
    """The outputs as numpy arrays, narrow ONNX types as the ml_dtypes types onnx uses."""
    env = self._execute(inputs)
    return {n: from_storage(to_numpy(self._tensor(env, n)), env.narrow[n]) if n in env.narrow else to_numpy(self._tensor(env, n))
            for n in self.output_names}
