"""Half on C compilers without _Float16 (clang < 15 on x86-64): the C renderer keeps binary16 bits in `unsigned short` and
computes in float. Conversions round to nearest even bit for bit as the native type does, checked against numpy's conversions
and, where some compiler here has _Float16, against the native C path on the same kernels."""
import copy, shutil
import numpy as np
import pytest
from core.ir.dtype import dtypes
from core.ir.ops import UOp
from plugin_cpu.compiler import CCompiler, cc_supports, find_cc
from plugin_cpu.c_renderer import CPUCRenderer
from cpu_kernels import C_EMULATED_HALF, device, elementwise, run

EMU = C_EMULATED_HALF

def _bits(a: np.ndarray) -> np.ndarray: return a.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[a.itemsize])

def _quiet_nan_h2f(h: np.ndarray) -> np.ndarray:
  """float32 bits of each half: numpy's conversion, except that a NaN comes out quiet, as the hardware and libgcc convert."""
  f = _bits(h.astype(np.float32)).copy()
  f[np.isnan(h)] |= 0x00400000
  return f

def _nan_f2h(u: np.ndarray, shift: int) -> np.ndarray:
  """Half bits of NaNs given as float32 (shift 13) or float64 (shift 42) bits: sign, quiet, the top 9 payload bits kept."""
  t = u.dtype.type
  sign = (u >> t(8 * u.itemsize - 16)).astype(np.uint16) & 0x8000
  return sign | 0x7e00 | ((u >> t(shift)) & t(0x3ff)).astype(np.uint16)

def _cast(which: str, x: np.ndarray, src_dt, dst_dt, out_np, **kw) -> np.ndarray:
  uops = elementwise(len(x), [src_dt], dst_dt, lambda a: a.cast(dst_dt))
  return run(which, uops, [np.zeros(len(x), out_np), x], **kw)[0]

def _floats_near_half_midpoints(rs: np.random.Generator) -> np.ndarray:
  """float32 bits: all exponents and top mantissa bits with low 13-bit patterns at, around and between half rounding points,
  then random bits (NaNs and infinities included)."""
  hi = np.arange(1 << 19, dtype=np.uint32) << 13
  lows = np.array([0, 1, 0xfff, 0x1000, 0x1001, 0x1fff], np.uint32)
  return np.concatenate([(hi[:, None] | lows[None, :]).ravel(), rs.integers(0, 1 << 32, 1 << 20, dtype=np.uint32)])

def test_emulated_half_source_uses_no_float16_type():
  ren = device(EMU).renderer
  assert ren.native_half is False and type(ren) is CPUCRenderer
  src = ren.render("k", elementwise(4, [dtypes.float16, dtypes.float16], dtypes.float16, lambda x, y: x * y + x))
  assert "_Float16" not in src and "core_f2h" in src and "unsigned short* restrict data0" in src, src

def test_half_to_float_every_bit_pattern():
  h = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
  got = _cast(EMU, h, dtypes.float16, dtypes.float32, np.float32)
  np.testing.assert_array_equal(_bits(got), _quiet_nan_h2f(h))
  d = _cast(EMU, h, dtypes.float16, dtypes.float64, np.float64)
  np.testing.assert_array_equal(d[~np.isnan(h)], h[~np.isnan(h)].astype(np.float64))
  assert np.isnan(d[np.isnan(h)]).all()

def _check_to_half(u: np.ndarray, x: np.ndarray, dt, nan_shift: int) -> None:
  """The emulated cast of `x` (bits `u`) to half matches numpy's bit for bit; NaNs keep their payload's top bits, quieted."""
  got = _bits(_cast(EMU, x, dt, dtypes.float16, np.float16))
  nan = np.isnan(x)
  with np.errstate(over="ignore"): want = _bits(x[~nan].astype(np.float16))
  np.testing.assert_array_equal(got[~nan], want)
  np.testing.assert_array_equal(got[nan], _nan_f2h(u[nan], nan_shift))

def test_float_to_half_rounds_to_nearest_even():
  u = _floats_near_half_midpoints(np.random.default_rng(0))
  f = u.view(np.float32)
  _check_to_half(u, f, dtypes.float32, 13)
  # by hand: the ties at 1 + 2**-11 (to even: 1.0) and 1 + 3 * 2**-11 (up), the largest half, the first value that is inf,
  # the smallest subnormal and the tie below it (to even: 0), -0.0
  vals = np.array([1 + 2**-11, 1 + 3 * 2**-11, 65504.0, 65519.99, 65520.0, 2**-24, 2**-25, 2**-25 * 1.0000001, -0.0], np.float32)
  np.testing.assert_array_equal(_bits(_cast(EMU, vals, dtypes.float32, dtypes.float16, np.float16)),
                                [0x3c00, 0x3c02, 0x7bff, 0x7bff, 0x7c00, 0x0001, 0x0000, 0x0001, 0x8000])

def test_double_to_half_rounds_once():
  # through float32, 1 + 2**-11 + 2**-40 would round to the tie 1 + 2**-11 and then to even (1.0): the right answer is up
  # (all exponents and top mantissa bits, random bits at the last kept place, low 42-bit patterns at and around the ties)
  rs = np.random.default_rng(1)
  hi = np.arange(1 << 19, dtype=np.uint64) << np.uint64(45)
  lows = np.array([0, 1, (1 << 41) - 1, 1 << 41, (1 << 41) + 1, (1 << 42) - 1, (1 << 41) + (1 << 12)], np.uint64)
  mid = rs.integers(0, 8, (len(hi), len(lows)), dtype=np.uint64) << np.uint64(42)
  u = np.concatenate([(hi[:, None] | mid | lows[None, :]).ravel(), rs.integers(0, 1 << 64, 1 << 20, dtype=np.uint64)])
  d = u.view(np.float64)
  _check_to_half(u, d, dtypes.float64, 42)
  assert _bits(_cast(EMU, np.array([1 + 2**-11 + 2**-40]), dtypes.float64, dtypes.float16, np.float16))[0] == 0x3c01

