"""Validity rules per stage (tensor, kernel, program graphs) and `type_verify`, which names the first bad node."""
from __future__ import annotations
from typing import Any, Sequence
from core.ir.dtype import DType, PtrDType, ImageDType, dtypes
from core.ir.ops import UOp, Ops, GroupOp, MAX_NO_NAN
from core.ir.pattern import UPat, PatternMatcher
from core.helpers import prod, all_int

# Each rule answers True (valid) or False (invalid); a node no rule speaks for is invalid too, so a new op has to be
# given a spec before it can reach a stage.

class SpecError(TypeError):
  """A UOp graph broke the rules of a stage."""

def _same(*ds: DType) -> bool: return all(d is ds[0] for d in ds[1:])
def _is_index(d: DType) -> bool: return dtypes.is_int(d) and d.count == 1

def _alu_ok(x: UOp) -> bool:
  s, op = x.src, x.op
  if op is Ops.WHERE: return len(s) == 3 and dtypes.is_bool(s[0].dtype) and _same(x.dtype, s[1].dtype, s[2].dtype)
  if op in GroupOp.Comparison:
    return len(s) == 2 and _same(s[0].dtype, s[1].dtype) and x.dtype is dtypes.bool.vec(s[0].dtype.count)
  if op in (Ops.SHL, Ops.SHR): return len(s) == 2 and dtypes.is_int(x.dtype) and x.dtype is s[0].dtype and dtypes.is_int(s[1].dtype)
  if op in (Ops.IDIV, Ops.MOD) and not dtypes.is_int(x.dtype): return False
  if op in (Ops.AND, Ops.OR, Ops.XOR) and dtypes.is_float(x.dtype): return False
  n = 1 if op in GroupOp.Unary else 2 if op in GroupOp.Binary else 3
  return len(s) == n and _same(x.dtype, *(y.dtype for y in s))

def _tensor_alu_ok(x: UOp) -> bool:
  # at tensor level the Tensor layer broadcasts first, so every source has the node's shape
  shapes = [y.shape for y in x.src if y.shape is not None]
  return _alu_ok(x) and all(sh == shapes[0] for sh in shapes[1:])

def _const_ok(x: UOp) -> bool:
  if x.src and not (len(x.src) == 1 and x.src[0].op is Ops.DEVICE): return False
  d = x.dtype.scalar()
  if d is dtypes.bool: return isinstance(x.arg, bool)
  if dtypes.is_int(d): return isinstance(x.arg, int) and not isinstance(x.arg, bool)
  return isinstance(x.arg, float) or isinstance(x.arg, int) and not isinstance(x.arg, bool)

def _bitcast_ok(x: UOp) -> bool: return len(x.src) == 1 and x.dtype.itemsize == x.src[0].dtype.itemsize

def _define_var_ok(x: UOp) -> bool:
  a = x.arg
  return isinstance(a, tuple) and len(a) == 3 and isinstance(a[0], str) and a[1] <= a[2] and dtypes.is_int(x.dtype) and not x.src

shared_spec = PatternMatcher([
  (UPat(Ops.SINK, dtypes.void, name="x"), lambda x: True),
  (UPat((Ops.NOOP, Ops.GROUP, Ops.CUSTOM), name="x"), lambda x: True),
  (UPat(Ops.CONST, name="x"), _const_ok),
  (UPat(Ops.VCONST, name="x"), lambda x: isinstance(x.arg, tuple) and len(x.arg) == x.dtype.count),
  (UPat(Ops.DEFINE_VAR, name="x"), _define_var_ok),
  (UPat(Ops.BIND, src=(UPat(Ops.DEFINE_VAR), UPat(Ops.CONST)), name="x"), lambda x: x.dtype is x.src[0].dtype),
  (UPat(Ops.CAST, name="x"), lambda x: len(x.src) == 1 and x.dtype.count == x.src[0].dtype.count),
  (UPat(Ops.BITCAST, name="x"), _bitcast_ok),
  (UPat(Ops.DEVICE, dtypes.void, src=()), lambda: True),
], name="spec shared")

