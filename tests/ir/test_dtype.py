"""DType: promotion lattice, numpy round trip, bounds, vec/ptr and C-style truncation."""
from __future__ import annotations
import math, struct
import numpy as np
import pytest
from core.ir.dtype import AddrSpace, DType, PtrDType, dtypes, least_upper_dtype, to_dtype, to_np, from_np, truncate

# written out by hand from JAX's lattice (bool->{i8,u8}, i8->i16->i32->i64->{f16,bf16}, u8->{i16,u16}, u16->{i32,u32},
# u32->{i64,u64}, u64->{f16,bf16}, fp8s->{f16,bf16}, f16/bf16->f32->f64): the smallest common upper bound of each pair
ORDER = "b i8 u8 i16 u16 i32 u32 i64 u64 e4 e5 f16 bf16 f32 f64".split()
TABLE = """
b    b    i8   u8   i16  u16  i32  u32  i64  u64  f16  f16  f16  bf16 f32  f64
i8   i8   i8   i16  i16  i32  i32  i64  i64  f16  f16  f16  f16  bf16 f32  f64
u8   u8   i16  u8   i16  u16  i32  u32  i64  u64  f16  f16  f16  bf16 f32  f64
i16  i16  i16  i16  i16  i32  i32  i64  i64  f16  f16  f16  f16  bf16 f32  f64
u16  u16  i32  u16  i32  u16  i32  u32  i64  u64  f16  f16  f16  bf16 f32  f64
i32  i32  i32  i32  i32  i32  i32  i64  i64  f16  f16  f16  f16  bf16 f32  f64
u32  u32  i64  u32  i64  u32  i64  u32  i64  u64  f16  f16  f16  bf16 f32  f64
i64  i64  i64  i64  i64  i64  i64  i64  i64  f16  f16  f16  f16  bf16 f32  f64
u64  u64  f16  u64  f16  u64  f16  u64  f16  u64  f16  f16  f16  bf16 f32  f64
e4   f16  f16  f16  f16  f16  f16  f16  f16  f16  e4   f16  f16  bf16 f32  f64
e5   f16  f16  f16  f16  f16  f16  f16  f16  f16  f16  e5   f16  bf16 f32  f64
f16  f16  f16  f16  f16  f16  f16  f16  f16  f16  f16  f16  f16  f32  f32  f64
bf16 bf16 bf16 bf16 bf16 bf16 bf16 bf16 bf16 bf16 bf16 bf16 f32  bf16 f32  f64
f32  f32  f32  f32  f32  f32  f32  f32  f32  f32  f32  f32  f32  f32  f32  f64
f64  f64  f64  f64  f64  f64  f64  f64  f64  f64  f64  f64  f64  f64  f64  f64
"""
SHORT = {"b": dtypes.bool, "i8": dtypes.int8, "u8": dtypes.uint8, "i16": dtypes.int16, "u16": dtypes.uint16, "i32": dtypes.int32,
         "u32": dtypes.uint32, "i64": dtypes.int64, "u64": dtypes.uint64, "e4": dtypes.fp8e4m3, "e5": dtypes.fp8e5m2,
         "f16": dtypes.float16, "bf16": dtypes.bfloat16, "f32": dtypes.float32, "f64": dtypes.float64}
ROWS = {r.split()[0]: r.split()[1:] for r in TABLE.strip().splitlines()}

def test_promotion_table_is_symmetric():
  for i, a in enumerate(ORDER):
    for j, b in enumerate(ORDER): assert ROWS[a][j] == ROWS[b][i], (a, b)

@pytest.mark.parametrize("a", ORDER)
def test_promotion_every_pair(a: str):
  for j, b in enumerate(ORDER):
    assert least_upper_dtype(SHORT[a], SHORT[b]) is SHORT[ROWS[a][j]], (a, b)

def test_promotion_of_three_and_of_vectors():
  assert least_upper_dtype(dtypes.int8, dtypes.uint8, dtypes.bool) is dtypes.int16
  assert least_upper_dtype(dtypes.uint64, dtypes.int64, dtypes.float32) is dtypes.float32
  assert least_upper_dtype(dtypes.float32.vec(4), dtypes.int32) is dtypes.float32
  with pytest.raises(TypeError): least_upper_dtype(dtypes.index, dtypes.int32)
  with pytest.raises(ValueError): least_upper_dtype()

@pytest.mark.parametrize("d", [d for d in dtypes.all if d.fmt is not None])
def test_numpy_round_trip(d: DType):
  assert from_np(to_np(d)) is d
  assert to_np(d).itemsize == d.itemsize
  assert to_dtype(d.name) is d

def test_no_numpy_equivalent():
  for d in (dtypes.bfloat16, dtypes.fp8e4m3, dtypes.fp8e5m2):
    with pytest.raises(TypeError): to_np(d)

@pytest.mark.parametrize("d", dtypes.ints)
def test_int_min_max_match_numpy(d: DType):
  info = np.iinfo(to_np(d))
  assert (d.min, d.max) == (int(info.min), int(info.max))