def test_int_to_half_and_back():
  i = np.concatenate([np.arange(-70000, 70001, dtype=np.int64), [-2**63, 2**63 - 1, 2**40, 65519, 65520, -65520]]).astype(np.int64)
  with np.errstate(over="ignore"): want = i.astype(np.float16)
  np.testing.assert_array_equal(_bits(_cast(EMU, i, dtypes.int64, dtypes.float16, np.float16)), _bits(want))
  h = np.array([1.5, -2.5, 65504.0, -0.0, 1000.5], np.float16)
  np.testing.assert_array_equal(_cast(EMU, h, dtypes.float16, dtypes.int32, np.int32), [1, -2, 65504, 0, 1000])
  np.testing.assert_array_equal(_cast(EMU, np.array([0.0, -0.0, 0.5, np.nan], np.float16), dtypes.float16, dtypes.bool, np.bool_),
                                [False, False, True, True])

@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "max", "lt", "ne"])
def test_half_arithmetic_matches_numpy(op):
  rs = np.random.default_rng(2)
  a, b = (rs.integers(0, 1 << 16, 1 << 18, dtype=np.uint32).astype(np.uint16).view(np.float16) for _ in range(2))
  fn, ref = {"add": (lambda x, y: x + y, np.add), "sub": (lambda x, y: x - y, np.subtract), "mul": (lambda x, y: x * y, np.multiply),
             "div": (lambda x, y: x / y, np.divide), "max": (lambda x, y: x.maximum(y), np.maximum), "lt": (lambda x, y: x < y, np.less),
             "ne": (lambda x, y: x.ne(y), np.not_equal)}[op]
  out_dt = dtypes.bool if op in ("lt", "ne") else dtypes.float16
  got = run(EMU, elementwise(len(a), [dtypes.float16, dtypes.float16], out_dt, fn), [np.zeros(len(a), out_dt.fmt), a, b])[0]
  with np.errstate(all="ignore"): want = ref(a, b)
  if out_dt is dtypes.bool: np.testing.assert_array_equal(got, want)
  else:
    nan = np.isnan(want)
    np.testing.assert_array_equal(_bits(got)[~nan], _bits(want)[~nan])
    assert np.isnan(got[nan]).all()

def test_half_vectors_where_and_constants():
  # out[4i:4i+4] = where(x < 1.5, x * 0.1, -x) as halfx4 loads and stores; 0.1 is the half nearest it (0x2e66)
  x = np.array([0.5, 1.5, 2.0, -3.0, 65504.0, np.inf, -0.0, 1e-7], np.float16)
  v4 = dtypes.float16.vec(4)
  uops = elementwise(8, [dtypes.float16], dtypes.float16, lambda v: (v < UOp.const(v4, 1.5)).where(v * UOp.const(v4, 0.1), -v), vec=4)
  src = device(EMU).renderer.render("k", uops)
  assert "halfx4" in src and "0x2e66" in src, src
  got = run(EMU, uops, [np.zeros(8, np.float16), x])[0]
  np.testing.assert_array_equal(_bits(got), _bits(np.where(x < 1.5, x * np.float16(0.1), -x)))

def _native_half_compiler() -> str | None:
  """A C compiler on this host with _Float16 ($CC's first), or None."""
  for cand in [find_cc(), "gcc", "clang", "cc"]:
    if (path := shutil.which(cand)) and cc_supports(path, "_Float16"): return path
  return None

def test_emulation_matches_native_float16_bit_for_bit():
  cc = _native_half_compiler()
  if cc is None: pytest.skip("no C compiler on this host has _Float16 to compare with (the tests above check against numpy)")
  native, comp = CPUCRenderer(cc), CCompiler(cc)
  assert native.native_half
  emulated = copy.copy(native)
  emulated.native_half = False
  rs = np.random.default_rng(3)
  f = _floats_near_half_midpoints(rs).view(np.float32)
  with np.errstate(invalid="ignore"): d = np.concatenate([rs.integers(0, 1 << 64, 1 << 20, dtype=np.uint64).view(np.float64), f.astype(np.float64) * (1 + 2**-30)])
  h = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
  cases = [(f, dtypes.float32, dtypes.float16, np.float16), (d, dtypes.float64, dtypes.float16, np.float16),
           (h, dtypes.float16, dtypes.float32, np.float32)]
  for x, src_dt, dst_dt, out_np in cases:
    want = _cast(EMU, x, src_dt, dst_dt, out_np, ren=native, compiler=comp)
    np.testing.assert_array_equal(_bits(_cast(EMU, x, src_dt, dst_dt, out_np, ren=emulated, compiler=comp)), _bits(want),
                                  err_msg=f"{src_dt} -> {dst_dt}")
  a, b, e = (rs.integers(0, 1 << 16, 1 << 18, dtype=np.uint32).astype(np.uint16).view(np.float16) for _ in range(3))
  for fn in (lambda x, y, z: x * y + z, lambda x, y, z: (x / y).sqrt() - z, lambda x, y, z: x.maximum(y) * (z < x).where(y, z)):
    uops = elementwise(len(a), [dtypes.float16] * 3, dtypes.float16, fn)
    want, got = (run(EMU, uops, [np.zeros(len(a), np.float16), a, b, e], ren=r, compiler=comp)[0] for r in (native, emulated))
    # which NaN operand's payload an x86 instruction passes on depends on the operand order the compiler picked: NaN is NaN
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(_bits(got)[~nan], _bits(want)[~nan])