def _movement_ok(x: UOp) -> bool:
  ps, a = x.src[0].shape, x.arg
  if ps is None or not isinstance(a, tuple) or len(x.src) != 1: return False
  if x.op is Ops.RESHAPE: return not all_int(ps + a) or prod(ps) == prod(a)
  if x.op is Ops.PERMUTE: return sorted(a) == list(range(len(ps)))
  if x.op is Ops.EXPAND: return len(a) == len(ps) and all(s == d or s == 1 for s, d in zip(ps, a))
  if x.op is Ops.PAD: return len(a) == len(ps) and all(not all_int((b, e)) or (b >= 0 and e >= 0) for b, e in a)
  if x.op is Ops.SHRINK:
    return len(a) == len(ps) and all(not all_int((b, e, d)) or 0 <= b <= e <= d for (b, e), d in zip(a, ps))
  if x.op is Ops.FLIP: return len(a) == len(ps) and all(isinstance(f, bool) for f in a)
  return False

def _reduce_axis_ok(x: UOp) -> bool:
  ps = x.src[0].shape
  return (ps is not None and isinstance(x.arg, tuple) and x.arg[0] in (Ops.ADD, Ops.MUL, Ops.MAX)
          and (len(x.arg) == 2 or x.arg[0] is Ops.MAX and x.arg[2:] == (MAX_NO_NAN,))
          and all(0 <= i < len(ps) for i in x.arg[1]) and x.dtype is x.src[0].dtype)

tensor_spec = PatternMatcher([
  (UPat(Ops.UNIQUE, dtypes.void, src=()), lambda: True),
  (UPat(Ops.BUFFER, src=(UPat(Ops.UNIQUE), UPat(Ops.DEVICE)), name="x"), lambda x: isinstance(x.arg, int) and x.arg >= 0),
  (UPat(Ops.BUFFER_VIEW, src=(UPat(Ops.BUFFER),), name="x"), lambda x: isinstance(x.arg, tuple) and len(x.arg) == 2),
  (UPat(GroupOp.Movement, name="x"), _movement_ok),
  (UPat(Ops.REDUCE_AXIS, name="x"), _reduce_axis_ok),
  (UPat(GroupOp.ALU, name="x"), _tensor_alu_ok),
  (UPat((Ops.CONTIGUOUS, Ops.DETACH, Ops.CONTIGUOUS_BACKWARD), src=(UPat.var("y"),), name="x"), lambda x, y: x.dtype is y.dtype),
  # a custom gradient (core.tensor.gradient.with_gradient): DETACH(value, x1, g1, x2, g2, ...)
  (UPat(Ops.DETACH, src=(UPat.var("y"),), allow_any_len=True, arg="grad", name="x"), lambda x, y: x.dtype is y.dtype and len(x.src) % 2 == 1),
  # a custom vector-Jacobian product (core.tensor.gradient.custom_vjp): DETACH(value, *inputs), arg ("vjp", name, params)
  (UPat(Ops.DETACH, src=(UPat.var("y"),), allow_any_len=True, name="x", custom=lambda u: isinstance(u.arg, tuple) and u.arg[:1] == ("vjp",)),
   lambda x, y: x.dtype is y.dtype),
  (UPat(Ops.COPY, src=(UPat.var("y"), UPat(Ops.DEVICE)), name="x"), lambda x, y: x.dtype is y.dtype),
  (UPat(Ops.ASSIGN, src=(UPat.var("t"), UPat.var("v")), name="x"), lambda x, t, v: x.dtype is t.dtype is v.dtype and t.shape == v.shape),
  (UPat(Ops.AFTER, name="x", allow_any_len=True, src=(UPat.var("y"),)), lambda x, y: x.dtype is y.dtype),
  (UPat(Ops.KERNEL), lambda: True),
], name="spec tensor") + shared_spec

