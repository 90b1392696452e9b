"""The PYTHON device: a numpy interpreter of linearized kernels, slow but compiler-free; the reference for other backends."""
from __future__ import annotations
import functools, json, time
from typing import Any, Callable, Sequence
import numpy as np
from core.helpers import ContextVar, getenv, prod
from core.ir.dtype import AddrSpace, DType, PtrDType, dtypes, to_np
from core.ir.ops import GroupOp, Ops, UOp
from core.device.allocator import Allocator, BufferSpec
from core.device.compiler import Compiler
from core.device.renderer import Renderer
from core.device.tensor_core import TENSOR_CORES, TensorCore, tensor_core
from core.device.compiled import Compiled
from core.device.target import Target

# *** C semantics of ALU ops and casts on numpy arrays (core.ir.alu.exec_alu is the specification) ***

# ops C computes in floating point even on integer operands (trunc, exp2, ... on an int promote it to double)
_FLOAT_ONLY = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIPROCAL, Ops.TRUNC, Ops.FDIV, Ops.POW})

def np_dtype(d: DType) -> np.dtype:
  """The numpy dtype of a scalar or vector value; `index` math runs in int64."""
  return np.dtype(np.int64) if d.scalar() is dtypes.index else to_np(d.scalar())

def float_to_int(x: np.ndarray, ndt: np.dtype) -> np.ndarray:
  """C cast float -> int: truncate toward zero, wrap modulo 2**bits; NaN/inf give 0 (undefined in C, stable here)."""
  t = np.trunc(x.astype(np.float64))
  t = np.fmod(np.where(np.isfinite(t), t, 0.0), 2.0 ** 64)  # fmod is exact, so the wrap loses nothing
  t = np.where(t >= 2.0 ** 63, t - 2.0 ** 64, np.where(t < -(2.0 ** 63), t + 2.0 ** 64, t))
  return t.astype(np.int64).astype(ndt)

def cast(x: np.ndarray, dtype: DType) -> np.ndarray:
  """A C value cast of `x` to `dtype`."""
  ndt = np_dtype(dtype)
  if dtype.scalar() is dtypes.bool: return x != 0
  if dtypes.is_int(dtype) and x.dtype.kind == "f": return float_to_int(x, ndt)
  return x.astype(ndt)

def bitcast(x: np.ndarray, dtype: DType) -> np.ndarray:
  """Reinterprets the bytes of each value; the sizes must match, as in C's memcpy-based bitcast."""
  ndt = np_dtype(dtype)
  if x.dtype.itemsize * (x.shape[-1] if dtype.count > 1 and x.ndim > 1 else 1) != ndt.itemsize * dtype.count:
    raise TypeError(f"BITCAST from {x.dtype} to {dtype}: sizes differ")
  return np.ascontiguousarray(x).view(ndt)

