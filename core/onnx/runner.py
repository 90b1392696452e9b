"""OnnxRunner: runs an ONNX graph node by node with core Tensors.

Values known on the host (initializers, Constant nodes, Shape results and what is computed from only those) are kept as
numpy arrays beside their Tensors, so shape-like inputs (Reshape's shape, Slice's starts, ...) never need a device read;
such host-only nodes are evaluated once per distinct input and cached, which also keeps them out of a Jit capture."""
from __future__ import annotations
import os
from dataclasses import dataclass, field
from typing import Any
import numpy as np
from core.helpers import getenv
from core.ir.dtype import dtypes
from core.tensor.tensor import Tensor
from core.onnx.dtypes import onnx_dtype, to_numpy, to_tensor
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
      onnx_dtype(init.data_type, f"initializer {init.name!r}: ")
      self.consts.tensors[init.name] = self._half(to_tensor(arr, device))
      if arr.size <= HOST_LIMIT: self.consts.host[init.name] = arr
    self.input_names = [i.name for i in g.input if i.name not in self.consts.tensors]
    self.output_names = [o.name for o in g.output]
    self.nodes = [self._prepare(n, i) for i, n in enumerate(g.node)]
    self._fold_cache: dict[tuple, tuple[list[Any], list[Tensor | None]]] = {}

  def _half(self, t: Tensor) -> Tensor: return t.cast(dtypes.float16) if self.float16 and t.dtype is dtypes.float32 else t

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
    try: out = node.opdef.fn(*args, **node.kwargs)
    except OnnxError as e: raise OnnxError(f"node {node.name}: {e}") from None
    outs = list(out) if isinstance(out, (list, tuple)) else [out]
    hosts: list[Any] = [o if isinstance(o, np.ndarray) else None for o in outs]
    tensors: list[Tensor | None] = [o if isinstance(o, Tensor) else None for o in outs]
    if key is not None or not names:   # computed from host values only: keep small results on the host, once
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

  def __call__(self, inputs: dict[str, Any]) -> dict[str, Tensor]:
    env = _Env(dict(self.consts.tensors), dict(self.consts.host))
    for name in self.input_names:
      if name not in inputs: raise OnnxError(f"missing input {name!r} (the model takes {self.input_names})")
    for name, v in inputs.items():
      env.tensors[name] = self._half(v if isinstance(v, Tensor) else to_tensor(v, self.device))
      env.host.pop(name, None)
    for i, node in enumerate(self.nodes): self._run_node(i, node, env)
    return {name: self._tensor(env, name) for name in self.output_names}
