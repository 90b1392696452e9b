"""Rewrite what a renderer lacks into what it has: bfloat16 storage and math emulated with uint16 bits and float32."""
from __future__ import annotations
from core.ir.dtype import dtypes, PtrDType
from core.ir.ops import UOp, Ops, GroupOp
from core.ir.pattern import UPat, PatternMatcher

BF16 = "bf16"   # tag of a pointer whose memory holds bfloat16 bits as uint16

def f32_to_bf16_bits(x: UOp) -> UOp:
  """Round to nearest even, NaN kept quiet: the same rounding as dtype.float_to_bf16_bits."""
  u = x.bitcast(dtypes.uint32)
  r = (u + 0x7fff + ((u >> 16) & 1)) >> 16
  return x.ne(x).where(UOp.const(dtypes.uint32, 0x7fc0), r).cast(dtypes.uint16)

def bf16_bits_to_f32(b: UOp) -> UOp: return (b.cast(dtypes.uint32) << 16).bitcast(dtypes.float32)
def round_to_bf16(x: UOp) -> UOp: return bf16_bits_to_f32(f32_to_bf16_bits(x))

def _ptr(p: UOp) -> UOp:
  d = p.dtype
  assert isinstance(d, PtrDType)
  base = dtypes.uint16 if d.addrspace.name == "GLOBAL" else dtypes.float32   # registers hold float32 values
  return p.replace(dtype=base.ptr(d.size, d.addrspace), tag=BF16 if base is dtypes.uint16 else p.tag)

def _is_bf16_mem(idx: UOp) -> bool: return idx.op is Ops.INDEX and idx.src[0].tag == BF16

def _alu(x: UOp) -> UOp:
  ret = x.replace(dtype=dtypes.float32 if x.op not in GroupOp.Comparison else x.dtype)
  return ret if x.op in GroupOp.Comparison or x.op in (Ops.MAX, Ops.NEG, Ops.WHERE) else round_to_bf16(ret)

pm_emulate_bf16 = PatternMatcher([
  (UPat((Ops.PARAM, Ops.DEFINE_REG, Ops.DEFINE_LOCAL), name="p", custom=lambda p: p.dtype.base is dtypes.bfloat16), _ptr),
  (UPat(Ops.INDEX, name="i", custom=lambda i: i.dtype.base is dtypes.bfloat16), lambda i: i.replace(dtype=i.src[0].dtype)),
  # memory: bits in, bits out
  (UPat(Ops.LOAD, src=(UPat(Ops.INDEX, name="i"),), name="ld", allow_any_len=True, custom=lambda ld: _is_bf16_mem(ld.src[0])
        and ld.dtype is not dtypes.uint16), lambda ld, i: bf16_bits_to_f32(ld.replace(dtype=dtypes.uint16))),
  (UPat(Ops.STORE, src=(UPat(Ops.INDEX, name="i"), UPat(dtype=dtypes.float32, name="v")), name="st", custom=lambda st: _is_bf16_mem(st.src[0])),
   lambda st, i, v: st.replace(src=(i, f32_to_bf16_bits(v)))),
  (UPat(Ops.LOAD, dtype=dtypes.bfloat16, name="ld"), lambda ld: ld.replace(dtype=dtypes.float32)),
  # values: float32 that only ever holds bfloat16-representable numbers
  (UPat(Ops.CONST, dtype=dtypes.bfloat16, name="c"), lambda c: UOp.const(dtypes.float32, c.arg)),
  (UPat(Ops.CAST, dtype=dtypes.bfloat16, name="c"), lambda c: round_to_bf16(c.src[0].cast(dtypes.float32))),
  (UPat(Ops.CAST, name="c", custom=lambda c: c.src[0].dtype is dtypes.bfloat16), lambda c: c.src[0].replace(dtype=dtypes.float32).cast(c.dtype)),
  (UPat(GroupOp.ALU, dtype=dtypes.bfloat16, name="x"), _alu),
  # a float32 holding a bfloat16 value has exactly the bf16 bits on top: no rounding, NaN payloads kept
  (UPat(Ops.BITCAST, dtype=dtypes.bfloat16, name="b"), lambda b: bf16_bits_to_f32(b.src[0].bitcast(dtypes.uint16))),
  # (sources are rewritten first, so a bf16 source already reads as float32: a 4 -> 2 byte bitcast can only be that)
  (UPat(Ops.BITCAST, name="b", custom=lambda b: b.src[0].dtype in (dtypes.bfloat16, dtypes.float32) and b.dtype.itemsize == 2),
   lambda b: (b.src[0].replace(dtype=dtypes.float32).bitcast(dtypes.uint32) >> 16).cast(dtypes.uint16).bitcast(b.dtype)),
  (UPat(GroupOp.Comparison, name="x", custom=lambda x: x.src[0].dtype is dtypes.bfloat16), lambda x: None),
], name="emulate bf16")