def _index_ok(x: UOp) -> bool:
  s = x.src
  # an image is indexed by its (x, y) pixel coordinates (core.codegen.image)
  coord = _is_index(s[1].dtype) or (isinstance(s[0].dtype, ImageDType) and s[1].dtype.count == 2 and _is_index(s[1].dtype.scalar()))
  if not 2 <= len(s) <= 3 or not isinstance(s[0].dtype, PtrDType) or not coord: return False
  return (len(s) == 2 or dtypes.is_bool(s[2].dtype)) and isinstance(x.dtype, PtrDType)

def _load_ok(x: UOp) -> bool:
  idx = x.src[0]
  if not (idx.op is Ops.INDEX or isinstance(idx.dtype, PtrDType)): return False
  return len(x.src) == 1 or (len(x.src) == 2 and x.src[1].dtype is x.dtype)

def _store_ok(x: UOp) -> bool:
  return len(x.src) >= 2 and (x.src[0].op is Ops.INDEX or isinstance(x.src[0].dtype, PtrDType)) and x.dtype is dtypes.void

kernel_spec = PatternMatcher([
  (UPat(Ops.PARAM, name="x", src=()), lambda x: isinstance(x.dtype, PtrDType) and isinstance(x.arg, int)),
  (UPat((Ops.DEFINE_LOCAL, Ops.DEFINE_REG), name="x"), lambda x: isinstance(x.dtype, PtrDType)),
  (UPat((Ops.RANGE, Ops.SPECIAL), name="x", src=(UPat.var("end"),)), lambda x, end: _is_index(end.dtype) and _is_index(x.dtype)),
  (UPat(Ops.END, name="x"), lambda x: len(x.src) >= 2 and all(r.op is Ops.RANGE for r in x.src[1:])),
  (UPat(Ops.INDEX, name="x"), _index_ok),
  (UPat(Ops.LOAD, name="x"), _load_ok),
  (UPat(Ops.STORE, name="x"), _store_ok),
  (UPat(Ops.REDUCE, name="x"), lambda x: x.arg in (Ops.ADD, Ops.MUL, Ops.MAX, (Ops.MAX, MAX_NO_NAN)) and all(r.op is Ops.RANGE for r in x.src[1:])),
  (UPat(GroupOp.ALU, name="x"), _alu_ok),
  (UPat(Ops.VECTORIZE, name="x"), lambda x: len(x.src) > 1 and all(s.dtype is x.dtype.scalar() for s in x.src) and x.dtype.count == len(x.src)),
  (UPat(Ops.GEP, name="x", src=(UPat.var("y"),)), lambda x, y: all(0 <= i < y.dtype.count for i in x.arg) and x.dtype.count == len(x.arg)),
  (UPat((Ops.BARRIER, Ops.IF, Ops.ENDIF, Ops.UNROLL, Ops.CONTRACT, Ops.WMMA)), lambda: True),
], name="spec kernel") + shared_spec

def _program_ok(x: UOp) -> bool:
  # codegen's PROGRAM: SINK, DEVICE, LINEAR, SOURCE, then BINARY once compiled
  s = x.src
  want = (Ops.SINK, Ops.DEVICE, Ops.LINEAR, Ops.SOURCE, Ops.BINARY)
  return len(s) in (4, 5) and all(y.op is op for y, op in zip(s, want))

program_spec = PatternMatcher([
  (UPat(Ops.PROGRAM, name="x"), _program_ok),
  (UPat(Ops.LINEAR), lambda: True),
  (UPat(Ops.SOURCE, name="x", src=()), lambda x: isinstance(x.arg, str)),
  (UPat(Ops.BINARY, name="x", src=()), lambda x: isinstance(x.arg, (bytes, bytearray))),
], name="spec program") + kernel_spec

# *** the HCQ pipeline's queue IR (core/hcq/queue_ir.py), checked after every stage ***