def _idiv_mod(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """C's quotient and remainder: truncate toward zero; x/0 and x%0 give 0 (undefined in C, stable here)."""
  minus_one = (b == -1) if a.dtype.kind == "i" else np.zeros(b.shape, bool)
  safe = np.where((b == 0) | minus_one, 1, b).astype(a.dtype)   # MIN/-1 overflows numpy: it is just a wrapped negation
  q, r = np.floor_divide(a, safe), np.remainder(a, safe)
  if a.dtype.kind == "i": q = q + ((r != 0) & ((a < 0) != (safe < 0))).astype(a.dtype)  # floor -> trunc
  q = np.where(minus_one, np.negative(a), np.where(b == 0, 0, q)).astype(a.dtype)
  return q, np.where(b == 0, 0, a - q * b).astype(a.dtype)

def _mulacc(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray: return a * b + c
def _idiv(a: np.ndarray, b: np.ndarray) -> np.ndarray: return _idiv_mod(a, b)[0]
def _mod(a: np.ndarray, b: np.ndarray) -> np.ndarray: return _idiv_mod(a, b)[1]

# the ufunc of each op; integer and float arithmetic differ only in which ops are allowed and where they are computed
_UFUNC: dict[Ops, Callable[..., np.ndarray]] = {
  Ops.NEG: np.negative, Ops.EXP2: np.exp2, Ops.LOG2: np.log2, Ops.SIN: np.sin, Ops.SQRT: np.sqrt, Ops.RECIPROCAL: np.reciprocal,
  Ops.TRUNC: np.trunc, Ops.ADD: np.add, Ops.SUB: np.subtract, Ops.MUL: np.multiply, Ops.FDIV: np.true_divide, Ops.MAX: np.maximum,
  Ops.POW: np.power, Ops.MULACC: _mulacc, Ops.IDIV: _idiv, Ops.MOD: _mod, Ops.XOR: np.bitwise_xor, Ops.OR: np.bitwise_or,
  Ops.AND: np.bitwise_and, Ops.CMPLT: np.less, Ops.CMPNE: np.not_equal, Ops.CMPEQ: np.equal}
# correctly rounded in IEEE arithmetic, so half/single results equal exec_alu's "compute in double, round once"
_EXACT_FLOAT = frozenset({Ops.NEG, Ops.SQRT, Ops.RECIPROCAL, Ops.TRUNC, Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.MAX})
# bool arithmetic is arithmetic on 0/1 then a cast back to bool (nonzero), which makes these the logic ops
_BOOL_UFUNC: dict[Ops, Callable[..., Any]] = {Ops.NEG: np.logical_not, Ops.ADD: np.logical_or, Ops.SUB: np.logical_xor, Ops.MUL: np.logical_and,
               Ops.MAX: np.logical_or, Ops.XOR: np.logical_xor, Ops.OR: np.logical_or, Ops.AND: np.logical_and,
               Ops.MULACC: lambda a, b, c: (a & b) | c}

def _in_double(fn: Callable[..., np.ndarray], ndt: np.dtype) -> Callable[..., np.ndarray]:
  def run(*s: np.ndarray) -> np.ndarray:
    ret = fn(*(x.astype(np.float64) for x in s))
    if ndt.kind == "f": return ret.astype(ndt)
    return ret != 0 if ndt.kind == "b" else float_to_int(ret, ndt)
  return run

def _shift(fn: Callable[..., np.ndarray], ndt: np.dtype) -> Callable[..., np.ndarray]:
  mask = 8 * ndt.itemsize - 1  # C leaves counts >= the width undefined; like exec_alu we take the count modulo the width
  return lambda a, b: fn(a, b.astype(ndt) & mask)

@functools.cache
def alu_fn(op: Ops, dtype: DType) -> Callable[..., np.ndarray]:
  """The function computing `op` with result dtype `dtype`, on arrays of the operand dtype (the result's, except for
  comparisons and WHERE's condition). Raises TypeError for ops C does not define on the dtype."""
  ndt = np_dtype(dtype)
  if op in GroupOp.Comparison: return _UFUNC[op]
  if op is Ops.WHERE: return np.where
  if ndt.kind == "b":
    if op in _BOOL_UFUNC: return _BOOL_UFUNC[op]
    if op in (Ops.SHL, Ops.SHR):  # C promotes bool to int for a shift; the result is nonzero or not
      u8 = np.dtype(np.uint8)
      return lambda a, b: _shift(np.left_shift if op is Ops.SHL else np.right_shift, u8)(a.astype(u8), b) != 0
    if op in _FLOAT_ONLY: return _in_double(_UFUNC[op], ndt)
  elif ndt.kind == "f":
    if op in _EXACT_FLOAT: return _UFUNC[op]
    if op in _FLOAT_ONLY or op is Ops.MULACC: return _in_double(_UFUNC[op], ndt)
  else:
    if op in _FLOAT_ONLY: return _in_double(_UFUNC[op], ndt)  # trunc(int), exp2(int), ... promote to double in C
    if op in (Ops.SHL, Ops.SHR): return _shift(np.left_shift if op is Ops.SHL else np.right_shift, ndt)
    if op in _UFUNC: return _UFUNC[op]
  raise TypeError(f"PYTHON device: {op.name} is not defined on {dtype}")

def alu(op: Ops, dtype: DType, srcs: Sequence[np.ndarray]) -> np.ndarray:
  """`op(*srcs)` computed in `dtype` (the result dtype) with C semantics, elementwise over numpy arrays."""
  fn, ndt = alu_fn(op, dtype), np_dtype(dtype)
  if op in GroupOp.Comparison: srcs = [srcs[0], srcs[1].astype(srcs[0].dtype, copy=False)]
  elif op is Ops.WHERE: srcs = [srcs[0].astype(bool, copy=False), srcs[1].astype(ndt, copy=False), srcs[2].astype(ndt, copy=False)]
  else: srcs = [x.astype(ndt, copy=False) for x in srcs]
  with np.errstate(all="ignore"): return np.asarray(fn(*srcs)).astype(np.bool_ if op in GroupOp.Comparison else ndt, copy=False)

# *** the "source": a linearized kernel serialized as JSON ***

def _enc_arg(a: Any) -> Any:
  if a is None or isinstance(a, (bool, int, float, str)): return a  # IntEnums (AxisType) become their int
  if isinstance(a, tuple): return [_enc_arg(x) for x in a]
  return repr(a)  # args the interpreter never reads (the SINK's KernelInfo) are kept only for humans

def _dec_arg(a: Any) -> Any: return tuple(_dec_arg(x) for x in a) if isinstance(a, list) else a

@functools.cache
def _dec_dtype(s: str) -> DType:
  # the text is a DType repr written by serialize_uops: evaluate it with nothing but the dtype names in scope
  return eval(s, {"__builtins__": {}, "dtypes": dtypes, "AddrSpace": AddrSpace})

def serialize_uops(name: str, uops: list[UOp]) -> str:
  """The linearized kernel as JSON: {"name", "uops": [[op name, dtype repr, [source positions], arg], ...]}."""
  pos = {u: i for i, u in enumerate(uops)}
  missing = [s for u in uops for s in u.src if s not in pos]
  if missing: raise ValueError(f"kernel {name}: {missing[0].op.name} is used before it is defined; uops must be linearized")
  rows = [[u.op.name, repr(u.dtype), [pos[s] for s in u.src], _enc_arg(u.arg)] for u in uops]
  return json.dumps({"name": name, "uops": rows}, separators=(",", ":"))

def deserialize_uops(src: str) -> tuple[str, list[tuple[Ops, DType, tuple[int, ...], Any]]]:
  """Inverse of serialize_uops: (kernel name, [(op, dtype, source positions, arg)])."""
  d = json.loads(src)
  return d["name"], [(Ops[o], _dec_dtype(t), tuple(s), _dec_arg(a)) for o, t, s, a in d["uops"]]

class PythonRenderer(Renderer):
  """Renders a linearized kernel to its JSON form. Every output axis becomes a launch dimension (SPECIAL gidx), workgroup
  axes (LOCAL, GROUP) work-item ids (lidx); every thread runs each op in lockstep, so barriers and shared memory hold."""
  device = "PYTHON"
  suffix = "PYTHON"
  has_local = True
  has_shared = True
  global_max = (2 ** 31 - 1,) * 3
  local_max = (1024, 1024, 64)
  shared_max = 64 * 1024
  supports_float4 = False
  has_images = False
  has_atomics = False
  # numpy has no bfloat16 or fp8
  supported_dtypes = frozenset((dtypes.bool,) + dtypes.ints + (dtypes.float16, dtypes.float32, dtypes.float64))
  def __init__(self, tc: str | None = None):
    # PYTHON_TC=METAL|NV: offer that vendor's tensor cores (those of dtypes numpy has), which the interpreter runs lane by lane
    # from their layouts, so the TC option's kernels for that target are checked numerically here
    vendor = getenv("PYTHON_TC", "") if tc is None else tc
    if vendor and vendor not in TENSOR_CORES:
      raise ValueError(f"PYTHON_TC={vendor!r}: choose one of {', '.join(TENSOR_CORES)} (or leave it unset for no tensor cores)")
    self.tensor_cores = tuple(t for t in TENSOR_CORES.get(vendor, ()) if t.dtype_in in self.supported_dtypes)
  def render(self, name: str, uops: list[UOp]) -> str: return serialize_uops(name, uops)

class PythonCompiler(Compiler):
  """Nothing to compile: the binary is the JSON text; caching would cost more than it saves."""
  def __init__(self, cachekey: str | None = None): super().__init__(cachekey)
  def compile(self, src: str) -> bytes: return src.encode()

# *** the interpreter ***

FOLD_LOOPS = ContextVar("PYTHON_FOLD_LOOPS", 1)  # 0: run every loop iteration by iteration (to check the fast path against)

_NOOPS = frozenset({Ops.SINK, Ops.NOOP, Ops.BARRIER, Ops.GROUP})  # BARRIER: all threads run each op in lockstep anyway
_SUPPORTED = GroupOp.ALU | _NOOPS | frozenset({Ops.AFTER, Ops.PARAM, Ops.DEFINE_VAR, Ops.DEFINE_REG, Ops.DEFINE_LOCAL, Ops.CONST, Ops.VCONST,
  Ops.SPECIAL, Ops.RANGE, Ops.END, Ops.IF, Ops.ENDIF, Ops.INDEX, Ops.LOAD, Ops.STORE, Ops.CAST, Ops.BITCAST, Ops.VECTORIZE, Ops.GEP,
  Ops.WMMA})

@functools.cache
def _wmma_gather(key: str) -> tuple[TensorCore, tuple[np.ndarray, ...]]:
  """The tensor core and, per operand, flat (lane * elements + element) positions: of A's M*K, B's K*N and C's M*N elements in
  row-major order (which fragment slot holds each), and of each lane's D elements in the row-major M*N result."""
  tc = tensor_core(key)
  def owners(lay: Any) -> np.ndarray:
    return np.array([(lambda le: le[0] * lay.elements + le[1])(lay.owner(r, c)) for r in range(lay.rows) for c in range(lay.cols)])
  d = np.array([(lambda rc: rc[0] * tc.c.cols + rc[1])(tc.c.coords(lane, e)) for lane in range(tc.threads) for e in range(tc.c.elements)])
  return tc, (owners(tc.a), owners(tc.b), owners(tc.c), d)

def run_wmma(key: str, a: np.ndarray, b: np.ndarray, c: np.ndarray, n: int) -> np.ndarray:
  """Ops.WMMA over `n` threads (consecutive runs of tc.threads form a warp): each value is (threads or 1, fragment elements).
  The warp's matrices are gathered from its lanes' fragments by the layouts, multiplied exactly (float64 holds every product
  of two halves or two floats' 24-bit mantissas up to rounding once) and accumulated, and each lane gets its elements of D."""
  tc, (ia, ib, ic, idd) = _wmma_gather(key)
  M, N, K = tc.dims
  if n % tc.threads: raise RuntimeError(f"WMMA {key}: {n} threads are not whole warps of {tc.threads}")
  w = n // tc.threads
  def warp(x: np.ndarray, idx: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    return np.broadcast_to(x, (n, x.shape[-1])).reshape(w, -1)[:, idx].reshape((w,) + shape).astype(np.float64)
  d = warp(a, ia, (M, K)) @ warp(b, ib, (K, N)) + warp(c, ic, (M, N))
  return d.reshape(w, M * N)[:, idd].reshape(n, tc.c.elements).astype(np_dtype(tc.dtype_acc))

class _Ptr:
  """A pointer value: its memory, and per thread the element index and whether the access is allowed.
  `rows` selects the thread's (DEFINE_REG) or workgroup's (DEFINE_LOCAL) row of a private memory; None for buffers."""
  __slots__ = ("mem", "rows", "idx", "valid")
  def __init__(self, mem: np.ndarray, rows: np.ndarray | None, idx: np.ndarray | None = None, valid: np.ndarray | None = None):
    self.mem, self.rows, self.idx, self.valid = mem, rows, idx, valid

def _and(a: np.ndarray | None, b: np.ndarray | None) -> np.ndarray | None:
  return b if a is None else a if b is None else a & b

def _expand_to(m: np.ndarray, ndim: int) -> np.ndarray: return m.reshape(m.shape + (1,) * (ndim - m.ndim))

def _view(buf: np.ndarray, dtype: DType) -> np.ndarray:
  """The raw bytes of a buffer seen as elements of `dtype` (a trailing partial element is not addressable)."""
  ndt = np_dtype(dtype)
  return buf[:buf.nbytes - buf.nbytes % ndt.itemsize].view(ndt)

class _Fold:
  """A loop whose only effect is folding values into accumulators: acc = acc OP x, with x independent of every register.
  Such a loop can run all its iterations at once (an extra leading axis) and fold them in order with ufunc.accumulate,
  which rounds exactly like the sequential loop."""
  __slots__ = ("end", "body", "accs")
  def __init__(self, end: int, body: list[int], accs: list[tuple[int, int, int]]):
    self.end, self.body, self.accs = end, body, accs   # accs: (STORE position, OP position, position of x)

_FOLD_OPS = frozenset({Ops.ADD, Ops.MUL, Ops.MAX})
_FOLD_BODY_OPS = GroupOp.ALU | frozenset({Ops.CONST, Ops.INDEX, Ops.LOAD, Ops.STORE, Ops.CAST, Ops.BITCAST, Ops.NOOP})

Decoded = list[tuple[Ops, DType, tuple[int, ...], Any]]

def _fold_acc(uops: Decoded, users: dict[int, list[int]], st: int) -> tuple[tuple[int, Any], tuple[int, int, int], int] | None:
  """For `acc[k] = acc[k] OP x` at STORE position `st`: ((register, k), (store, OP, x) positions, the register load), else None.
  The register load must feed only OP and OP only the store, so no other value sees the accumulator mid-loop."""
  ix, val = uops[st][2]
  op, dtype, srcs, _ = uops[val]
  if uops[uops[ix][2][0]][0] is not Ops.DEFINE_REG or len(uops[ix][2]) != 2 or uops[uops[ix][2][1]][0] is not Ops.CONST: return None
  if op not in _FOLD_OPS or not isinstance(alu_fn(op, dtype), np.ufunc) or users.get(val) != [st]: return None
  key = (uops[ix][2][0], uops[uops[ix][2][1]][3])
  lds = [x for x in srcs if uops[x][0] is Ops.LOAD and uops[uops[uops[x][2][0]][2][0]][0] is Ops.DEFINE_REG]
  if len(lds) != 1 or users.get(lds[0]) != [val]: return None
  lix = uops[lds[0]][2][0]
  if len(uops[lix][2]) != 2 or (uops[lix][2][0], uops[uops[lix][2][1]][3]) != key: return None
  return key, (st, val, srcs[1] if srcs[0] == lds[0] else srcs[0]), lds[0]

def _find_folds(uops: Decoded) -> dict[int, _Fold]:
  """The RANGE positions of loops that _Fold describes (innermost loops only: a nested loop is never a fold)."""
  users: dict[int, list[int]] = {}
  for i, (_, _, src, _) in enumerate(uops):
    for x in src: users.setdefault(x, []).append(i)
  folds: dict[int, _Fold] = {}
  for e, (op, _, src, _) in enumerate(uops):
    if op is not Ops.END or len(src) != 2 or uops[src[1]][0] is not Ops.RANGE: continue
    body = list(range(src[1] + 1, e))
    if any(uops[i][0] not in _FOLD_BODY_OPS or uops[i][1].count != 1 or uops[i][1].vcount != 1 for i in body): continue
    if any(u > e for i in body for u in users.get(i, [])): continue  # a value the loop leaves behind: its last iteration matters
    found = [_fold_acc(uops, users, i) for i in body if uops[i][0] is Ops.STORE]
    if not found or any(f is None for f in found) or len({f[0] for f in found}) != len(found): continue  # type: ignore[index]
    skip = {i for f in found for i in (*f[1][:2], f[2])}  # type: ignore[index]
    # every other memory access must be a load from a kernel buffer (which the loop does not write: all its stores are folds)
    if any(uops[i][0] is Ops.LOAD and i not in skip and uops[uops[uops[i][2][0]][2][0]][0] is not Ops.PARAM for i in body): continue
    folds[src[1]] = _Fold(e, [i for i in body if i not in skip], [f[1] for f in found])  # type: ignore[index]
  return folds

class PythonProgram:
  """Runs a linearized kernel with numpy: every thread of the launch grid at once, each value an array over threads
  (shape (1,) while it is the same for all of them). Loops run in Python; IF and loop exits become thread masks."""
  def __init__(self, name: str, lib: bytes):
    kname, uops = deserialize_uops(lib.decode())
    self.name = name or kname
    if (bad := sorted({op.name for op, *_ in uops if op not in _SUPPORTED})):
      raise NotImplementedError(f"PYTHON device can't run {bad} (kernel {self.name})")
    # decoded once: (op, dtype, numpy dtype, sources, arg, ALU function); ops C leaves undefined on a dtype fail here
    # the numpy dtype is None on pointer and void ops; fn is a numpy ufunc (so has .accumulate) or a plain function
    self.uops: list[tuple[Ops, DType, Any, tuple[int, ...], Any, Any]] = [
      (op, dt, None if dt.scalar() is dtypes.void or isinstance(dt, PtrDType) else np_dtype(dt), src, arg,
       alu_fn(op, dt) if op in GroupOp.ALU else None) for op, dt, src, arg in uops]
    self.folds = _find_folds(uops) if FOLD_LOOPS else {}
    # the loops each END closes, innermost (latest opened) first
    self.closes = {i: sorted((x for x in src if uops[x][0] is Ops.RANGE), reverse=True) for i, (op, _, src, _) in enumerate(uops) if op is Ops.END}

  def __call__(self, *bufs: Any, global_size: Sequence[int] = (1, 1, 1), local_size: Sequence[int] = (1, 1, 1),
               vals: Sequence[int] = (), wait: bool = False) -> float | None:
    st = time.perf_counter()
    with np.errstate(all="ignore"): self._run(bufs, tuple(global_size) + (1,) * (3 - len(global_size)),
                                              tuple(local_size) + (1,) * (3 - len(local_size)), tuple(vals))
    return time.perf_counter() - st if wait else None

  def _special(self, arg: str, gs: tuple[int, ...], ls: tuple[int, ...], group: np.ndarray, lid: np.ndarray) -> np.ndarray:
    dim = int(arg[-1])
    def coord(ids: np.ndarray, dims: tuple[int, ...]) -> np.ndarray:
      inner = prod(dims[:dim])
      x = ids if inner == 1 else ids // inner
      return x if prod(dims[dim:]) == dims[dim] else x % dims[dim]   # the outermost used dim needs no modulo
    if arg.startswith("gidx"): return coord(group, gs)
    if arg.startswith("lidx"): return coord(lid, ls)
    if arg.startswith("idx"): return coord(group, gs) * ls[dim] + coord(lid, ls)  # global thread id along dim
    raise ValueError(f"kernel {self.name}: unknown SPECIAL {arg!r}")

  def _check_bounds(self, i: int, idx: np.ndarray, p: _Ptr) -> None:
    size = p.mem.shape[0 if p.rows is None else 1]
    if idx.size == 1:
      if 0 <= int(idx.flat[0]) < size: return
    elif idx.size == 0 or (idx.min() >= 0 and idx.max() < size): return
    bad = idx[(idx < 0) | (idx >= size)].flat[0]
    raise IndexError(f"kernel {self.name}: uop {i} ({self.uops[i][0].name}) accesses element {bad} of a buffer of {size} elements")

  @staticmethod
  def _lane_index(p: _Ptr, count: int) -> np.ndarray:
    """Per-thread element indices; a vector access to a memory of scalars reads `count` consecutive elements."""
    idx = p.idx if p.idx is not None else np.zeros(1, np.int64)
    if count > 1 and idx.ndim == 1 and p.mem.ndim == (1 if p.rows is None else 2): return idx[:, None] + np.arange(count)
    return idx

  def _load(self, i: int, p: _Ptr, alt: np.ndarray | None, count: int, ndt: np.dtype, active: np.ndarray | None) -> np.ndarray:
    idx = self._lane_index(p, count)
    rows = None if p.rows is None else _expand_to(p.rows, idx.ndim) if count > 1 else p.rows
    if (m := _and(p.valid, active)) is None:
      self._check_bounds(i, idx, p)
      return (p.mem[idx] if rows is None else p.mem[rows, idx]).astype(ndt, copy=False)
    if count > 1: m = _expand_to(m, idx.ndim)   # lanes are the trailing axis
    m = np.broadcast_to(m, np.broadcast_shapes(m.shape, idx.shape))
    fallback = alt if alt is not None else np.zeros(1, ndt)
    if not m.any(): return np.broadcast_to(fallback, np.broadcast_shapes(m.shape, fallback.shape)).astype(ndt)
    self._check_bounds(i, np.broadcast_to(idx, m.shape)[m], p)
    idx = np.where(m, idx, 0)  # masked-off threads read element 0, and that value is discarded
    val = p.mem[idx] if rows is None else p.mem[rows, idx]
    return np.where(_expand_to(m, val.ndim), val, fallback).astype(ndt, copy=False)

  def _store(self, i: int, p: _Ptr, val: np.ndarray, active: np.ndarray | None, n: int) -> None:
    m = _and(p.valid, active)
    idx = self._lane_index(p, val.shape[-1] if val.ndim > 1 else 1)
    if m is None and idx.size == 1 and (p.rows is None or n == 1):  # one address for every thread: the last write wins anyway
      self._check_bounds(i, idx, p)
      if p.rows is None: p.mem[idx] = val[-1:] if val.ndim == 1 else val[-1]
      else: p.mem[p.rows, idx] = val
      return
    ishape = (n,) + idx.shape[1:]
    idx = np.broadcast_to(idx, ishape)
    val = np.broadcast_to(val, ishape + p.mem.shape[(1 if p.rows is None else 2):])
    rows = None if p.rows is None else np.broadcast_to(_expand_to(p.rows, len(ishape)), ishape)
    if m is not None:
      sel = np.broadcast_to(_expand_to(m, len(ishape)), ishape)
      idx, val, rows = idx[sel], val[sel], None if rows is None else rows[sel]
    self._check_bounds(i, idx, p)
    if rows is None: p.mem[idx] = val
    else: p.mem[rows, idx] = val

  def _run_fold(self, fold: _Fold, r: int, trips: int, vals: list[Any], active: np.ndarray | None, n: int) -> None:
    """All iterations of a fold loop at once, in chunks that bound memory, folded into the accumulators in order."""
    uops = self.uops
    chunk = max(1, (1 << 20) // max(n, 1))
    for k0 in range(0, trips, chunk):
      vals[r] = np.arange(k0, min(trips, k0 + chunk), dtype=uops[r][2])[:, None]   # iterations on a new leading axis
      for i in fold.body:
        op, dtype, ndt, src, arg, fn = uops[i]
        if fn is not None: vals[i] = fn(*[vals[x] for x in src])
        elif op is Ops.LOAD: vals[i] = self._load(i, vals[src[0]], vals[src[1]] if len(src) > 1 else None, 1, ndt, active)
        elif op is Ops.INDEX:
          p = vals[src[0]]
          vals[i] = _Ptr(p.mem, p.rows, vals[src[1]] if p.idx is None else p.idx + vals[src[1]],
                         p.valid if len(src) < 3 else _and(p.valid, vals[src[2]].astype(bool, copy=False)))
        elif op is Ops.CONST: vals[i] = np.array([arg], ndt)
        elif op is Ops.CAST: vals[i] = cast(vals[src[0]], dtype)
        elif op is Ops.BITCAST: vals[i] = bitcast(vals[src[0]], dtype)
      for st, opi, xi in fold.accs:
        p, (_, _, ndt, _, _, fn) = vals[uops[st][3][0]], uops[opi]
        k = int(p.idx.flat[0])
        cur = p.mem[:, k]
        x = np.broadcast_to(vals[xi].astype(ndt, copy=False), (len(vals[r]), n))
        folded = fn.accumulate(np.concatenate([cur[None], x]), axis=0, dtype=ndt)[-1]
        p.mem[:, k] = folded if active is None else np.where(active, folded, cur)

  def _run(self, bufs: tuple[Any, ...], gs: tuple[int, ...], ls: tuple[int, ...], var_vals: tuple[int, ...]) -> None:
    ngroups, nlocal = prod(gs), prod(ls)
    n = ngroups * nlocal
    tid = np.arange(n, dtype=np.int32 if n < 2 ** 31 else np.int64)
    group, lid = (tid, np.zeros(1, tid.dtype)) if nlocal == 1 else (tid // nlocal, tid % nlocal)
    vals: list[Any] = [None] * len(self.uops)
    masks: list[np.ndarray | None] = [None]   # the active-thread mask of each open IF / loop; None is "all threads"
    loops: dict[int, list[Any]] = {}          # RANGE position -> [counter, trip count, end per thread, mask outside]
    nvar, pc, uops = 0, 0, self.uops
    while pc < len(uops):
      op, dtype, ndt, src, arg, fn = uops[pc]
      if fn is not None: vals[pc] = fn(*[vals[x] for x in src])  # ALU: the hot path
      elif op is Ops.LOAD: vals[pc] = self._load(pc, vals[src[0]], vals[src[1]] if len(src) > 1 else None, dtype.count, ndt, masks[-1])
      elif op is Ops.INDEX:
        p, off = vals[src[0]], vals[src[1]]
        if not isinstance(p, _Ptr): raise TypeError(f"kernel {self.name}: INDEX at {pc} is not on a pointer")
        vals[pc] = _Ptr(p.mem, p.rows, off if p.idx is None else p.idx + off,
                        p.valid if len(src) < 3 else _and(p.valid, vals[src[2]].astype(bool, copy=False)))
      elif op is Ops.STORE:
        p = vals[src[0]]
        self._store(pc, p, vals[src[1]].astype(p.mem.dtype, copy=False), masks[-1], n)
      elif op is Ops.CONST or op is Ops.VCONST: vals[pc] = np.array([arg], ndt)
      elif op is Ops.RANGE:
        end = vals[src[0]]
        if pc in self.folds and end.size == 1:
          self._run_fold(self.folds[pc], pc, int(end[0]), vals, masks[-1], n)
          pc = self.folds[pc].end + 1
          continue
        live = end if masks[-1] is None or end.size == 1 else end[np.broadcast_to(masks[-1], end.shape)]
        trips = max(1, int(live.max()) if live.size else 0)  # a zero-trip loop runs once with every thread masked off
        loops[pc] = [0, trips, end, masks[-1]]
        vals[pc] = np.zeros(1, ndt)
        masks.append(_and(masks[-1], None if end.size == 1 and end[0] > 0 else 0 < end))
      elif op is Ops.END:
        for r in self.closes[pc]:
          state = loops[r]
          state[0] += 1
          if state[0] < state[1]:
            vals[r] = np.array([state[0]], uops[r][2])
            end = state[2]
            masks[-1] = _and(state[3], None if end.size == 1 and end[0] > state[0] else state[0] < end)
            pc = r
            break
          masks.pop()
          del loops[r]
      elif op is Ops.IF: masks.append(_and(masks[-1], vals[src[0]].astype(bool, copy=False)))
      elif op is Ops.ENDIF: masks.pop()
      elif op is Ops.SPECIAL: vals[pc] = self._special(arg, gs, ls, group, lid).astype(ndt)
      elif op is Ops.PARAM:
        if arg >= len(bufs): raise TypeError(f"kernel {self.name} takes buffer #{arg}, but only {len(bufs)} buffers were passed")
        # a zero-size Buffer has no memory behind it (None): give it an empty one so masked-off accesses still work
        vals[pc] = _Ptr(_view(bufs[arg] if bufs[arg] is not None else np.zeros(0, np.uint8), dtype.base.scalar()), None)
      elif op is Ops.DEFINE_VAR:
        if nvar >= len(var_vals): raise TypeError(f"kernel {self.name} needs a value for variable {arg[0]!r}; vals={var_vals}")
        vals[pc], nvar = np.array([var_vals[nvar]], ndt), nvar + 1
      elif op is Ops.DEFINE_REG or op is Ops.DEFINE_LOCAL:
        nrows, rows = (n, tid) if op is Ops.DEFINE_REG else (ngroups, group)
        assert isinstance(dtype, PtrDType)  # DEFINE_REG/DEFINE_LOCAL are always pointers
        vals[pc] = _Ptr(np.zeros((nrows, dtype.size) + ((dtype.base.count,) if dtype.base.count > 1 else ()), np_dtype(dtype.base)), rows)
      elif op is Ops.AFTER: vals[pc] = vals[src[0]]  # ordering only: the value is its first source, read after the others ran
      elif op is Ops.CAST: vals[pc] = vals[src[0]] if isinstance(vals[src[0]], _Ptr) else cast(vals[src[0]], dtype)  # pointer casts move nothing
      elif op is Ops.BITCAST: vals[pc] = bitcast(vals[src[0]], dtype)
      elif op is Ops.VECTORIZE: vals[pc] = np.stack(np.broadcast_arrays(*[vals[x] for x in src]), axis=-1).astype(ndt, copy=False)
      elif op is Ops.GEP: vals[pc] = vals[src[0]][..., arg[0]] if len(arg) == 1 else vals[src[0]][..., list(arg)]
      elif op is Ops.WMMA: vals[pc] = run_wmma(arg, vals[src[0]], vals[src[1]], vals[src[2]], n)
      # the rest (SINK, NOOP, BARRIER, GROUP) do nothing: every thread runs each op in lockstep, so a barrier always holds
      pc += 1

# *** memory and the device ***

class PythonAllocator(Allocator):
  """Host memory: each buffer is a numpy uint8 array, so views are slices and host access is zero-copy."""
  def _alloc(self, size: int, options: BufferSpec) -> np.ndarray: return np.zeros(size, np.uint8)
  def _free(self, opaque: np.ndarray, options: BufferSpec) -> None: pass  # numpy frees it when unreachable
  def _copyin(self, dest: np.ndarray, src: memoryview) -> None: dest[:] = np.frombuffer(src, np.uint8)
  def _copyout(self, dest: memoryview, src: np.ndarray) -> None: np.frombuffer(dest, np.uint8)[:] = src
  def _offset(self, opaque: np.ndarray, size: int, offset: int) -> np.ndarray: return opaque[offset:offset + size]
  def _as_buffer(self, opaque: np.ndarray) -> memoryview: return memoryview(opaque)  # type: ignore[arg-type]  # ndarray is a buffer

def make_python_renderer(arch: str | None = None) -> tuple[PythonRenderer, PythonCompiler]:
  """(Renderer, Compiler) for the PYTHON device, in the form DeviceSpec.renderers expects (the NULL device borrows it)."""
  return PythonRenderer(), PythonCompiler()

def make_python_device(name: str, target: Target | None = None) -> Compiled:
  """The PYTHON device: host memory, the JSON renderer, the identity compiler and the numpy interpreter."""
  renderer, compiler = make_python_renderer(target.arch if target is not None else None)
  return Compiled(name, PythonAllocator(name), renderer, compiler, PythonProgram, target)
