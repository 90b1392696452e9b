"""The UOp IR: one `Ops` enum and the immutable, hash-consed `UOp` node every stage rewrites."""
from __future__ import annotations
import enum, itertools, math, operator, struct, weakref
from _weakref import _remove_dead_weakref  # type: ignore[attr-defined]
from typing import Any, Callable, Container, Generic, Iterable, Iterator, Sequence, TypeVar, Union, overload
from core.ir.dtype import ConstType, DType, PtrDType, dtypes, truncate, AddrSpace, dtype_min, dtype_max, global_nbytes
from core.helpers import prod, fast_members, int_enum, IntEnumBody

# EXP2's arg where its source is known to be <= 0 or NaN, as (x - max(x)) * c with c > 0 is: exp2 can't overflow there
EXP2_NONPOSITIVE = "nonpositive"
# MAX's arg where NaN need not propagate: the caller's result is NaN anyway wherever an input is (softmax's row max: a NaN in a
# row makes x - max, so the row's sum and every output, NaN). A renderer may use the plain max instruction (no NaN fix-up). A
# max REDUCE_AXIS carries it as its arg's third item, a max REDUCE as its arg (Ops.MAX, MAX_NO_NAN): see reduce_op, reduce_alu
MAX_NO_NAN = "no_nan"

@fast_members
@int_enum
class Ops(IntEnumBody):
  """Every operation of every stage. Grouped in `GroupOp`; the order only matters for the canonical sort."""
  # graph structure
  SINK = enum.auto(); GROUP = enum.auto(); NOOP = enum.auto(); LINEAR = enum.auto()  # noqa: E702
  PROGRAM = enum.auto(); DEVICE = enum.auto(); SOURCE = enum.auto(); BINARY = enum.auto()  # noqa: E702
  CALL = enum.auto(); CUSTOM_FUNCTION = enum.auto(); CUSTOM = enum.auto()  # noqa: E702
  # tensor level
  UNIQUE = enum.auto(); BUFFER = enum.auto(); BUFFER_VIEW = enum.auto(); COPY = enum.auto()  # noqa: E702
  ASSIGN = enum.auto(); AFTER = enum.auto(); CONTIGUOUS = enum.auto(); CONTIGUOUS_BACKWARD = enum.auto()  # noqa: E702
  DETACH = enum.auto(); REDUCE_AXIS = enum.auto(); KERNEL = enum.auto()  # noqa: E702
  # movement
  RESHAPE = enum.auto(); PERMUTE = enum.auto(); EXPAND = enum.auto(); PAD = enum.auto()  # noqa: E702
  SHRINK = enum.auto(); FLIP = enum.auto()  # noqa: E702
  # kernel level
  PARAM = enum.auto(); DEFINE_LOCAL = enum.auto(); DEFINE_REG = enum.auto(); DEFINE_VAR = enum.auto()  # noqa: E702
  BIND = enum.auto(); SPECIAL = enum.auto(); RANGE = enum.auto(); END = enum.auto(); REDUCE = enum.auto()  # noqa: E702
  INDEX = enum.auto(); LOAD = enum.auto(); STORE = enum.auto(); BARRIER = enum.auto()  # noqa: E702
  IF = enum.auto(); ENDIF = enum.auto(); VECTORIZE = enum.auto(); GEP = enum.auto(); CAT = enum.auto()  # noqa: E702
  UNROLL = enum.auto(); CONTRACT = enum.auto(); WMMA = enum.auto()  # noqa: E702
  # command level (HCQ queue IR, core/hcq/queue_ir.py): commands, encoded words, addresses (more at the end)
  WAIT = enum.auto(); INS = enum.auto(); GETADDR = enum.auto()  # noqa: E702
  # values
  CONST = enum.auto(); VCONST = enum.auto(); CAST = enum.auto(); BITCAST = enum.auto()  # noqa: E702
  # unary
  EXP2 = enum.auto(); LOG2 = enum.auto(); SIN = enum.auto(); SQRT = enum.auto(); RECIPROCAL = enum.auto()  # noqa: E702
  NEG = enum.auto(); TRUNC = enum.auto()  # noqa: E702
  # binary
  ADD = enum.auto(); MUL = enum.auto(); SUB = enum.auto(); IDIV = enum.auto(); MOD = enum.auto(); FDIV = enum.auto()  # noqa: E702
  MAX = enum.auto(); POW = enum.auto(); CMPLT = enum.auto(); CMPNE = enum.auto(); CMPEQ = enum.auto()  # noqa: E702
  XOR = enum.auto(); OR = enum.auto(); AND = enum.auto(); SHL = enum.auto(); SHR = enum.auto()  # noqa: E702
  # ternary
  WHERE = enum.auto(); MULACC = enum.auto()  # noqa: E702
  # command level, continued: the other queue commands and the writes that fill in late values. Last, so that adding them
  # left the numbers of the ops above, and with them the canonical order of every kernel's terms, as they were
  LAUNCH = enum.auto(); SIGNAL = enum.auto(); TIMESTAMP = enum.auto()  # noqa: E702
  HOST_PATCH = enum.auto(); RING_PATCH = enum.auto(); ADVANCE = enum.auto()  # noqa: E702
  def __repr__(self) -> str: return f"Ops.{self.name}"

class GroupOp:
  Unary = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIPROCAL, Ops.NEG, Ops.TRUNC})
  Binary = frozenset({Ops.ADD, Ops.MUL, Ops.SUB, Ops.IDIV, Ops.MOD, Ops.FDIV, Ops.MAX, Ops.POW, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ,
                      Ops.XOR, Ops.OR, Ops.AND, Ops.SHL, Ops.SHR})
  Ternary = frozenset({Ops.WHERE, Ops.MULACC})
  ALU = Unary | Binary | Ternary
  Movement = frozenset({Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.PAD, Ops.SHRINK, Ops.FLIP})
  Commutative = frozenset({Ops.ADD, Ops.MUL, Ops.MAX, Ops.CMPNE, Ops.CMPEQ, Ops.XOR, Ops.AND, Ops.OR})
  Comparison = frozenset({Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ})
  Idempotent = frozenset({Ops.OR, Ops.AND, Ops.MAX})
  Buffer = frozenset({Ops.LOAD, Ops.STORE, Ops.INDEX})
  Elementwise = ALU | frozenset({Ops.CAST, Ops.BITCAST})

