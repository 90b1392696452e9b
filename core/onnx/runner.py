"""OnnxRunner: runs an ONNX graph node by node with core Tensors.

Values known on the host (initializers, Constant nodes, Shape results and what is computed from only those) are kept as
numpy arrays beside their Tensors, so shape-like inputs (Reshape's shape, Slice's starts, ...) never need a device read;
such host-only nodes are evaluated once per distinct input and cached, which also keeps them out of a Jit capture.
Values of ONNX types core has no dtype for (float8, 4-bit, ...) are held in a wider dtype and tracked by name (core.onnx.narrow);
sequences are Seq lists of Tensors, an optional is its value or None (empty). Subgraphs (If's branches, Loop's and Scan's body) run
in a scope that sees the enclosing graph's values."""
from __future__ import annotations
import os
from dataclasses import dataclass, field
from functools import partial
from typing import Any
import numpy as np
from core.helpers import getenv
from core.ir.dtype import dtypes
from core.tensor.tensor import Tensor
from core.onnx.dtypes import onnx_dtype, to_numpy, to_tensor
from core.onnx.fold import fold_batchnorm
from core.onnx.narrow import NARROW, Narrow, from_storage, narrow_elem, storage_array
from core.onnx.registry import ATTR_ALIASES, EMPTY, OPS, Graph, OnnxError, OpDef, Seq
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
  graphs: tuple[str, ...] = ()   # the kwargs that are subgraphs (_Graph), bound to the node's scope when it runs

@dataclass
class _Env:
  tensors: dict[str, Tensor] = field(default_factory=dict)
  host: dict[str, np.ndarray] = field(default_factory=dict)
  narrow: dict[str, int] = field(default_factory=dict)   # name -> the ONNX element type a narrow value holds
  values: dict[str, Seq | None] = field(default_factory=dict)   # sequences, and empty optionals (None)

  def has(self, name: str) -> bool: return name in self.tensors or name in self.host or name in self.values

