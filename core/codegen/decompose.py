"""Rewrite what a renderer lacks into what it has: bfloat16 storage and math emulated with uint16 bits and float32."""
from __future__ import annotations
from typing import Callable
from core.ir.dtype import dtypes, PtrDType
from core.ir.ops import UOp, Ops, GroupOp, EXP2_NONPOSITIVE
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

# *** float32 exp2 and log2 as vector arithmetic ***
# Backends without a vector math library (LLVM and C on the host) call libm once per lane for EXP2/LOG2. These rewrite them into
# adds, multiplies, compares, selects and integer bit operations, which vectorize: a range reduction to a small interval, a
# polynomial there, and the exponent put back through the float's bits. Measured against float64: exp2 within 1.1 ulp, log2
# within 2.6 ulp (near x = 1, where the reduced argument's division rounds); IEEE special values (inf, 0, NaN, subnormals) exact.

# 1.5 * 2**23 + 254: x + _ROUND - _ROUND rounds |x| < 2**22 - 254 to an integer n (ties to even: 254 is even), r = x + _ROUND
# holding n + 254 in its low mantissa bits
_ROUND = 12582912.0 + 254.0
# 2**f on |f| <= 1/2 as a degree-6 polynomial, highest power first: a near-minimax fit (Lawson's iteration, relative error) is
# within 4e-9 of 2**f there, a twentieth of a float32 ulp, where the degree-7 Taylor series it replaced took one multiply-add more
# (one Zen 3 thread, softmax 4096x1000: 3.33 -> 3.11 ms; exp2 still within 0.88 ulp of float64)
_EXP2_POLY = [0.00015267690440021967, 0.0013392888999795502, 0.009618724585466799, 0.055503504009678614, 0.2402264567003518,
              0.6931471911018013, 1.0]

def _horner(x: UOp, coeffs: list[float]) -> UOp:
  """The polynomial at x in multiply-adds (MULACC: one FMA each where the target has it; the CPU renderers render it)."""
  acc = x.const_like(coeffs[0])
  for c in coeffs[1:]: acc = UOp(Ops.MULACC, x.dtype, (acc, x, x.const_like(c)))
  return acc

# 2**f on |f| <= 1/2 as a degree-5 polynomial for exp2 of x <= 0 (softmax's exp): a near-minimax fit of the error in ulps
# (Lawson's iteration weighted by the float32 spacing of 2**f), within 1.06 ulp of 2**f there; with float32 Horner's roundings
# 1.78 ulp (2.07 unfused: the C renderer) where _EXP2_POLY's are 0.92 (1.14). Why one degree less here: the AVX2 softmax is
# bound by the two FMA/multiply pipes, and x - max(x) rounded and times 1/ln 2 already puts up to about 20 ulp into exp(x - max)
# where |x - max| is large. One multiply-add less per 8 floats: one Zen 3 thread, softmax 4096x1000, 1.81 -> 1.66 ms
_EXP2_POLY_NONPOSITIVE = [0.0013225702366438698, 0.009671762422340281, 0.05550891445039435, 0.24022237044410527, 0.6931468292507238, 1.0]

# EXP2 arg of an exp2 of x <= 0 whose consumer takes 2**x * 2**EXP2_SCALE (core.codegen.stash: a row normalization, where the
# factor cancels): 2**(n + EXP2_SCALE) is one factor from the bits, no constant multiply
EXP2_SCALED, EXP2_SCALE = "nonpositive, scaled", 63

def _exp2_nonpositive_times(x: UOp, s: int, rnd: Callable[[UOp], UOp] | None = None) -> UOp:
  """2**x * 2**s for float32 x <= 0 or NaN, s odd in [1, 125]: the degree-5 polynomial times 2**(n+s), one factor from the bits. r's
  low mantissa bits hold k = n + 127 + s (1.5 * 2**23 + 127 + s rounds x to n, ties to even as 127 + s is even), 0 <= k for x
  clamped at -(127 + s), where k = 0 makes the factor 0.0 (-inf included, no subnormal on the way). The factor is normal for
  every n whose result is not 0 (n >= -150), so p * 2**(n+s) rounds once. `rnd(x)`: x rounded to an integer, ties to even, in
  one instruction where the target has one (the same n, not waiting on r)."""
  xc = (x < -(127.0 + s)).where(-(127.0 + s), x)
  r = xc + (12582912.0 + 127.0 + s)
  n = r - (12582912.0 + 127.0 + s) if rnd is None else rnd(xc)
  return _horner(xc - n, _EXP2_POLY_NONPOSITIVE) * (r.bitcast(dtypes.uint32.vec(x.dtype.count)) << 23).bitcast(x.dtype)

