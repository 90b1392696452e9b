"""Hand-built linearized kernels rendered by both CPU renderers (C and LLVM IR), compiled, run, and checked against numpy."""
import math, struct
import numpy as np
import pytest
from core.ir.dtype import dtypes, truncate
from core.ir.ops import UOp, Ops, AxisType
from core.ir.alu import exec_alu
from cpu_kernels import RENDERERS, C_EMULATED_HALF, Linear, c, rng, buf, run, elementwise, offset_row_sums

# every kernel also through the C renderer's half emulation, which hosts whose compiler has _Float16 would not run otherwise
pytestmark = pytest.mark.parametrize("ren", RENDERERS + [C_EMULATED_HALF])

def test_add_with_casts(ren):
  a, b = np.arange(-8, 8, dtype=np.int32), np.linspace(-1, 1, 16, dtype=np.float32)
  uops = elementwise(16, [dtypes.int32, dtypes.float32], dtypes.float32, lambda x, y: x.cast(dtypes.float32) + y)
  out = run(ren, uops, [np.zeros(16, np.float32), a, b])[0]
  np.testing.assert_array_equal(out, a.astype(np.float32) + b)

def test_narrow_int_wraps_inside_an_expression(ren):
  # (a+b)//2 in uint8: the sum wraps at 256 before the division, although C would compute it in int
  a, b = np.array([200, 255, 3, 128], np.uint8), np.array([100, 1, 4, 128], np.uint8)
  uops = elementwise(4, [dtypes.uint8, dtypes.uint8], dtypes.uint8, lambda x, y: (x + y) // c(2, dtypes.uint8))
  out = run(ren, uops, [np.zeros(4, np.uint8), a, b])[0]
  np.testing.assert_array_equal(out, (a + b) // 2)

def test_int64_and_double(ren):
  a = np.array([2**40, -3, 7, -(2**62)], np.int64)
  uops = elementwise(4, [dtypes.int64], dtypes.float64, lambda x: (x * c(3, dtypes.int64)).cast(dtypes.float64) / c(2.0, dtypes.float64))
  out = run(ren, uops, [np.zeros(4, np.float64), a])[0]
  np.testing.assert_array_equal(out, (a * 3).astype(np.float64) / 2.0)

def test_reduction_with_register_accumulator(ren):
  # out[i] = sum_j x[i*8+j], the accumulator re-initialized for each i (offset_row_sums with offset 0)
  x = np.arange(32, dtype=np.float32) * 0.5
  res = run(ren, offset_row_sums((0,), 32), [np.zeros(4, np.float32), x])[0]
  np.testing.assert_array_equal(res, x.reshape(4, 8).sum(axis=1))

@pytest.mark.parametrize("idx_dt", [dtypes.int32, dtypes.int64, dtypes.index])
def test_define_var_loop_bound(ren, idx_dt):
  # variables are passed as 32-bit ints; with 64-bit index math the kernel widens them itself
  out = buf(0, dtypes.int32, 10)
  n = UOp.variable("n", 1, 10, idx_dt)
  lin = Linear()
  lin.add(out, n)
  r = lin.add(UOp(Ops.RANGE, idx_dt, (n,), (0, AxisType.LOOP)))
  lin.add(out.index(r).store((r * r).cast(dtypes.int32)).end(r))
  res = run(ren, lin.uops, [np.full(10, -1, np.int32)], vals=(6,))[0]
  np.testing.assert_array_equal(res, [0, 1, 4, 9, 16, 25, -1, -1, -1, -1])

def test_gated_load_and_store(ren):
  # the input has 10 elements but the loop runs 16: the gate must keep the load in bounds; odd i are not stored
  x = np.arange(10, dtype=np.float32) + 1
  out, inp = buf(0, dtypes.float32, 16), buf(1, dtypes.float32, 10)
  lin = Linear()
  lin.add(out, inp)
  r = lin.add(rng(16))
  val = inp.index(r, valid=r < c(10)).load(c(-1.0, dtypes.float32))
  lin.add(out.index(r, valid=(r % c(2)).ne(c(1))).store(val).end(r))
  res = run(ren, lin.uops, [np.full(16, 7.0, np.float32), x])[0]
  want = np.array([(x[i] if i < 10 else -1.0) if i % 2 == 0 else 7.0 for i in range(16)], np.float32)
  np.testing.assert_array_equal(res, want)

def test_gated_load_default_is_zero(ren):
  out, inp = buf(0, dtypes.int32, 4), buf(1, dtypes.int32, 4)
  lin = Linear()
  lin.add(out, inp)
  r = lin.add(rng(4))
  lin.add(out.index(r).store(inp.index(r, valid=r < c(2)).load()).end(r))
  res = run(ren, lin.uops, [np.full(4, 9, np.int32), np.array([5, 6, 7, 8], np.int32)])[0]
  np.testing.assert_array_equal(res, [5, 6, 0, 0])

def test_if_block(ren):
  out = buf(0, dtypes.int32, 6)
  lin = Linear()
  lin.add(out)
  r = lin.add(rng(6))
  iff = lin.add(UOp(Ops.IF, dtypes.void, (r < c(3),)))
  st = lin.add(out.index(r).store(r + c(100)))
  lin.add(UOp(Ops.ENDIF, dtypes.void, (iff,)), UOp(Ops.END, dtypes.void, (st, r)))
  res = run(ren, lin.uops, [np.zeros(6, np.int32)])[0]
  np.testing.assert_array_equal(res, [100, 101, 102, 0, 0, 0])

INT_MIN = -2**31
DIV_A = np.array([7, -7, 7, -7, 0, 5, INT_MIN, INT_MIN, 13, -13, 2**31 - 1, 1], np.int32)
DIV_B = np.array([2, 2, -2, -2, 3, 0, -1, 1, 5, 5, -1, -3], np.int32)

@pytest.mark.parametrize("op", [Ops.IDIV, Ops.MOD])
def test_int_div_mod_truncate_toward_zero(ren, op):
  uops = elementwise(len(DIV_A), [dtypes.int32, dtypes.int32], dtypes.int32, lambda x, y: x.alu(op, y))
  res = run(ren, uops, [np.zeros(len(DIV_A), np.int32), DIV_A, DIV_B])[0]
  want = [exec_alu(op, dtypes.int32, (int(a), int(b))) for a, b in zip(DIV_A, DIV_B)]
  np.testing.assert_array_equal(res, want)
  assert (res[0], res[1], res[2], res[3]) == ((3, -3, -3, 3) if op is Ops.IDIV else (1, -1, 1, -1))

@pytest.mark.parametrize("op, k", [(Ops.IDIV, 3), (Ops.MOD, 3), (Ops.IDIV, -4), (Ops.MOD, -4)])
def test_int_div_mod_by_constant(ren, op, k):
  uops = elementwise(len(DIV_A), [dtypes.int32], dtypes.int32, lambda x: x.alu(op, c(k)))
  res = run(ren, uops, [np.zeros(len(DIV_A), np.int32), DIV_A])[0]
  np.testing.assert_array_equal(res, [exec_alu(op, dtypes.int32, (int(a), k)) for a in DIV_A])

def test_unsigned_div_mod(ren):
  a, b = np.array([7, 2**32 - 1, 9, 0], np.uint32), np.array([2, 2, 0, 5], np.uint32)
  uops = elementwise(4, [dtypes.uint32, dtypes.uint32], dtypes.uint32, lambda x, y: x // y + x % y)
  res = run(ren, uops, [np.zeros(4, np.uint32), a, b])[0]
  want = [exec_alu(Ops.ADD, dtypes.uint32, (exec_alu(Ops.IDIV, dtypes.uint32, (int(x), int(y))), exec_alu(Ops.MOD, dtypes.uint32, (int(x), int(y)))))
          for x, y in zip(a, b)]
  np.testing.assert_array_equal(res, want)

NAN_A = np.array([1.0, np.nan, 2.0, np.nan, -0.0, np.inf], np.float32)
NAN_B = np.array([1.0, 1.0, np.nan, np.nan, 0.0, 1.0], np.float32)

@pytest.mark.parametrize("op, fn", [(Ops.CMPLT, np.less), (Ops.CMPNE, np.not_equal), (Ops.CMPEQ, np.equal)])
def test_nan_compares(ren, op, fn):
  uops = elementwise(6, [dtypes.float32, dtypes.float32], dtypes.bool, lambda x, y: x.alu(op, y))
  res = run(ren, uops, [np.zeros(6, np.bool_), NAN_A, NAN_B])[0]
  np.testing.assert_array_equal(res, fn(NAN_A, NAN_B))

def test_max_propagates_nan(ren):
  uops = elementwise(6, [dtypes.float32, dtypes.float32], dtypes.float32, lambda x, y: x.maximum(y))
  res = run(ren, uops, [np.zeros(6, np.float32), NAN_A, NAN_B])[0]
  want = np.array([exec_alu(Ops.MAX, dtypes.float32, (float(a), float(b))) for a, b in zip(NAN_A, NAN_B)], np.float32)
  np.testing.assert_array_equal(res, want)

def test_where_and_bool_ops(ren):
  a, b = np.array([1, 5, -2, 8], np.int32), np.array([3, 2, -2, 9], np.int32)
  uops = elementwise(4, [dtypes.int32, dtypes.int32], dtypes.int32,
                     lambda x, y: ((x < y) ^ x.eq(y)).where(x * c(10), y.maximum(x).alu(Ops.NEG)))
  res = run(ren, uops, [np.zeros(4, np.int32), a, b])[0]
  np.testing.assert_array_equal(res, np.where((a < b) ^ (a == b), a * 10, -np.maximum(a, b)))

def test_shifts(ren):
  a = np.array([1, -16, 3, -1, 1024], np.int32)
  s = np.array([3, 2, 33, 31, 40], np.int32)   # 33 and 40 are out of range: the count is masked like the reference ALU
  uops = elementwise(5, [dtypes.int32, dtypes.int32], dtypes.int32, lambda x, y: (x << y) ^ (x >> y))
  res = run(ren, uops, [np.zeros(5, np.int32), a, s])[0]
  want = [exec_alu(Ops.XOR, dtypes.int32, (exec_alu(Ops.SHL, dtypes.int32, (int(x), int(y))), exec_alu(Ops.SHR, dtypes.int32, (int(x), int(y)))))
          for x, y in zip(a, s)]
  np.testing.assert_array_equal(res, want)
  u = np.array([0x80000000, 0xffffffff], np.uint32)
  uops = elementwise(2, [dtypes.uint32], dtypes.uint32, lambda x: x >> c(4, dtypes.uint32))
  np.testing.assert_array_equal(run(ren, uops, [np.zeros(2, np.uint32), u])[0], u >> 4)

def test_casts(ren):
  f = np.array([1.9, -1.9, 300.7, -0.0, np.nan, 1e-3], np.float32)
  cases = [
    (dtypes.int32, lambda x: x.cast(dtypes.int32), lambda: np.trunc(f[:4]).astype(np.int32), 4),
    (dtypes.bool, lambda x: x.cast(dtypes.bool), lambda: np.array([True, True, True, False, True, True]), 6),
    (dtypes.float16, lambda x: x.cast(dtypes.float16), lambda: f.astype(np.float16), 6),
    (dtypes.float64, lambda x: x.cast(dtypes.float64), lambda: f.astype(np.float64), 6),
    (dtypes.uint8, lambda x: x.cast(dtypes.int32).cast(dtypes.uint8), lambda: np.array([1, 255, 44, 0], np.uint8), 4),
  ]
  for out_dt, fn, want, n in cases:
    uops = elementwise(n, [dtypes.float32], out_dt, fn)
    res = run(ren, uops, [np.zeros(n, to_np_(out_dt)), f[:n].copy()])[0]
    np.testing.assert_array_equal(res, want()[:n], err_msg=f"float32 -> {out_dt}")

def test_int_casts(ren):
  a = np.array([-1, 255, 256, -129, 2**40 + 5], np.int64)
  uops = elementwise(5, [dtypes.int64], dtypes.int32, lambda x: x.cast(dtypes.int8).cast(dtypes.int32) + x.cast(dtypes.uint8).cast(dtypes.int32))
  res = run(ren, uops, [np.zeros(5, np.int32), a])[0]
  np.testing.assert_array_equal(res, a.astype(np.int8).astype(np.int32) + a.astype(np.uint8).astype(np.int32))
  b = np.array([True, False, True], np.bool_)
  uops = elementwise(3, [dtypes.bool], dtypes.float32, lambda x: x.cast(dtypes.float32) + x.cast(dtypes.int32).cast(dtypes.float32))
  np.testing.assert_array_equal(run(ren, uops, [np.zeros(3, np.float32), b])[0], [2.0, 0.0, 2.0])

def test_half_arithmetic(ren):
  a = np.array([1.5, -2.25, 1000.0, 0.1], np.float16)
  b = np.array([2.0, 0.5, 100.0, 0.2], np.float16)
  uops = elementwise(4, [dtypes.float16, dtypes.float16], dtypes.float16, lambda x, y: x * y + x)
  res = run(ren, uops, [np.zeros(4, np.float16), a, b])[0]
  with np.errstate(over="ignore"): np.testing.assert_array_equal(res, a * b + a)   # numpy rounds each op to half too (1000*100 overflows to inf)
  assert np.isinf(res[2])

def test_bitcast(ren):
  f = np.array([1.0, -2.5, np.inf, 0.0], np.float32)
  uops = elementwise(4, [dtypes.float32], dtypes.uint32, lambda x: x.bitcast(dtypes.uint32))
  np.testing.assert_array_equal(run(ren, uops, [np.zeros(4, np.uint32), f])[0], f.view(np.uint32))
  i = np.array([0x3f800000, 0x7fc00000, -1], np.int32)
  uops = elementwise(3, [dtypes.int32], dtypes.float32, lambda x: x.bitcast(dtypes.float32))
  np.testing.assert_array_equal(run(ren, uops, [np.zeros(3, np.float32), i])[0].view(np.int32), i)

def test_constants(ren):
  vals = [(dtypes.int32, -2**31), (dtypes.int64, -2**63), (dtypes.uint64, 2**64 - 1), (dtypes.uint32, 2**32 - 1),
          (dtypes.int8, -128), (dtypes.float32, -0.0), (dtypes.float32, math.inf), (dtypes.float32, -math.inf),
          (dtypes.float64, 0.1), (dtypes.float16, 65504.0), (dtypes.float32, 1e-45)]
  for dt, v in vals:
    out = buf(0, dt, 1)
    lin = Linear()
    lin.add(out, out.index(c(0)).store(c(v, dt) + c(0, dt) if not dtypes.is_float(dt) else c(v, dt)))
    res = run(ren, lin.uops, [np.zeros(1, to_np_(dt))])[0]
    assert struct.pack(f"<{dt.fmt}", res[0]) == struct.pack(f"<{dt.fmt}", truncate(dt, v)), (dt, v, res[0])
  out = buf(0, dtypes.float32, 1)
  lin = Linear()
  lin.add(out, out.index(c(0)).store(c(math.nan, dtypes.float32)))
  assert np.isnan(run(ren, lin.uops, [np.zeros(1, np.float32)])[0][0])

def test_transcendentals(ren):
  x = np.array([0.5, 1.0, 2.0, 10.0], np.float32)
  for op, fn in [(Ops.EXP2, np.exp2), (Ops.LOG2, np.log2), (Ops.SIN, np.sin), (Ops.SQRT, np.sqrt), (Ops.RECIPROCAL, np.reciprocal),
                 (Ops.TRUNC, np.trunc)]:
    uops = elementwise(4, [dtypes.float32], dtypes.float32, lambda a: a.alu(op))
    np.testing.assert_allclose(run(ren, uops, [np.zeros(4, np.float32), x])[0], fn(x), rtol=1e-6, err_msg=op.name)
  h = x.astype(np.float16)
  uops = elementwise(4, [dtypes.float16], dtypes.float16, lambda a: a.sqrt())
  np.testing.assert_array_equal(run(ren, uops, [np.zeros(4, np.float16), h])[0], np.sqrt(h))

def test_float4_vectors(ren):
  # out[4i:4i+4] = x[4i:4i+4] * 2 + (x[4i+3], x[4i+2], x[4i+1], x[4i]), with vector loads/stores, GEP and VECTORIZE
  x = np.arange(16, dtype=np.float32)
  v4 = dtypes.float32.vec(4)
  uops = elementwise(16, [dtypes.float32], dtypes.float32, lambda v: v * UOp.const(v4, 2.0) + UOp.vectorize(*[v.gep(i) for i in (3, 2, 1, 0)]),
                     vec=4)
  res = run(ren, uops, [np.zeros(16, np.float32), x])[0]
  np.testing.assert_array_equal(res, (x.reshape(4, 4) * 2 + x.reshape(4, 4)[:, ::-1]).ravel())

def test_vector_compare_where_lane_by_lane(ren):
  x = np.array([1, -2, 3, -4, 5, -6, 7, -8], np.int32)
  v4 = dtypes.int32.vec(4)
  uops = elementwise(8, [dtypes.int32], dtypes.int32, lambda v: (v < UOp.const(v4, 0)).where(-v, v.maximum(UOp.const(v4, 4))), vec=4)
  res = run(ren, uops, [np.zeros(8, np.int32), x])[0]
  np.testing.assert_array_equal(res, np.where(x < 0, -x, np.maximum(x, 4)))

def to_np_(dt):
  from core.ir.dtype import to_np
  return to_np(dt)