def test_float_and_bool_min_max():
  assert (dtypes.bool.min, dtypes.bool.max) == (False, True)
  assert dtypes.float32.min == -math.inf and dtypes.float16.max == math.inf

def test_vec_and_ptr():
  v = dtypes.float32.vec(4)
  assert v is dtypes.float32.vec(4) and v.count == 4 and v.itemsize == 16 and v.scalar() is dtypes.float32
  assert dtypes.float32.vec(1) is dtypes.float32
  with pytest.raises(ValueError): v.vec(2)
  p = dtypes.int32.ptr(16)
  assert isinstance(p, PtrDType) and p.base is dtypes.int32 and p.size == 16 and p.nbytes == 64
  assert p is dtypes.int32.ptr(16) and p is not dtypes.int32.ptr(8)
  assert dtypes.half.ptr(4, AddrSpace.LOCAL).addrspace is AddrSpace.LOCAL
  pv = p.vec(4)
  assert pv.vcount == 4 and pv.scalar() is p
  with pytest.raises(TypeError): p.ptr()
  with pytest.raises(ValueError): dtypes.int32.ptr().nbytes
  with pytest.raises(AttributeError): dtypes.int32.count = 2  # type: ignore[misc]
  assert repr(p) == "dtypes.int32.ptr(16)" and repr(v) == "dtypes.float32.vec(4)"

def test_aliases_and_names():
  assert to_dtype("half") is dtypes.float16 and to_dtype("float") is dtypes.float32 and to_dtype("long") is dtypes.int64
  with pytest.raises(ValueError): to_dtype("float33")

@pytest.mark.parametrize("d", dtypes.ints)
def test_truncate_ints_wrap_like_numpy(d: DType):
  npd = to_np(d)
  for v in [0, 1, -1, 127, 128, 255, 256, -129, 2**15, 2**31 - 1, 2**31, -2**31 - 1, 2**63, 2**64 + 5, -2**63 - 1]:
    assert truncate(d, v) == int(np.array(v % 2**64, dtype=np.uint64).astype(npd)), (d, v)

def test_truncate_float_to_int_rounds_toward_zero():
  assert truncate(dtypes.int32, 2.9) == 2 and truncate(dtypes.int32, -2.9) == -2 and truncate(dtypes.uint8, 300.5) == 44
  assert truncate(dtypes.int32, math.nan) == 0 and truncate(dtypes.bool, 0.0) is False and truncate(dtypes.bool, -3) is True

def test_truncate_floats():
  for v in [0.1, 1e-8, 3.14159, 65504.0, 65520.0, 1e10, -1e-40, math.inf, -math.inf]:
    assert truncate(dtypes.float32, v) == float(np.float32(v))
    with np.errstate(over="ignore"): assert truncate(dtypes.float16, v) == float(np.float16(v))
  assert math.isnan(truncate(dtypes.float16, math.nan))
  assert math.copysign(1.0, truncate(dtypes.float32, -0.0)) == -1.0

def test_truncate_bfloat16_round_to_nearest_even():
  def ref(v: float) -> float:  # bf16 is the top half of a float32, rounded to nearest even
    u = struct.unpack("<I", struct.pack("<f", np.float32(v)))[0]
    u = (u + 0x7fff + ((u >> 16) & 1)) & 0xffff0000
    return struct.unpack("<f", struct.pack("<I", u))[0]
  for v in [1.0, 1.00390625, 1.01171875, 3.14159, -2.5e-3, 1e38, 255.5, 0.1]: assert truncate(dtypes.bfloat16, v) == ref(v)
  assert truncate(dtypes.bfloat16, 1.00390625) == 1.0  # exactly halfway: ties to the even mantissa
  assert truncate(dtypes.bfloat16, 1.01171875) == 1.015625

def test_truncate_fp8():
  # e4m3fn: max 448, no inf (saturates), 3 mantissa bits; e5m2: max 57344 and has inf
  assert truncate(dtypes.fp8e4m3, 448.0) == 448.0 and truncate(dtypes.fp8e4m3, 1000.0) == 448.0
  assert truncate(dtypes.fp8e4m3, 1.0625) == 1.0 and truncate(dtypes.fp8e4m3, 1.1875) == 1.25  # ties to even
  assert truncate(dtypes.fp8e4m3, 2 ** -9) == 2 ** -9 and truncate(dtypes.fp8e4m3, -0.3) == -0.3125
  assert truncate(dtypes.fp8e5m2, 57344.0) == 57344.0 and truncate(dtypes.fp8e5m2, math.inf) == math.inf
  assert truncate(dtypes.fp8e5m2, 1.3) == 1.25 and truncate(dtypes.fp8e5m2, 2 ** -16) == 2 ** -16
  assert math.isnan(truncate(dtypes.fp8e4m3, math.nan)) and math.isnan(truncate(dtypes.fp8e5m2, math.nan))