def fast_exp2_scaled(x: UOp, rnd: Callable[[UOp], UOp] | None = None) -> UOp:
  """2**x * 2**EXP2_SCALE for float32 x <= 0 or NaN (EXP2_SCALED): fast_exp2_nonpositive without its constant multiply, so
  where its value is a normal float this is 2**EXP2_SCALE times it, and where it is subnormal this rounding is its only one
  (fast_exp2_nonpositive's rounds again at 2**-125). An x clamped already, where(t < lo, lo, t) with lo an even integer in
  [-254, -126] (the same for a row: core.codegen.stash._fma_shift), is 2**t * 2**(-lo - 127) the same way: lo in place of
  -(127 + EXP2_SCALE), in the clamp and in the rounding constant."""
  if x.op is not Ops.WHERE or (cmp := x.src[0]).op is not Ops.CMPLT or cmp.src != (x.src[2], x.src[1]):
    return _exp2_nonpositive_times(x, EXP2_SCALE, rnd)
  big = x.src[1].const_like(12582912.0) - x.src[1]
  r = x + big
  n = r - big if rnd is None else rnd(x)
  return _horner(x - n, _EXP2_POLY_NONPOSITIVE) * (r.bitcast(dtypes.uint32.vec(x.dtype.count)) << 23).bitcast(x.dtype)

def _half_shifted(coeffs: list[float]) -> list[float]:
  """The coefficients (highest power first) of p(f - 1/2), p the polynomial of `coeffs`: Horner's steps on the coefficients."""
  out: list[float] = []
  for c in coeffs:   # out * (f - 1/2) + c
    nxt = [*out, c]
    for i, a in enumerate(out): nxt[i + 1] -= 0.5 * a
    out = nxt
  return out

# _EXP2_POLY_NONPOSITIVE at f - 1/2: 2**(f - 1/2) on 0 <= f < 1 (fast_exp2_floor), in float64 before the float32 rounding
_EXP2_POLY_HALF = _half_shifted(_EXP2_POLY_NONPOSITIVE)

def fast_exp2_floor(x: UOp, scale: Callable[[UOp, UOp], UOp], frac: Callable[[UOp], UOp]) -> UOp | None:
  """2**x for float32 x = a * b <= 0 or NaN (EXP2_NONPOSITIVE of a product), where `scale(p, t)` is p * 2**floor(t) (AVX-512's
  vscalefps floors its exponent itself) and `frac(t)` t - floor(t) in one instruction each (vreduceps rounding down), both
  with +-inf as fast_exp2's `scale` and `split`: t = a * b + 1/2 (one multiply-add, rounded once as a * b was), f = frac(t)
  in [0, 1), 2**x = 2**(f - 1/2) * 2**floor(t), the first factor _EXP2_POLY_NONPOSITIVE at f - 1/2 (_EXP2_POLY_HALF). No
  rounded copy of t: one instruction less than fast_exp2's split. Within 2.0 ulp of 2**t (1.78 split at the nearest integer:
  the shifted coefficients' roundings); t's own rounding is no worse, as |t| <= |a * b| where a * b <= -1/4. None where x is
  no product (x + 1/2 would round a second time)."""
  if x.op is not Ops.MUL: return None
  t = UOp(Ops.MULACC, x.dtype, (x.src[0], x.src[1], x.const_like(0.5)))
  return scale(_horner(frac(t), _EXP2_POLY_HALF), t)

def fast_exp2_nonpositive(x: UOp, rnd: Callable[[UOp], UOp] | None = None) -> UOp:
  """2**x for float32 x known to be <= 0 or NaN (EXP2_NONPOSITIVE): fast_exp2 without its overflow guard. 2**(n+125) from the
  bits (_exp2_nonpositive_times), then a constant 2**-125: fast_exp2's clamp at 129 and three of its four integer ops saved, and
  a degree-5 polynomial (_EXP2_POLY_NONPOSITIVE) for its degree 6 (17 -> 12 vector ops per exp on AVX2). p * 2**(n+125) is exact
  for n >= -250 (the clamp is at -252), so the constant's multiply rounds once, subnormal results included: within 1.8 ulp of
  2**x (2.1 unfused; fast_exp2: 0.9), special values (-0.0, -inf -> 0, NaN) exact."""
  return _exp2_nonpositive_times(x, 125, rnd) * 2.0 ** -125