_MEM = (Ops.BUFFER, Ops.BUFFER_VIEW)

def _hcq_program_ok(x: UOp) -> bool:
  # the compiled program (stage 1's input), then the prepared one: DEVICE and its image (bytes, then the buffer they went to)
  s = x.src
  if len(s) == 2 and s[0].op is Ops.DEVICE: return s[1].op in (Ops.BINARY,) + _MEM and x.arg is not None
  return _program_ok(x)

def _u64_value(v: UOp) -> bool: return v.dtype is dtypes.uint64

queue_spec = PatternMatcher([
  (UPat(Ops.PROGRAM, name="x"), _hcq_program_ok),
  # a launch: the prepared program and its kernarg buffer, arg (global size, local size)
  (UPat(Ops.LAUNCH, src=(UPat(Ops.PROGRAM), UPat(_MEM)), name="x"), lambda x: isinstance(x.arg, tuple) and len(x.arg) == 2),
  (UPat((Ops.LINEAR, Ops.CALL, Ops.GROUP, Ops.NOOP, Ops.BARRIER, Ops.UNIQUE, Ops.SOURCE, Ops.COPY)), lambda: True),
  (UPat(Ops.BINARY, name="x", src=()), lambda x: isinstance(x.arg, (bytes, bytearray))),
  (UPat(Ops.BUFFER, name="x"), lambda x: isinstance(x.arg, int) and x.src[1].op is Ops.DEVICE),
  (UPat(Ops.BUFFER_VIEW, name="x", src=(UPat(Ops.BUFFER),)), lambda x: isinstance(x.arg, tuple) and len(x.arg) == 2),
  (UPat((Ops.WAIT, Ops.SIGNAL), src=(UPat(_MEM), UPat.var("v"))), _u64_value),
  (UPat(Ops.TIMESTAMP, src=(UPat(_MEM),)), lambda: True),
  (UPat(Ops.INS, name="x"), lambda x: isinstance(x.arg, tuple) and isinstance(x.arg[0], bytes) and len(x.arg[1]) == len(x.src)),
  (UPat(Ops.GETADDR, dtypes.uint64, src=(UPat(_MEM), UPat(Ops.DEVICE))), lambda: True),   # bound to the device that reads it
  (UPat(Ops.HOST_PATCH, src=(UPat(_MEM), UPat()), name="x"), lambda x: isinstance(x.arg, int) and x.arg >= 0),
  (UPat(Ops.RING_PATCH, src=(UPat(),), name="x"), lambda x: isinstance(x.arg, int) and x.arg >= 0),
  (UPat(Ops.ADVANCE, src=(UPat(Ops.BUFFER), UPat.var("v"))), _u64_value),
  (UPat(Ops.CUSTOM_FUNCTION, name="x"), lambda x: isinstance(x.arg, tuple) and x.arg[0] == "submit"),
  # a timeline value: known when the schedule is submitted
  (UPat(Ops.DEFINE_VAR, dtypes.uint64, src=(), name="x"), lambda x: isinstance(x.arg, tuple) and x.arg[0] == "timeline"),
  (UPat(GroupOp.ALU, name="x"), _alu_ok),
], name="spec queue") + shared_spec

def type_verify(uops_or_sink: UOp | Sequence[UOp], spec: PatternMatcher) -> None:
  """Raise SpecError naming the first node (in execution order) that `spec` does not accept."""
  uops: Any = uops_or_sink.toposort() if isinstance(uops_or_sink, UOp) else uops_or_sink
  for i, u in enumerate(uops):
    if (ok := spec.rewrite(u)) is not True:
      why = "no rule of this stage accepts it" if ok is None else "it breaks a rule of this stage"
      srcs = ", ".join(f"{s.op.name}:{s.dtype}" for s in u.src)
      raise SpecError(f"{spec.name}: node {i} {u.op.name} dtype={u.dtype} arg={u.arg!r} src=({srcs}) is invalid: {why}\n{str(u)[:600]}")