@fast_members
@int_enum
class AxisType(IntEnumBody):
  """The role of a kernel loop; the optimizer changes roles, the renderer turns them into code."""
  GLOBAL = 1; LOCAL = 2; LOOP = 3; GROUP_REDUCE = 4; REDUCE = 5; UPCAST = 6; UNROLL = 7; OUTER = 8  # noqa: E702
  def __repr__(self) -> str: return f"AxisType.{self.name}"

sint = Union[int, "UOp"]

# UOp.const's recent tensor-level constants (a handful of nodes each, no buffers), oldest first
_const_cache: dict[tuple, UOp] = {}
CONST_CACHE_SIZE = 256

_PLAIN_ARGS = frozenset({int, str})   # types whose equal values are the same value: a tuple of only these is its own key
_TUPLE_ONLY = frozenset({tuple})

def _arg_key(a: Any) -> Any:
  """A hash key that tells apart args Python calls equal: 0.0/-0.0, 1/1.0/True, and NaN payloads."""
  if type(a) is float: return (float, struct.pack("<d", a))
  # a shape or axis tuple (every reshape's arg) is looked at in C, without a call per element
  if type(a) is tuple:
    if _PLAIN_ARGS.issuperset(map(type, a)): return a
    # so is a pad's or shrink's ((before, after) per dim: a conv builds dozens), where the per-item keys cost ~1.2 us a node
    if _TUPLE_ONLY.issuperset(map(type, a)) and _PLAIN_ARGS.issuperset(map(type, itertools.chain.from_iterable(a))): return a
    return tuple(_arg_key(x) for x in a)
  if type(a) is bool: return (bool, a)
  return a

_T = TypeVar("_T")

class node_cached(Generic[_T]):
  """functools.cached_property without its lock (Python 3.11 takes an RLock on every first computation, ~0.2 us of the ~0.45
  a node's first .shape or .device costs; a graph builder asks that of every new node). The value is a pure function of the
  node's fields, so two threads computing it at once store equal values."""
  def __init__(self, fn: Callable[[Any], _T]):
    self.fn, self.name, self.__doc__ = fn, fn.__name__, fn.__doc__
  def __set_name__(self, owner: type, name: str) -> None: self.name = name
  @overload
  def __get__(self, obj: None, owner: type | None = None) -> node_cached[_T]: ...
  @overload
  def __get__(self, obj: object, owner: type | None = None) -> _T: ...
  def __get__(self, obj: Any, owner: type | None = None) -> Any:
    if obj is None: return self
    val = obj.__dict__[self.name] = self.fn(obj)
    return val

# The intern table: a node's key -> a weak reference to the node. Lookups take no lock. A node has no __del__ (while one ran,
# the node's weak reference still gave it: a lookup then revived the dying node without an entry); its weak reference is dead
# before any Python code runs at its death, and its callback (_drop) takes the entry out. Entries go only through
# _remove_dead_weakref, one atomic step that takes a key's entry out only while that entry is dead: a death never takes out an
# equal node's entry stored since, and a build that finds a dead entry never overwrites another build's (both stored theirs)
_ucache: dict[tuple, weakref.ReferenceType[UOp]] = {}
# arg types whose key is not the arg itself (_arg_key): a set, so the test is one hash of the type (a tuple compared each)
_keyed_args = frozenset({float, tuple, bool})
_weakref = weakref.ref

# each node's weak reference -> its key, for the reference's callback. A weakref.ref subclass with a key slot instead was called
# through tp_call on every lookup (~90 instructions more) and cost the collector and type lookups more (+0.9% a training step's
# codegen; this: +0.03%)
_keys: dict[weakref.ReferenceType[UOp], tuple] = {}

def _drop(ref: weakref.ReferenceType[UOp], remove: Callable[[dict, Any], None] = _remove_dead_weakref, table: dict = _ucache,
          pop: Callable[[Any], tuple] = _keys.pop) -> None:
  """A node's death (its weak reference's callback): its key's entry goes if it is still dead. Bound names: interpreter exit."""
  remove(table, pop(ref))

def intern_uop(cls: type, op: Ops, dtype: DType = dtypes.void, src: tuple[UOp, ...] = (), arg: Any = None, tag: Any = None) -> UOp:
  """UOp(...): the live node equal to these fields, or a new one. UOpMeta's __call__; hot graph builders (core/ir's, codegen's)
  call it directly as `intern_uop(UOp, ...)`, a plain Python call (UOp(...) goes through the metaclass's C-level call slot, ~0.7k instructions more)."""
  key = (op, dtype, src, arg if type(arg) not in _keyed_args else _arg_key(arg), tag)
  if (ref := _ucache.get(key)) is not None and (ret := ref()) is not None: return ret
  if cls is UOp:
    # the hot path of every graph builder: filled as a _UOpFields (no __init__, no __setattr__ call), then made a UOp.
    # _UOpFields() and not object.__new__(_UOpFields): the type's own call skips the builtin's argument tuple and checks (~0.3k)
    new: Any = _UOpFields()
    new.op = op; new.dtype = dtype; new.src = src; new.arg = arg; new.tag = tag; new._key = key  # noqa: E702
    new.__class__ = UOp
    ret = new
  else:
    ret = type.__call__(cls, op, dtype, src, arg, tag)
    ret._key = key
  # setdefault is one atomic step: when two threads build the same node at once, both get the one stored first
  _keys[ref := _weakref(ret, _drop)] = key
  while (old := _ucache.setdefault(key, ref)) is not ref:
    if (first := old()) is not None: return first
    _remove_dead_weakref(_ucache, key)   # an equal node's dead entry (its callback has yet to run), unless replaced meanwhile
  return ret

class UOpMeta(type):
  ucache = _ucache
  __call__ = intern_uop