def fast_exp2(x: UOp, scale: Callable[[UOp, UOp], UOp] | None = None, split: Callable[[UOp], tuple[UOp, UOp]] | None = None,
              nonpositive: bool = False, rnd: Callable[[UOp], UOp] | None = None) -> UOp:
  """2**x for float32 x. `scale(p, n)`: p * 2**n (n an integer-valued float, -254 <= n <= 129) in one instruction where the
  target has one (AVX-512's vscalefps: the same single rounding as the two factors below); else 2**n is built from the bits.
  `split(x)`, with a `scale` that takes any n (+-inf too, as vscalefps: 2**inf is inf, 2**-inf 0): (n, f), x rounded to an
  integer (ties to even) and x - n, one instruction each, +-inf giving (+-inf, 0) and NaN a NaN f (AVX-512DQ's vrndscaleps and
  vreduceps): no clamp, two ops in place of four, the same values. `nonpositive` (x <= 0 or NaN, EXP2_NONPOSITIVE):
  fast_exp2_nonpositive's degree-5 polynomial, one multiply-add less (within 1.8 ulp of 2**x where degree 6 is within 0.9).
  `rnd` (bits path): as _exp2_nonpositive_times'."""
  poly = _EXP2_POLY_NONPOSITIVE if nonpositive else _EXP2_POLY
  if scale is not None and split is not None:
    n, f = split(x)
    return scale(_horner(f, poly), n)
  # clamped: above 129 the result is inf either way, and n stays a small integer. Below -151 it rounds to 0; the clamp is at -254,
  # where both factors of 2**n below are 0.0 (exponent bits 0), so -inf (a softmax's masked lanes) gives 0 with no subnormal
  # product on the way, which costs a microcode assist on x86 (one Zen 3 thread: a causal 12x256x256 softmax 1.26 -> 0.80 ms).
  # A NaN fails both compares and stays NaN, so p is NaN and so is the product whatever the exponent bits say: no select for it
  xc = (x < -254.0).where(-254.0, x)
  xc = (xc > 129.0).where(129.0, xc)
  r = xc + _ROUND
  n = r - _ROUND if rnd is None else rnd(xc)
  p = _horner(xc - n, poly)
  if scale is not None: return scale(p, n)
  # 2**n in two factors, 2**(h-127) and 2**(k-h-127) with k = n + 254 and h = floor(k/2), each a normal float (or 0.0 at n = -254):
  # subnormal results rounded once, and up to 129 (inf). r's bits are 0x4B400000 + k (anything for a NaN), 0 <= k <= 383, and
  # 0x4B400000 and its half shift out of 32 bits by 23: (bits >> 1) << 23 is the first factor's exponent field and
  # (bits << 23) - that the second's, in uint32 where the shifts wrap (the bias in the rounding constant saves adding 127 twice)
  u = r.bitcast(dtypes.uint32.vec(x.dtype.count))
  hs = (u >> 1) << 23
  return p * hs.bitcast(x.dtype) * ((u << 23) - hs).bitcast(x.dtype)

# ln((1+t)/(1-t)) / ln 2 = (2 / ln 2) * (t + t**3/3 + t**5/5 + ...), in powers of t**2, highest first; |t| <= 0.1716
# (the constant term less 2: t*2 is exact, so the rounding of the rest weighs a third as much near x = 1)
_LOG2_POLY = [2 / 0.6931471805599453 / k for k in (11, 9, 7, 5, 3)] + [2 / 0.6931471805599453 - 2]

def fast_log2(x: UOp) -> UOp:
  vec = x.dtype.count
  i32, f32 = dtypes.int32.vec(vec), dtypes.float32.vec(vec)
  sub = x < 1.1754943508222875e-38   # subnormal (or zero/negative, handled below): scaled into the normals first
  xs = sub.where(x * 8388608.0, x)
  bits = xs.bitcast(i32)
  e = ((bits >> 23) & 0xFF) - sub.where(UOp.const(i32, 127 + 23), UOp.const(i32, 127))
  m = ((bits & 0x7FFFFF) | 0x3F800000).bitcast(f32)   # in [1, 2)
  big = m > 1.4142135623730951
  m = big.where(m * 0.5, m)
  e = big.where(e + 1, e)
  t = (m - 1.0) / (m + 1.0)
  res = e.cast(f32) + (t * 2.0 + t * _horner(t * t, _LOG2_POLY))
  res = (x.ne(x) | (x < 0.0)).where(x.const_like(float("nan")), res)
  res = x.ne(0.0).where(res, x.const_like(float("-inf")))
  return x.ne(float("inf")).where(res, x)

def _f32(x: UOp) -> bool: return x.dtype.scalar() is dtypes.float32

pm_vector_math = PatternMatcher([
  (UPat(Ops.EXP2, arg=EXP2_SCALED, name="x", custom=lambda x: _f32(x)), lambda x: fast_exp2_scaled(x.src[0])),
  (UPat(Ops.EXP2, arg=EXP2_NONPOSITIVE, name="x", custom=lambda x: _f32(x)), lambda x: fast_exp2_nonpositive(x.src[0])),
  (UPat(Ops.EXP2, name="x", custom=lambda x: _f32(x)), lambda x: fast_exp2(x.src[0])),
  (UPat(Ops.LOG2, name="x", custom=lambda x: _f32(x)), lambda x: fast_log2(x.src[0])),
], name="vector exp2/log2")