@dataclass
class _Graph:
  nodes: list[_Node]
  inputs: list[str]
  outputs: list[str]
  consts: _Env
  fold_cache: dict[tuple, tuple[list[Any], list[Tensor | None]]] = field(default_factory=dict)

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
    if isinstance(model, (str, os.PathLike)): model = onnx.load(os.fspath(model))
    self.model = model
    self.device = device
    self.float16 = bool(getenv("FLOAT16", 0)) if float16 is None else float16
    self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
    newest = onnx.defs.onnx_opset_version()
    if self.opset > newest: raise OnnxError(f"model opset {self.opset} is newer than the installed onnx knows ({newest})")
    self.graph = self._graph(model.graph, top=True)
    self.consts, self.input_names, self.output_names, self.nodes = self.graph.consts, self.graph.inputs, self.graph.outputs, self.graph.nodes
    # inputs declared as sequences (or optional sequences) take a list of arrays; a list for any other input is one array
    self._seq_inputs = {i.name for i in model.graph.input if i.type.WhichOneof("value") == "sequence_type" or
                        (i.type.WhichOneof("value") == "optional_type" and i.type.optional_type.elem_type.WhichOneof("value") == "sequence_type")}

  def _graph(self, g: Any, top: bool) -> _Graph:
    from onnx import numpy_helper
    consts = _Env()
    arrays = {}
    for init in g.initializer:
      if init.data_type not in NARROW: onnx_dtype(init.data_type, f"initializer {init.name!r}: ")
      arrays[init.name] = numpy_helper.to_array(init)
    nodes, arrays = fold_batchnorm(list(g.node), arrays, {o.name for o in g.output})
    for name, arr in arrays.items():
      if (c := self._scalar(arr)) is not None: consts.tensors[name], consts.host[name] = c, arr
      else: self._put(consts, name, arr)
    # a top-level input with an initializer is a constant (also when folding left nothing reading it)
    inits = {init.name for init in g.initializer}
    inputs = [i.name for i in g.input if not top or i.name not in inits]
    return _Graph([self._prepare(n, i) for i, n in enumerate(nodes)], inputs, [o.name for o in g.output], consts)

  def _half(self, t: Tensor) -> Tensor: return t.cast(dtypes.float16) if self.float16 and t.dtype is dtypes.float32 else t

  def _as_tensor(self, v: Any) -> Tensor: return self._half(v if isinstance(v, Tensor) else to_tensor(np.asarray(v), self.device))

  def _put(self, env: _Env, name: str, v: Any) -> None:
    """Stores a value (a Tensor, an array, a sequence as a list, an empty optional as None or EMPTY, a Narrow) under name;
    small arrays are kept on the host too, narrow ones as their storage."""
    for d in (env.tensors, env.host, env.narrow, env.values): d.pop(name, None)
    if v is None or v is EMPTY: env.values[name] = None
    elif isinstance(v, (list, tuple)): env.values[name] = Seq(self._as_tensor(x) for x in v)
    elif isinstance(v, Narrow): env.tensors[name], env.narrow[name] = v.t, v.elem
    elif isinstance(v, Tensor): env.tensors[name] = self._half(v)
    elif (elem := narrow_elem(v)) is not None: env.tensors[name], env.narrow[name] = to_tensor(storage_array(v, elem), self.device), elem
    else:
      arr = np.asarray(v)
      env.tensors[name] = self._half(to_tensor(arr, self.device))
      if arr.size <= HOST_LIMIT: env.host[name] = arr

  def _prepare(self, n: Any, i: int) -> _Node:
    label = _node_label(n, i)
    name = n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type}"   # ops of other domains register qualified
    if (opdef := OPS.get(name)) is None:
      if n.domain in ("", "ai.onnx"): raise OnnxError(f"node {label}: op {n.op_type} is not supported")
      raise OnnxError(f"node {label}: op {name} (domain {n.domain!r}) is not supported")
    kwargs: dict[str, Any] = {}
    graphs = []
    for a in n.attribute:
      key = ATTR_ALIASES.get(a.name, a.name)
      if key not in opdef.attrs: raise OnnxError(f"node {label}: op {n.op_type} attribute {a.name!r} is not supported")
      if a.type == a.GRAPH:
        kwargs[key] = self._graph(a.g, top=False)
        graphs.append(key)
      else: kwargs[key] = _attr_value(a)
    if "_opset" in opdef.context: kwargs["_opset"] = self.opset
    if "_nout" in opdef.context: kwargs["_nout"] = len(n.output)
    if "_device" in opdef.context: kwargs["_device"] = self.device
    return _Node(label, n.op_type, list(n.input), list(n.output), opdef, kwargs, tuple(graphs))

  def _scalar(self, arr: np.ndarray) -> Tensor | None:
    """A constant of one element as a constant Tensor (no buffer): kernels fold it in like a Python number, where a 0-d buffer
    was a load per element that kept a Clip's bounds from vectorizing (a depthwise conv + Relu6 ran ~5x slower)."""
    if arr.size != 1 or arr.dtype.kind not in "biuf" or arr.dtype.name == "bfloat16" or narrow_elem(arr) is not None: return None
    return self._half(Tensor.full(arr.shape, arr.reshape(-1)[0], device=self.device))

  def _tensor(self, env: _Env, name: str) -> Tensor:
    if (t := env.tensors.get(name)) is None:
      h = env.host[name]
      t = env.tensors[name] = c if (c := self._scalar(h)) is not None else self._half(to_tensor(h, self.device))
    return t

  def _host(self, env: _Env, name: str) -> np.ndarray:
    if (h := env.host.get(name)) is None: h = env.host[name] = to_numpy(env.tensors[name])   # a data-dependent shape: read it back
    return h

  def _arg(self, env: _Env, node: _Node, i: int, nm: str) -> Any:
    if not nm: return None
    if nm in env.values: return env.values[nm]
    return self._host(env, nm) if i in node.opdef.static else self._tensor(env, nm)

  def _call_graph(self, g: _Graph, outer: _Env, *args: Any) -> list[Any]:
    """Runs a subgraph with args as its inputs, in a scope that also sees the enclosing graph's values."""
    env = _Env({**outer.tensors, **g.consts.tensors}, {**outer.host, **g.consts.host}, {**outer.narrow, **g.consts.narrow},
               {**outer.values, **g.consts.values})
    if len(args) != len(g.inputs): raise OnnxError(f"a subgraph takes {len(g.inputs)} inputs ({g.inputs}), got {len(args)}")
    for name, v in zip(g.inputs, args): self._put(env, name, v)
    for i, node in enumerate(g.nodes): self._run_node(g, i, node, env)
    return [self._value(env, n) for n in g.outputs]

  def _value(self, env: _Env, name: str) -> Any:
    """A value as ops see it: a Tensor, a host array, a Narrow, a Seq, or EMPTY for an empty optional."""
    if not env.has(name): raise OnnxError(f"output {name!r} is not computed by the graph")
    if name in env.values: return EMPTY if (v := env.values[name]) is None else v
    if name in env.narrow: return Narrow(env.tensors[name], env.narrow[name])
    return env.host[name] if name in env.host else env.tensors[name]

  def _run_node(self, graph: _Graph, idx: int, node: _Node, env: _Env) -> None:
    names = [n for n in node.inputs if n]
    for nm in names:
      if not env.has(nm): raise OnnxError(f"node {node.name}: input {nm!r} is not computed by the graph")
    # a subgraph reads the enclosing scope, which the fold key does not see
    foldable = names and not node.graphs and all(n in env.host for n in names)
    key: tuple | None = None
    if foldable:
      key = (idx,) + tuple((env.host[n].dtype.str, env.host[n].shape, env.host[n].tobytes()) for n in names)
      if (hit := graph.fold_cache.get(key)) is not None:
        self._store(node, env, *hit)
        return
    args = [self._arg(env, node, i, nm) for i, nm in enumerate(node.inputs)]
    kwargs = node.kwargs
    if node.graphs:
      kwargs = {**kwargs, **{k: Graph(partial(self._call_graph, kwargs[k], env), tuple(kwargs[k].inputs), tuple(kwargs[k].outputs))
                             for k in node.graphs}}
    if "_narrow" in node.opdef.context: kwargs = {**kwargs, "_narrow": [env.narrow.get(nm) if nm else None for nm in node.inputs]}
    elif bad := [nm for nm in names if nm in env.narrow]:
      raise OnnxError(f"node {node.name}: op {node.op_type} does not take {NARROW[env.narrow[bad[0]]].name} inputs ({bad[0]!r})")
    try: out = node.opdef.fn(*args, **kwargs)
    except OnnxError as e: raise OnnxError(f"node {node.name}: {e}") from None
    outs = [out] if isinstance(out, Seq) or not isinstance(out, (list, tuple)) else list(out)
    if any(isinstance(o, (Seq, Narrow)) or o is EMPTY or o is None or narrow_elem(o) is not None for o in outs):
      for nm, o in zip(node.outputs, outs):   # sequences, optionals and narrow values: stored as they are, never folded
        if nm: self._put(env, nm, o)
      return
    hosts: list[Any] = [o if isinstance(o, np.ndarray) else None for o in outs]
    tensors: list[Tensor | None] = [o if isinstance(o, Tensor) else None for o in outs]
    if key is not None or not names:   # computed from host values only: keep small results on the host, once
      hosts = [h if h is not None else (to_numpy(t) if t is not None and t.numel() <= HOST_LIMIT else None) for h, t in zip(hosts, tensors)]
      if key is not None: graph.fold_cache[key] = (hosts, tensors)
    self._store(node, env, hosts, tensors)

  def _store(self, node: _Node, env: _Env, hosts: list[Any], tensors: list[Tensor | None]) -> None:
    for nm, h, t in zip(node.outputs, hosts, tensors):
      if not nm: continue
      env.narrow.pop(nm, None)
      env.values.pop(nm, None)
      if h is not None: env.host[nm] = h
      else: env.host.pop(nm, None)
      if t is not None: env.tensors[nm] = t
      else: env.tensors.pop(nm, None)

  def _execute(self, inputs: dict[str, Any]) -> _Env:
    env = _Env(dict(self.consts.tensors), dict(self.consts.host), dict(self.consts.narrow), dict(self.consts.values))
    for name in self.input_names:
      if name not in inputs: raise OnnxError(f"missing input {name!r} (the model takes {self.input_names})")
    for name, v in inputs.items():
      self._put(env, name, np.asarray(v) if isinstance(v, (list, tuple)) and name not in self._seq_inputs else v)
      env.host.pop(name, None)   # graph inputs change between calls: never folded
    for i, node in enumerate(self.nodes): self._run_node(self.graph, i, node, env)
    return env

  def __call__(self, inputs: dict[str, Any]) -> dict[str, Any]:
    """The outputs as Tensors (a sequence as a list of Tensors, an empty optional as None); an output of a narrow ONNX type
    (float8, int4, ...) comes in its storage dtype."""
    env = self._execute(inputs)
    return {name: env.values[name] if name in env.values else self._tensor(env, name) for name in self.output_names}

  def numpy(self, inputs: dict[str, Any]) -> dict[str, Any]:
    """The outputs as numpy arrays (a sequence as a list of them, an empty optional as None), narrow ONNX types as the
    ml_dtypes types onnx uses."""
    env = self._execute(inputs)
    def arr(n: str) -> Any:
      if n in env.values: return None if (v := env.values[n]) is None else [to_numpy(t) for t in v]
      return from_storage(to_numpy(self._tensor(env, n)), env.narrow[n]) if n in env.narrow else to_numpy(self._tensor(env, n))
    return {n: arr(n) for n in self.output_names}