class _UOpFields:
  """A UOp's fields (its slots), without UOp's guard against setting them. UOpMeta and rebuild fill a new node as one of these
  with plain attribute stores (which CPython specializes for slots), then make it a UOp: UOp adds no slot, so the layout is one
  and the __class__ assignment is allowed. Through UOp's guard each store would be a Python call, and the slot descriptors'
  __set__ called directly cost ~0.7k instructions each: 3.5k of a new node's 13.8k (callgrind)."""
  __slots__ = ("op", "dtype", "src", "arg", "tag", "_key", "__dict__", "__weakref__")
  op: Ops
  dtype: DType
  src: tuple[UOp, ...]
  arg: Any
  tag: Any
  _key: Any  # set once by UOpMeta after construction

class UOp(_UOpFields, metaclass=UOpMeta):
  """One node: `op` applied to `src` with a static `arg`, producing `dtype`. Its fields never change and equal nodes are one
  object. `__dict__` holds only values cached from the fields (shape, device, bounds, the sort key); what the engine learns
  about a node (its Buffer, the buffer holding its value) lives in the engine's own table (core/engine/state.py)."""
  __slots__ = ()
  def __init__(self, op: Ops, dtype: DType = dtypes.void, src: tuple[UOp, ...] = (), arg: Any = None, tag: Any = None):
    object.__setattr__(self, "op", op)
    object.__setattr__(self, "dtype", dtype)
    object.__setattr__(self, "src", src)
    object.__setattr__(self, "arg", arg)
    object.__setattr__(self, "tag", tag)
  def __setattr__(self, k: str, v: Any) -> None:
    if k != "_key": raise AttributeError(f"UOp is immutable (tried to set {k})")
    object.__setattr__(self, k, v)
  def __reduce__(self): return (UOp, (self.op, self.dtype, self.src, self.arg, self.tag))
  def __repr__(self) -> str:
    from core.ir.render import uop_to_python
    return uop_to_python(self)
  # NOTE: identity equality is the point of hash-consing; `==` builds CMPEQ for symbolic math only via .eq()
  __hash__ = object.__hash__

  def replace(self, **kwargs: Any) -> UOp:
    """A copy with some of op, dtype, src, arg, tag changed."""
    new = (kwargs.pop("op", self.op), kwargs.pop("dtype", self.dtype), kwargs.pop("src", self.src), kwargs.pop("arg", self.arg),
           kwargs.pop("tag", self.tag))
    if kwargs: raise TypeError(f"replace got unknown fields {list(kwargs)}")
    if new[0] is self.op and new[1] is self.dtype and new[2] is self.src and new[3] is self.arg and new[4] is self.tag: return self
    return intern_uop(UOp, *new)

  # *** graph walking ***

  def toposort(self, gate: Callable[[UOp], bool] | None = None, stop: Container[UOp] | None = None) -> dict[UOp, None]:
    """All nodes reachable from here, every source before its users (iterative; deep graphs are fine).
    `gate(u)` false stops the walk below u (u itself is still included); so does u in `stop` (gate=lambda u: u not in stop
    without a call per node: the walks that fill a memo of every node below one, stopping at the nodes it has)."""
    if stop is not None:
      assert gate is None, "toposort takes a gate or a stop set, not both"
      return {self: None} if self in stop else self._walk_until(stop)
    if gate is not None and not gate(self): return {self: None}
    if gate is None and self.op is Ops.SINK:
      # a kernel's SINK is walked whole by one stage of its codegen after another (the optimizer's trials, the expander's groups,
      # the renderer's rules, linearize: ResNet-18 b8 inference walked SINKs it had walked ~800 times in its 33 kernels): its
      # order is kept on it, and each caller gets a copy to change as it likes (a dict copy, not a walk). Only SINKs: membership
      # tests on every subexpression would keep a walk each
      if (hit := self.__dict__.get("_topo")) is None: hit = self.__dict__["_topo"] = self._walk(None)
      return dict(hit)
    return self._walk(gate)

  def _walk(self, gate: Callable[[UOp], bool] | None) -> dict[UOp, None]:
    visited: dict[UOp, None] = {}
    # depth first, each node with an iterator over its sources: a node is done when its iterator runs out (a stack of nodes
    # pushed with all their sources at once visited each node up to three times: ~1.5x the time). No set of nodes seen: a node
    # on the stack is below none of the nodes above it (a node's sources exist before it: no cycle), so only done ones recur
    stack: list[tuple[UOp, Iterator[UOp]]] = [(self, iter(self.src))]
    push, pop = stack.append, stack.pop
    while stack:
      u, srcs = stack[-1]
      for s in srcs:
        if s not in visited:
          if gate is None or gate(s): push((s, iter(s.src)))
          else: visited[s] = None
          break
      else:
        pop()
        visited[u] = None
    return visited

  def _walk_until(self, stop: Container[UOp]) -> dict[UOp, None]:
    """_walk with the gate `u not in stop`, tested in its loop."""
    visited: dict[UOp, None] = {}
    stack: list[tuple[UOp, Iterator[UOp]]] = [(self, iter(self.src))]
    push, pop = stack.append, stack.pop
    while stack:
      u, srcs = stack[-1]
      for s in srcs:
        if s not in visited:
          if s in stop: visited[s] = None
          else: push((s, iter(s.src)))
          break
      else:
        pop()
        visited[u] = None
    return visited

  @property
  def parents(self) -> tuple[UOp, ...]: return self.src

  def substitute(self, mapping: dict[UOp, UOp]) -> UOp:
    """This graph with every node that is a key of `mapping` replaced (the replacements are not walked)."""
    if not mapping: return self
    if (hit := mapping.get(self)) is not None: return hit
    done: dict[UOp, UOp] = dict(mapping)
    # _walk's depth-first walk, not below a replaced node, each node rebuilt as it is done (its sources are): one loop, no gate
    # called per node, no list of the walk
    stack: list[tuple[UOp, Iterator[UOp]]] = [(self, iter(self.src))]
    push, pop = stack.append, stack.pop
    while stack:
      u, srcs = stack[-1]
      for s in srcs:
        if s not in done:
          push((s, iter(s.src)))
          break
      else:
        pop()
        src = u.src   # (one or two sources looked up inline, as pattern._rewrite_in_order does)
        new_src = (done[src[0]],) if (k := len(src)) == 1 else (done[src[0]], done[src[1]]) if k == 2 else tuple([done[s] for s in src])
        # tuples of UOps compare by identity (no __eq__): the same sources keep the node
        done[u] = u if new_src == src else intern_uop(UOp, u.op, u.dtype, new_src, u.arg, u.tag)
    return done[self]

  def sink(self, *srcs: UOp, **kwargs: Any) -> UOp: return UOp(Ops.SINK, dtypes.void, (self,) + srcs, **kwargs)

  # *** tensor-level shape and device ***

  @node_cached
  def shape(self) -> tuple[sint, ...] | None:
    """The shape of a tensor-level node (None for nodes without one, like kernel-level index math)."""
    op, s = self.op, self.src
    if op is Ops.BUFFER: return (self.arg,)
    if op is Ops.BUFFER_VIEW: return (self.arg[0],)
    if op in (Ops.CONST, Ops.DEFINE_VAR, Ops.BIND): return ()
    if op is Ops.RESHAPE or op is Ops.EXPAND: return tuple(self.arg)
    if op in (Ops.PERMUTE, Ops.PAD, Ops.SHRINK, Ops.FLIP, Ops.REDUCE_AXIS):
      ps = s[0].shape
      if ps is None: return None
      if op is Ops.PERMUTE: return tuple(ps[i] for i in self.arg)
      if op is Ops.PAD: return tuple(d + b + a for d, (b, a) in zip(ps, self.arg))
      if op is Ops.SHRINK: return tuple(e if isinstance(b, int) and b == 0 else e - b for b, e in self.arg)
      if op is Ops.FLIP: return ps
      return tuple(1 if i in self.arg[1] else d for i, d in enumerate(ps))
    if op in GroupOp.Elementwise or op in (Ops.CONTIGUOUS, Ops.CONTIGUOUS_BACKWARD, Ops.DETACH, Ops.COPY, Ops.ASSIGN, Ops.AFTER):
      for x in (s[1:] if op is Ops.WHERE else s):
        if x.op is not Ops.DEVICE and (sh := x.shape) is not None: return sh
      return None
    return None

  @property
  def ndim(self) -> int: return len(self.shape or ())
  @property
  def size(self) -> sint: return prod(self.shape or ())

  @node_cached
  def device(self) -> str | tuple[str, ...] | None:
    """The device name of a tensor-level node, from its DEVICE source (COPY's destination wins)."""
    if self.op is Ops.DEVICE: return self.arg
    if self.op is Ops.COPY: return self.src[1].device
    for s in self.src:
      if (d := s.device) is not None: return d
    return None

  @property
  def base(self) -> UOp:
    """The node under any movement ops."""
    u = self
    while u.op in GroupOp.Movement: u = u.src[0]
    return u

  @property
  def after_base(self) -> UOp:
    """The node under any AFTERs: the buffer (PARAM, DEFINE_LOCAL, DEFINE_REG) an INDEX reads, whose AFTERs only order accesses."""
    u = self
    while u.op is Ops.AFTER: u = u.src[0]
    return u

  # *** builders ***

  @staticmethod
  def const(dtype: DType, value: Any, device: str | tuple[str, ...] | None = None, shape: tuple[sint, ...] | None = None) -> UOp:
    """A constant; with `device` it is a tensor-level scalar, expanded to `shape` when given."""
    # tensor-level constants repeat (x + 1 in a loop): the most recent ones are kept alive, built once and looked up before
    # anything else (isinstance against UOp, whose class has a metaclass, is ~0.25 us a test). Only scalar dtypes' entries
    # exist (a vector dtype returns below, before its key is stored), and an int is its own _arg_key
    key = None
    if device is not None and shape is not None and ((tv := type(value)) is int or tv is float or tv is bool):
      key = (dtype, value if tv is int else _arg_key(value), device, shape)
      if (hit := _const_cache.get(key)) is not None: return hit
    if isinstance(value, UOp): return value
    if dtype.count > 1 and not isinstance(value, tuple):
      return UOp(Ops.VCONST, dtype, arg=tuple(truncate(dtype.scalar(), value) for _ in range(dtype.count)))
    if isinstance(value, tuple): return UOp(Ops.VCONST, dtype, arg=tuple(truncate(dtype.scalar(), v) for v in value))
    ret = intern_uop(UOp, Ops.CONST, dtype, (UOp(Ops.DEVICE, arg=device),) if device is not None else (), truncate(dtype, value))
    if shape is not None: ret = ret.reshape((1,) * len(shape)).expand(shape)
    if key is not None and all(type(d) is int for d in shape):  # type: ignore[union-attr]
      if len(_const_cache) >= CONST_CACHE_SIZE: del _const_cache[next(iter(_const_cache))]
      _const_cache[key] = ret
    return ret
  def const_like(self, value: Any) -> UOp:
    """A constant of this node's dtype (and, at tensor level, its device and shape)."""
    if self.shape is not None and self.device is not None and self.op not in (Ops.DEFINE_VAR, Ops.BIND):
      return UOp.const(self.dtype, value, self.device, self.shape)
    return UOp.const(self.dtype, value)
  def alu(self, op: Ops, *srcs: UOp) -> UOp:
    dtype = dtypes.bool.vec(self.dtype.count) if op in GroupOp.Comparison else (srcs[-1] if op is Ops.WHERE else self).dtype
    return intern_uop(UOp, op, dtype, (self,) + srcs)
  def _binop(self, op: Ops, x: Any, reverse: bool) -> UOp:
    y = x if isinstance(x, UOp) else self.const_like(x)
    return y.alu(op, self) if reverse else self.alu(op, y)

  def __add__(self, x: Any) -> UOp: return self._binop(Ops.ADD, x, False)
  def __radd__(self, x: Any) -> UOp: return self._binop(Ops.ADD, x, True)
  def __sub__(self, x: Any) -> UOp: return self._binop(Ops.SUB, x, False)
  def __rsub__(self, x: Any) -> UOp: return self._binop(Ops.SUB, x, True)
  def __mul__(self, x: Any) -> UOp: return self._binop(Ops.MUL, x, False)
  def __rmul__(self, x: Any) -> UOp: return self._binop(Ops.MUL, x, True)
  def __floordiv__(self, x: Any) -> UOp: return self._binop(Ops.IDIV, x, False)
  def __rfloordiv__(self, x: Any) -> UOp: return self._binop(Ops.IDIV, x, True)
  def __truediv__(self, x: Any) -> UOp: return self._binop(Ops.FDIV, x, False)
  def __rtruediv__(self, x: Any) -> UOp: return self._binop(Ops.FDIV, x, True)
  def __mod__(self, x: Any) -> UOp: return self._binop(Ops.MOD, x, False)
  def __rmod__(self, x: Any) -> UOp: return self._binop(Ops.MOD, x, True)
  def __and__(self, x: Any) -> UOp: return self._binop(Ops.AND, x, False)
  def __rand__(self, x: Any) -> UOp: return self._binop(Ops.AND, x, True)
  def __or__(self, x: Any) -> UOp: return self._binop(Ops.OR, x, False)
  def __ror__(self, x: Any) -> UOp: return self._binop(Ops.OR, x, True)
  def __xor__(self, x: Any) -> UOp: return self._binop(Ops.XOR, x, False)
  def __rxor__(self, x: Any) -> UOp: return self._binop(Ops.XOR, x, True)
  def __lshift__(self, x: Any) -> UOp: return self._binop(Ops.SHL, x, False)
  def __rshift__(self, x: Any) -> UOp: return self._binop(Ops.SHR, x, False)
  def __lt__(self, x: Any) -> UOp: return self._binop(Ops.CMPLT, x, False)
  def __gt__(self, x: Any) -> UOp: return self._binop(Ops.CMPLT, x, True)
  def __le__(self, x: Any) -> UOp: return self._binop(Ops.CMPLT, x, True).logical_not()
  def __ge__(self, x: Any) -> UOp: return self._binop(Ops.CMPLT, x, False).logical_not()
  def __neg__(self) -> UOp: return self.alu(Ops.NEG)
  def __invert__(self) -> UOp: return self.logical_not() if self.dtype.scalar() is dtypes.bool else self ^ -1
  def __bool__(self) -> bool: raise TypeError(f"a UOp has no truth value; compare with .vmin/.vmax or use `is` ({self.op.name})")
  def ne(self, x: Any) -> UOp: return self._binop(Ops.CMPNE, x, False)
  def eq(self, x: Any) -> UOp: return self._binop(Ops.CMPEQ, x, False)
  def logical_not(self) -> UOp: return self.ne(True)
  def maximum(self, x: Any) -> UOp: return self._binop(Ops.MAX, x, False)
  def minimum(self, x: Any) -> UOp: return -(-self).maximum(-x if not isinstance(x, UOp) else x.alu(Ops.NEG))
  def where(self, x: Any, y: Any) -> UOp:
    if isinstance(x, UOp): yv = y if isinstance(y, UOp) else x.const_like(y)
    elif isinstance(y, UOp): yv, x = y, y.const_like(x)
    else: raise TypeError("where needs at least one UOp branch")
    return self.alu(Ops.WHERE, x, yv)
  def cast(self, dtype: DType) -> UOp: return self if self.dtype is dtype else intern_uop(UOp, Ops.CAST, dtype, (self,))
  def bitcast(self, dtype: DType) -> UOp: return self if self.dtype is dtype else UOp(Ops.BITCAST, dtype, (self,))
  def exp2(self, nonpositive: bool = False) -> UOp:
    """2**self; `nonpositive` where the caller knows self <= 0 or NaN (arg EXP2_NONPOSITIVE: a renderer may drop the overflow guard)."""
    return UOp(Ops.EXP2, self.dtype, (self,), EXP2_NONPOSITIVE) if nonpositive else self.alu(Ops.EXP2)
  def log2(self) -> UOp: return self.alu(Ops.LOG2)
  def sin(self) -> UOp: return self.alu(Ops.SIN)
  def sqrt(self) -> UOp: return self.alu(Ops.SQRT)
  def reciprocal(self) -> UOp: return self.alu(Ops.RECIPROCAL)
  def trunc(self) -> UOp: return self.alu(Ops.TRUNC)

  # movement (tensor level); identity moves return self so graphs stay small
  def reshape(self, shape: tuple[sint, ...]) -> UOp: return self if self.shape == tuple(shape) else UOp(Ops.RESHAPE, self.dtype, (self,), tuple(shape))
  def permute(self, order: tuple[int, ...]) -> UOp:
    return self if tuple(order) == tuple(range(len(order))) else UOp(Ops.PERMUTE, self.dtype, (self,), tuple(order))
  def expand(self, shape: tuple[sint, ...]) -> UOp: return self if self.shape == tuple(shape) else UOp(Ops.EXPAND, self.dtype, (self,), tuple(shape))
  def pad(self, arg: tuple[tuple[sint, sint], ...]) -> UOp:
    return self if all(b == 0 and a == 0 for b, a in arg) else UOp(Ops.PAD, self.dtype, (self,), tuple(tuple(x) for x in arg))
  def shrink(self, arg: tuple[tuple[sint, sint], ...]) -> UOp:
    assert self.shape is not None
    if all(b == 0 and e == d for (b, e), d in zip(arg, self.shape)): return self
    return UOp(Ops.SHRINK, self.dtype, (self,), tuple(tuple(x) for x in arg))
  def flip(self, axes: tuple[bool, ...]) -> UOp: return self if not any(axes) else UOp(Ops.FLIP, self.dtype, (self,), tuple(axes))
  def r(self, op: Ops, axes: tuple[int, ...], no_nan: bool = False) -> UOp:
    """Reduce over `axes` by `op`; `no_nan` (a max only) where NaN need not propagate (MAX_NO_NAN)."""
    axes = tuple(sorted(a for a in axes if self.shape is None or self.shape[a] != 1))
    return self if not axes else UOp(Ops.REDUCE_AXIS, self.dtype, (self,), (op, axes, MAX_NO_NAN) if no_nan and op is Ops.MAX else (op, axes))
  def contiguous(self) -> UOp: return UOp(Ops.CONTIGUOUS, self.dtype, (self,))
  def copy_to_device(self, device: str) -> UOp: return UOp(Ops.COPY, self.dtype, (self, UOp(Ops.DEVICE, arg=device)))
  def assign(self, x: UOp, arg: Any = None) -> UOp: return UOp(Ops.ASSIGN, self.dtype, (self, x), arg)
  def after(self, *deps: UOp) -> UOp: return intern_uop(UOp, Ops.AFTER, self.dtype, (self,) + deps)
  @staticmethod
  def new_buffer(device: str, size: int, dtype: DType, num: int | None = None) -> UOp:
    """A fresh buffer node: the UNIQUE source makes two buffers of equal size different nodes."""
    return UOp(Ops.BUFFER, dtype, (UOp.unique(num), UOp(Ops.DEVICE, arg=device)), size)
  # next() on a count is atomic under the GIL: two threads never get the same number (and so never one shared buffer node)
  unique_ids = itertools.count()
  @staticmethod
  def unique(num: int | None = None) -> UOp:
    return UOp(Ops.UNIQUE, arg=next(UOp.unique_ids) if num is None else num)

  # kernel level
  @staticmethod
  def param(slot: int, dtype: PtrDType) -> UOp: return UOp(Ops.PARAM, dtype, (), slot)
  @staticmethod
  def range(end: sint, axis: int, kind: AxisType = AxisType.LOOP) -> UOp:
    return UOp(Ops.RANGE, dtypes.index, (_as_index(end),), (axis, kind))
  @staticmethod
  def special(end: sint, name: str) -> UOp: return UOp(Ops.SPECIAL, dtypes.index, (_as_index(end),), name)
  def index(self, *idx: UOp, valid: UOp | None = None) -> UOp:
    return intern_uop(UOp, Ops.INDEX, self.dtype, (self,) + idx + ((valid,) if valid is not None else ()))
  def load(self, *alt: UOp, dtype: DType | None = None) -> UOp:
    base = self.dtype.base if isinstance(self.dtype, PtrDType) else self.dtype
    return intern_uop(UOp, Ops.LOAD, dtype or base, (self,) + alt)
  def store(self, value: UOp, *extra: UOp) -> UOp: return intern_uop(UOp, Ops.STORE, dtypes.void, (self, value) + extra)
  def end(self, *ranges: UOp) -> UOp: return self if not ranges else intern_uop(UOp, Ops.END, dtypes.void, (self,) + ranges)
  def reduce(self, *ranges: UOp, op: Ops | tuple[Ops, str] = Ops.ADD) -> UOp: return UOp(Ops.REDUCE, self.dtype, (self,) + ranges, op)
  def gep(self, i: int | tuple[int, ...]) -> UOp:
    idx = (i,) if isinstance(i, int) else tuple(i)
    if self.dtype.count == 1 and idx == (0,): return self
    return intern_uop(UOp, Ops.GEP, self.dtype.scalar().vec(len(idx)), (self,), idx)
  @staticmethod
  def vectorize(*srcs: UOp) -> UOp: return srcs[0] if len(srcs) == 1 else intern_uop(UOp, Ops.VECTORIZE, srcs[0].dtype.vec(len(srcs)), srcs)
  def unbroadcast(self) -> UOp:
    """The one value a broadcast (a VECTORIZE of the same node in every lane) repeats; any other node itself."""
    return self.src[0] if self.op is Ops.VECTORIZE and all(s is self.src[0] for s in self.src) else self

  # *** symbolic variables ***

  @staticmethod
  def variable(name: str, vmin: ConstType, vmax: ConstType, dtype: DType = dtypes.index) -> UOp:
    if not vmin <= vmax: raise ValueError(f"variable {name!r} has an empty range [{vmin}, {vmax}]")
    return UOp(Ops.DEFINE_VAR, dtype, (), (name, vmin, vmax))
  def bind(self, value: int) -> UOp:
    if self.op is not Ops.DEFINE_VAR: raise TypeError(f"only variables can be bound, not {self.op.name}")
    if not self.arg[1] <= value <= self.arg[2]: raise ValueError(f"{self.arg[0]}={value} is outside its range [{self.arg[1]}, {self.arg[2]}]")
    return UOp(Ops.BIND, self.dtype, (self, self.const_like(value)))
  def unbind(self) -> tuple[UOp, int]:
    if self.op is not Ops.BIND: raise TypeError(f"only a BIND can be unbound, not {self.op.name}")
    return self.src[0], self.src[1].arg
  @property
  def expr(self) -> str: return self.arg[0]
  def variables(self) -> list[UOp]:
    return sorted({u for u in self.toposort() if u.op is Ops.DEFINE_VAR}, key=lambda v: v.arg)

  # *** bounds of integer (and bool) expressions ***

  @property
  def vmin(self) -> ConstType: return self._min_max[0]
  @property
  def vmax(self) -> ConstType: return self._min_max[1]
  @node_cached
  def _min_max(self) -> tuple[ConstType, ConstType]:
    if all("_min_max" in s.__dict__ for s in self.src): return _bounds(self)  # the common case: sources already known
    # the graph may be deep: make sure the sources are computed first, without recursion
    for u in self.toposort(gate=lambda u: "_min_max" not in u.__dict__):
      if "_min_max" not in u.__dict__: u.__dict__["_min_max"] = _bounds(u)
    return self.__dict__["_min_max"]

  def divides(self, v: int) -> UOp | None:
    """self // v when v divides self exactly by structure, else None."""
    if v == 1: return self
    if self.op is Ops.CONST: return self.const_like(self.arg // v) if self.arg % v == 0 else None
    if self.op is Ops.VCONST: return self.const_like(tuple(x // v for x in self.arg)) if all(x % v == 0 for x in self.arg) else None
    if self.op is Ops.ADD:
      d0, d1 = self.src[0].divides(v), self.src[1].divides(v)
      return d0 + d1 if d0 is not None and d1 is not None else None
    if self.op is Ops.MUL:
      if (d0 := self.src[0].divides(v)) is not None: return d0 * self.src[1]
      if (d1 := self.src[1].divides(v)) is not None: return self.src[0] * d1
    return None
  def const_factor(self) -> int:
    """The largest integer known to divide this expression."""
    if self.op is Ops.CONST: return abs(self.arg) if isinstance(self.arg, int) else 1
    if self.op is Ops.VCONST: return math.gcd(*self.arg)
    if self.op is Ops.ADD: return math.gcd(self.src[0].const_factor(), self.src[1].const_factor())
    if self.op is Ops.MUL: return self.src[0].arg if self.src[0].op is Ops.CONST else self.src[1].arg if self.src[1].op is Ops.CONST else 1
    return 1

  def simplify(self) -> UOp:
    from core.ir.symbolic import simplify
    return simplify(self)
  def ssimplify(self) -> sint:
    s = self.simplify()
    return s.arg if s.op is Ops.CONST else s

def _as_index(x: sint) -> UOp: return x if isinstance(x, UOp) else UOp.const(dtypes.index, x)

def reduce_op(arg: Ops | tuple[Ops, str]) -> Ops:
  """The op a REDUCE's arg combines by (a max without NaN propagation is (Ops.MAX, MAX_NO_NAN))."""
  return arg if isinstance(arg, Ops) else arg[0]

def reduce_alu(arg: Ops | tuple[Ops, str], a: UOp, b: UOp) -> UOp:
  """a and b combined as a REDUCE with `arg` combines them: the MAX of a (Ops.MAX, MAX_NO_NAN) reduction keeps the flag."""
  return a.alu(arg, b) if isinstance(arg, Ops) else UOp(Ops.MAX, a.dtype, (a, b), MAX_NO_NAN)

def Variable(name: str, vmin: ConstType, vmax: ConstType, dtype: DType = dtypes.index) -> UOp:
  """A symbolic integer in [vmin, vmax], e.g. a batch size that changes between Jit calls."""
  return UOp.variable(name, vmin, vmax, dtype)

def _corners(fn: Callable[[Any, Any], Any], a: UOp, b: UOp) -> tuple[Any, Any]:
  vals = [fn(x, y) for x in (a.vmin, a.vmax) for y in (b.vmin, b.vmax)]
  return min(vals), max(vals)

# each scalar dtype's (min, max) as _bounds clamps to them (index math is unbounded), asked once a dtype, not once a node
_dtype_ranges: dict[DType, tuple[ConstType, ConstType]] = {}

def _dtype_range(d: DType) -> tuple[ConstType, ConstType]:
  if (r := _dtype_ranges.get(d)) is None: r = _dtype_ranges[d] = (-math.inf, math.inf) if d is dtypes.index else (dtype_min(d), dtype_max(d))
  return r

def _clamp(lo: ConstType, hi: ConstType, r: tuple[Any, Any]) -> tuple[ConstType, ConstType]:
  """r, or the whole range [lo, hi] where r leaves it: the value could wrap around, so no better bound is safe."""
  return (lo, hi) if r[0] < lo or r[1] > hi else r

def _bounds(u: UOp) -> tuple[ConstType, ConstType]:
  """Interval bounds of `u`, assuming its sources' bounds are already cached."""
  op = u.op
  if op is Ops.CONST: return (u.arg, u.arg)
  d = u.dtype.scalar() if not isinstance(u.dtype, PtrDType) else dtypes.int64
  lo, hi = _dtype_ranges.get(d) or _dtype_range(d)
  s = u.src
  if op is Ops.VCONST: return (min(u.arg), max(u.arg))
  if op is Ops.DEFINE_VAR: return (u.arg[1], u.arg[2])
  if op in (Ops.BIND, Ops.ASSIGN): return s[0]._min_max
  if op in (Ops.RANGE, Ops.SPECIAL): return (0, s[0].vmax - 1)
  if op in (Ops.GEP, Ops.VECTORIZE) and s and s[0].dtype.scalar() is not dtypes.void:
    return (min(x.vmin for x in s), max(x.vmax for x in s))
  if op is Ops.ADD:   # (the commonest: index sums)
    (a0, a1), (b0, b1) = s[0]._min_max, s[1]._min_max
    return _clamp(lo, hi, (a0 + b0, a1 + b1))
  if op is Ops.SUB: return _clamp(lo, hi, (s[0].vmin - s[1].vmax, s[0].vmax - s[1].vmin))
  if op is Ops.NEG: return _clamp(lo, hi, (-s[0].vmax, -s[0].vmin))
  if op is Ops.MUL:
    if any(math.isinf(x) for x in (s[0].vmin, s[0].vmax, s[1].vmin, s[1].vmax)) and dtypes.is_int(d):
      return lo, hi
    return _clamp(lo, hi, _corners(operator.mul, s[0], s[1]))
  if op is Ops.MAX: return (max(s[0].vmin, s[1].vmin), max(s[0].vmax, s[1].vmax))
  if op is Ops.IDIV and (s[1].vmin > 0 or s[1].vmax < 0) and dtypes.is_int(d) and not any(math.isinf(x) for x in (s[0].vmin, s[0].vmax)):
    from core.ir.alu import _idiv
    return _clamp(lo, hi, _corners(_idiv, s[0], s[1]))
  if op is Ops.MOD and s[1].vmin > 0 and dtypes.is_int(d):
    m = s[1].vmax - 1
    if s[0].vmin >= 0: return (0, min(s[0].vmax, m))
    if s[0].vmax <= 0: return (max(s[0].vmin, -m), 0)
    return (max(s[0].vmin, -m), min(s[0].vmax, m))
  # float bounds can hold NaN (0*inf), so they never decide a comparison
  if op in GroupOp.Comparison and not (dtypes.is_int(s[0].dtype) or s[0].dtype.scalar() is dtypes.bool): return (False, True)
  if op is Ops.CMPLT: return (s[0].vmax < s[1].vmin, s[0].vmin < s[1].vmax)
  if op is Ops.CMPNE:
    if s[0].vmax < s[1].vmin or s[0].vmin > s[1].vmax: return (True, True)
    if s[0].vmin == s[0].vmax == s[1].vmin == s[1].vmax: return (False, False)
    return (False, True)
  if op is Ops.CMPEQ:
    if s[0].vmax < s[1].vmin or s[0].vmin > s[1].vmax: return (False, False)
    if s[0].vmin == s[0].vmax == s[1].vmin == s[1].vmax: return (True, True)
    return (False, True)
  if op is Ops.WHERE:
    if s[0].vmin is True or s[0].vmin == 1 and s[0].vmax == 1: return s[1]._min_max
    if s[0].vmax is False or s[0].vmax == 0 and s[0].vmin == 0: return s[2]._min_max
    return (min(s[1].vmin, s[2].vmin), max(s[1].vmax, s[2].vmax))
  if op is Ops.AND and d is dtypes.bool: return (s[0].vmin and s[1].vmin, s[0].vmax and s[1].vmax)
  if op is Ops.OR and d is dtypes.bool: return (s[0].vmin or s[1].vmin, s[0].vmax or s[1].vmax)
  if op is Ops.AND and dtypes.is_int(d) and s[1].op is Ops.CONST and s[1].arg >= 0 and s[0].vmin >= 0:
    return (0, min(s[0].vmax, s[1].arg))
  # shift counts at or past the width are masked by the target (x >> 40 on int32 is x >> 8), so only bound smaller ones
  bits = 64 if d is dtypes.index else 8 * d.itemsize
  if op is Ops.SHL and s[1].op is Ops.CONST and s[0].vmin >= 0 and 0 <= s[1].arg < bits:
    return _clamp(lo, hi, (s[0].vmin << s[1].arg, s[0].vmax << s[1].arg))
  if op is Ops.SHR and s[1].op is Ops.CONST and s[0].vmin >= 0 and 0 <= s[1].arg < bits:
    return (s[0].vmin >> s[1].arg, s[0].vmax >> s[1].arg)
  if op is Ops.CAST and (dtypes.is_int(d) or d is dtypes.bool) and (dtypes.is_int(s[0].dtype) or s[0].dtype.scalar() is dtypes.bool):
    slo, shi = s[0].vmin, s[0].vmax
    if d is dtypes.bool: return (bool(slo) and bool(shi) and not (slo <= 0 <= shi), not (slo == shi == 0))
    if lo <= slo and shi <= hi: return (slo, shi)
  if d is dtypes.bool: return (False, True)
  return lo, hi

def exec_uop_tree(u: UOp, var_vals: dict[UOp, int]) -> Any:
  """Evaluate a scalar expression tree with Python semantics of each ALU op (for tests and tools)."""
  from core.ir.alu import exec_alu
  vals: dict[UOp, Any] = {}
  for x in u.toposort():
    if x.op is Ops.CONST: vals[x] = x.arg
    elif x.op is Ops.DEFINE_VAR: vals[x] = var_vals[x]
    elif x.op is Ops.BIND: vals[x] = vals[x.src[1]]
    elif x.op is Ops.CAST: vals[x] = truncate(x.dtype, vals[x.src[0]])
    elif x.op in GroupOp.ALU: vals[x] = exec_alu(x.op, x.dtype, tuple(vals[s] for s in x.src))
    else: raise TypeError(f"can't evaluate {x.op.name}")
  return vals[u]

_ = AddrSpace  # re-exported for `eval(str(uop))`

# *** symbolic shapes: movement args may hold UOps (bound variables, expressions of them) ***

def arg_uops(arg: Any) -> list[UOp]:
  """The UOps inside a movement op's arg (shape tuples, (begin, end) pairs)."""
  if isinstance(arg, UOp): return [arg]
  if isinstance(arg, tuple): return [u for a in arg for u in arg_uops(a)]
  return []

def map_arg(arg: Any, fn: Callable[[UOp], Any]) -> Any:
  if isinstance(arg, UOp): return fn(arg)
  if isinstance(arg, tuple): return tuple(map_arg(a, fn) for a in arg)
  return arg

def params_nbytes(nodes: Iterable[UOp]) -> int:
  """The bytes of the global buffers (PARAMs) among `nodes` (distinct: a toposort), a kernel's footprint."""
  return sum(global_nbytes(u.dtype) for u in nodes if u.op is Ops.PARAM)

def union_of(sets: dict[UOp, frozenset[UOp]], srcs: Iterable[UOp]) -> frozenset[UOp]:
  """The union of the sets of `srcs` (those `sets` has), returned as one of them where it holds the others: in per-node walks
  (loop scopes, loop dependencies) most nodes add nothing to their sources' sets, and a new union per node was most of the time."""
  out: frozenset[UOp] = frozenset()
  for s in srcs:
    if not (e := sets.get(s)) or e is out or e <= out: continue
    out = e if out <= e else out | e
  return out

def sym_val(x: sint) -> int:
  """The current value of an int or of an expression of bound variables."""
  if isinstance(x, int): return x
  binds = {u.src[0]: u.src[1].arg for u in x.toposort() if u.op is Ops.BIND}
  return int(exec_uop_tree(x.substitute({u: u.src[0] for u in x.toposort() if u.op is Ops.BIND}), binds))

def rebuild(nodes: list[UOp], steps: Sequence[tuple[Ops, DType, tuple[int, ...], Any, Any, Any]]) -> None:
  """Appends to `nodes` one node per step (op, dtype, source indices into nodes, arg, arg's hash key as UOpMeta makes it, tag): the
  nodes UOpMeta would make, for a replay of recorded steps (core/tensor/plans.py) without a call or an arg key per node. A new
  node is stored first and an equal live one found by the same setdefault (one hash of its key, not two), as intern_uop does."""
  add, setdefault, ref_of, keys = nodes.append, _ucache.setdefault, weakref.ref, _keys
  for op, dtype, srcs, arg, arg_key, tag in steps:
    src = (nodes[srcs[0]],) if len(srcs) == 1 else (nodes[srcs[0]], nodes[srcs[1]]) if len(srcs) == 2 else tuple([nodes[i] for i in srcs])
    key = (op, dtype, src, arg_key, tag)
    ret: Any = _UOpFields()   # as UOpMeta fills one
    ret.op = op; ret.dtype = dtype; ret.src = src; ret.arg = arg; ret.tag = tag; ret._key = key  # noqa: E702
    ret.__class__ = UOp
    keys[ref := ref_of(ret, _drop)] = key
    while (old := setdefault(key, ref)) is not ref:
      if (first := old()) is not None:
        ret = first   # the equal live node (ours dies unstored: its callback leaves the live entry)
        break
      _remove_dead_weakref(_ucache, key)
    add(ret)
