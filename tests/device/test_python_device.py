"""The PYTHON device: hand-built linearized kernels run by the numpy interpreter, checked against numpy and exec_alu."""
from __future__ import annotations
import math, random
from fractions import Fraction
import numpy as np
import pytest
from core.helpers import Context
from core.ir.alu import exec_alu
from core.ir.dtype import AddrSpace, DType, dtypes, to_np, truncate
from core.ir.ops import AxisType, GroupOp, Ops, UOp
from core.device.python import (PythonAllocator, PythonCompiler, PythonProgram, PythonRenderer, alu, alu_fn, deserialize_uops, make_python_device,
                                serialize_uops)

i32, f32 = dtypes.int32, dtypes.float32

def linear(*roots: UOp) -> list[UOp]:
  """Execution order: each root's not-yet-placed sources, then the root, in the order the roots are given."""
  out: dict[UOp, None] = {}
  for r in roots:
    for u in r.toposort():
      if u not in out: out[u] = None
  return list(out)

def run(uops: list[UOp], *arrays: np.ndarray, global_size: tuple[int, ...] = (1, 1, 1), vals: tuple[int, ...] = (),
        fold: bool = True, folds: int | None = None) -> list[np.ndarray]:
  """Render, compile, load and launch on the PYTHON device; returns every buffer's contents after the run.
  fold=False runs every loop iteration by iteration; `folds` asserts how many loops the fast path recognised."""
  dev = make_python_device("PYTHON")
  lib = dev.compiler.compile_cached(dev.renderer.render("test_kernel", uops))
  with Context(PYTHON_FOLD_LOOPS=int(fold)): prg = dev.runtime("test_kernel", lib)
  if folds is not None: assert len(prg.folds) == folds
  bufs = []
  for a in arrays:
    b = dev.allocator.alloc(max(a.nbytes, 1))
    dev.allocator._copyin(b[:a.nbytes], memoryview(np.ascontiguousarray(a)).cast("B"))
    bufs.append(b)
  prg(*bufs, global_size=global_size, vals=vals)
  outs = []
  for a, b in zip(arrays, bufs):
    host = np.empty_like(a)
    dev.allocator._copyout(memoryview(host).cast("B"), b[:a.nbytes])
    outs.append(host)
  return outs

def c(v, dtype: DType = i32) -> UOp: return UOp.const(dtype, v)
def gidx(n: int, dim: int = 0) -> UOp: return UOp(Ops.SPECIAL, i32, (c(n),), f"gidx{dim}")
def rng(n: UOp | int, axis: int, kind: AxisType = AxisType.LOOP) -> UOp:
  return UOp(Ops.RANGE, i32, (n if isinstance(n, UOp) else c(n),), (axis, kind))
def end(x: UOp, r: UOp) -> UOp: return UOp(Ops.END, dtypes.void, (x, r))
def acc_reg(dtype: DType = f32, n: int = 1, slot: int = 0) -> UOp: return UOp(Ops.DEFINE_REG, dtype.ptr(n, AddrSpace.REG), arg=slot)

# *** kernels ***

def test_elementwise_with_gidx():
  n = 37
  out, a, b = (UOp.param(i, f32.ptr(n)) for i in range(3))
  g = gidx(n)
  k = linear(out.index(g).store(a.index(g).load() * c(2.0, f32) + b.index(g).load()))
  x, y = np.random.default_rng(0).standard_normal((2, n)).astype(np.float32)
  res = run(k, np.zeros(n, np.float32), x, y, global_size=(n, 1, 1))[0]
  np.testing.assert_array_equal(res, x * np.float32(2) + y)

def test_three_launch_dims_cover_the_grid():
  # out[z, y, x] = x + 10*y + 100*z over a (4, 3, 5) grid: every thread gets its own coordinates
  shape = (4, 3, 5)
  out = UOp.param(0, i32.ptr(60))
  gx, gy, gz = gidx(5, 0), gidx(3, 1), gidx(4, 2)
  k = linear(out.index(gz * c(15) + gy * c(5) + gx).store(gx + gy * c(10) + gz * c(100)))
  res = run(k, np.zeros(60, np.int32), global_size=(5, 3, 4))[0].reshape(shape)
  z, y, x = np.meshgrid(range(4), range(3), range(5), indexing="ij")
  np.testing.assert_array_equal(res, x + 10 * y + 100 * z)

def test_reduction_loop_with_register_accumulator():
  n, red = 6, 9
  out, a = UOp.param(0, f32.ptr(n)), UOp.param(1, f32.ptr(n * red))
  acc, g = acc_reg(), gidx(n)
  init = acc.index(c(0)).store(c(0.0, f32))
  r = rng(red, 0, AxisType.REDUCE)
  upd = acc.index(c(0)).store(acc.index(c(0)).load() + a.index(g * c(red) + r).load())
  loop = end(upd, r)
  final = out.index(g).store(acc.after(loop).index(c(0)).load())
  k = linear(out, a, acc, g, init, r, upd, loop, final)
  assert [u.op for u in k].index(Ops.END) < [u.op for u in k].index(Ops.AFTER)
  x = np.random.default_rng(1).standard_normal(n * red).astype(np.float32)
  res = run(k, np.zeros(n, np.float32), x, global_size=(n, 1, 1))[0]
  expected = np.zeros(n, np.float32)
  for j in range(red): expected += x.reshape(n, red)[:, j]  # the same summation order as the kernel, so equal bit for bit
  np.testing.assert_array_equal(res, expected)

def test_two_level_loops_without_launch_dims():
  # out[i] = sum_j a[i*J + j] * (i + 1): a single thread walks both loops
  ni, nj = 5, 7
  out, a = UOp.param(0, i32.ptr(ni)), UOp.param(1, i32.ptr(ni * nj))
  acc = acc_reg(i32)
  ri, rj = rng(ni, 0), rng(nj, 1, AxisType.REDUCE)
  init = acc.index(c(0)).store(c(0))
  upd = acc.index(c(0)).store(acc.index(c(0)).load() + a.index(ri * c(nj) + rj).load() * (ri + c(1)))
  inner = end(upd, rj)
  st = out.index(ri).store(acc.after(inner).index(c(0)).load())
  k = linear(out, a, acc, ri, init, rj, upd, inner, st, end(st, ri))
  x = np.arange(ni * nj, dtype=np.int32) - 11
  res = run(k, np.zeros(ni, np.int32), x)[0]
  np.testing.assert_array_equal(res, (x.reshape(ni, nj) * np.arange(1, ni + 1)[:, None]).sum(1))

def test_one_end_closing_two_loops():
  # out[i*4 + j] = i*j, both loops closed by one END (innermost first)
  out = UOp.param(0, i32.ptr(12))
  ri, rj = rng(3, 0), rng(4, 1)
  st = out.index(ri * c(4) + rj).store(ri * rj)
  k = linear(out, ri, rj, st, UOp(Ops.END, dtypes.void, (st, ri, rj)))
  res = run(k, np.full(12, -1, np.int32))[0]
  np.testing.assert_array_equal(res, (np.arange(3)[:, None] * np.arange(4)).reshape(-1))

def test_loop_bound_from_variable_and_zero_trips():
  out, a = UOp.param(0, i32.ptr(4)), UOp.param(1, i32.ptr(10))
  nv = UOp(Ops.DEFINE_VAR, i32, (), ("n", 0, 10))
  acc, g = acc_reg(i32), gidx(4)
  r = rng(nv, 0, AxisType.REDUCE)
  init = acc.index(c(0)).store(g)
  upd = acc.index(c(0)).store(acc.index(c(0)).load() + a.index(r).load())
  loop = end(upd, r)
  k = linear(out, a, nv, acc, g, init, r, upd, loop, out.index(g).store(acc.after(loop).index(c(0)).load()))
  x = np.arange(10, dtype=np.int32) ** 2
  for n in (0, 1, 6, 10):
    res = run(k, np.zeros(4, np.int32), x, global_size=(4, 1, 1), vals=(n,))[0]
    np.testing.assert_array_equal(res, np.arange(4) + x[:n].sum())

def test_loop_bound_that_differs_per_thread():
  # out[g] = sum_{j < g} (j + 1): thread g runs g iterations
  out = UOp.param(0, i32.ptr(6))
  acc, g = acc_reg(i32), gidx(6)
  r = rng(g, 0, AxisType.REDUCE)
  init = acc.index(c(0)).store(c(0))
  upd = acc.index(c(0)).store(acc.index(c(0)).load() + r + c(1))
  loop = end(upd, r)
  k = linear(out, acc, g, init, r, upd, loop, out.index(g).store(acc.after(loop).index(c(0)).load()))
  res = run(k, np.full(6, -1, np.int32), global_size=(6, 1, 1))[0]
  np.testing.assert_array_equal(res, [g * (g + 1) // 2 for g in range(6)])

def test_gated_load_never_reads_out_of_bounds():
  # a has 5 elements, threads go to 9: a gated INDEX reads the alternative value instead
  out, a = UOp.param(0, f32.ptr(10)), UOp.param(1, f32.ptr(5))
  g = gidx(10)
  k = linear(out.index(g).store(a.index(g, valid=g < c(5)).load(c(-1.5, f32))))
  x = np.arange(5, dtype=np.float32) + 0.25
  res = run(k, np.zeros(10, np.float32), x, global_size=(10, 1, 1))[0]
  np.testing.assert_array_equal(res, np.concatenate([x, np.full(5, -1.5, np.float32)]))

def test_gated_load_defaults_to_zero_and_gated_store_skips():
  out, a = UOp.param(0, i32.ptr(8)), UOp.param(1, i32.ptr(8))
  g = gidx(8)
  even = (g % c(2)).ne(c(1))
  k = linear(out.index(g, valid=even).store(a.index(g, valid=g < c(6)).load() + c(100)))
  res = run(k, np.full(8, 7, np.int32), np.arange(8, dtype=np.int32), global_size=(8, 1, 1))[0]
  np.testing.assert_array_equal(res, [100, 7, 102, 7, 104, 7, 100, 7])

def test_if_endif_masks_stores():
  out = UOp.param(0, i32.ptr(8))
  g = gidx(8)
  cond = g < c(3)
  iff = UOp(Ops.IF, dtypes.void, (cond,))
  st = out.index(g).store(g * c(10))
  k = linear(out, g, cond, iff, st, UOp(Ops.ENDIF, dtypes.void, (iff,)))
  assert [u.op for u in k].index(Ops.IF) < [u.op for u in k].index(Ops.STORE) < [u.op for u in k].index(Ops.ENDIF)
  res = run(k, np.full(8, -1, np.int32), global_size=(8, 1, 1))[0]
  np.testing.assert_array_equal(res, [0, 10, 20, -1, -1, -1, -1, -1])

def test_out_of_bounds_access_is_an_error_not_a_crash():
  out, a = UOp.param(0, i32.ptr(4)), UOp.param(1, i32.ptr(4))
  g = gidx(4)
  k = linear(out.index(g).store(a.index(g + c(1)).load()))
  with pytest.raises(IndexError, match="element 4 of a buffer of 4"): run(k, np.zeros(4, np.int32), np.zeros(4, np.int32), global_size=(4, 1, 1))

def test_int_div_mod_truncate_toward_zero():
  n = 64
  out_q, out_r, a, b = (UOp.param(i, i32.ptr(n)) for i in range(4))
  g = gidx(n)
  la, lb = a.index(g).load(), b.index(g).load()
  k = linear(out_q.index(g).store(la // lb), out_r.index(g).store(la % lb))
  rs = np.random.default_rng(2)
  x = rs.integers(-1000, 1000, n).astype(np.int32)
  y = rs.integers(-30, 30, n).astype(np.int32)
  x[:4], y[:4] = [-7, 7, -7, -2**31], [2, -2, -2, -1]
  y[y == 0] = 3
  q, r = run(k, np.zeros(n, np.int32), np.zeros(n, np.int32), x, y, global_size=(n, 1, 1))[:2]
  eq = [int(xi / yi) if abs(xi) < 2**31 - 1 else -2**31 for xi, yi in zip(x.tolist(), y.tolist())]  # C truncation; MIN/-1 wraps
  np.testing.assert_array_equal(q, eq)
  np.testing.assert_array_equal(r, [xi - qi * yi if yi != -1 else 0 for xi, yi, qi in zip(x.tolist(), y.tolist(), eq)])
  assert q[:3].tolist() == [-3, -3, 3] and r[:3].tolist() == [-1, 1, -1]

def test_nan_compares_and_max():
  n = 5
  outs = [UOp.param(i, dtypes.bool.ptr(n)) for i in range(3)] + [UOp.param(3, f32.ptr(n))]
  a, b = UOp.param(4, f32.ptr(n)), UOp.param(5, f32.ptr(n))
  g = gidx(n)
  la, lb = a.index(g).load(), b.index(g).load()
  k = linear(outs[0].index(g).store(la.ne(lb)), outs[1].index(g).store(la < lb), outs[2].index(g).store(la.eq(lb)),
             outs[3].index(g).store(la.maximum(lb)))
  x = np.array([np.nan, 1.0, np.nan, 2.0, -0.0], np.float32)
  y = np.array([np.nan, np.nan, 1.0, 2.0, 0.0], np.float32)
  ne, lt, eq, mx = run(k, *(np.zeros(n, bool),) * 3, np.zeros(n, np.float32), x, y, global_size=(n, 1, 1))[:4]
  np.testing.assert_array_equal(ne, [True, True, True, False, False])
  np.testing.assert_array_equal(lt, [False, False, False, False, False])
  np.testing.assert_array_equal(eq, [False, False, False, True, True])
  np.testing.assert_array_equal(mx[3:], [2.0, 0.0])
  assert np.isnan(mx[:3]).all()

def test_casts_follow_c():
  n = 8
  x = np.array([-1.75, 2.9, 300.7, -300.2, 0.0, np.nan, np.inf, 70000.5], np.float32)
  a = UOp.param(0, f32.ptr(n))
  targets = [dtypes.int32, dtypes.uint8, dtypes.int8, dtypes.bool, dtypes.float16, dtypes.float64]
  outs = [UOp.param(i + 1, d.ptr(n)) for i, d in enumerate(targets)]
  g = gidx(n)
  la = a.index(g).load()
  k = linear(*(o.index(g).store(la.cast(d)) for o, d in zip(outs, targets)))
  res = run(k, x, *(np.zeros(n, to_np(d)) for d in targets), global_size=(n, 1, 1))[1:]
  def c_int(v: float, bits: int, signed: bool) -> int:
    if not math.isfinite(v): return 0
    w = int(v) & ((1 << bits) - 1)  # int() truncates toward zero
    return w - (1 << bits) if signed and w >> (bits - 1) else w
  np.testing.assert_array_equal(res[0], [c_int(v, 32, True) for v in x.tolist()])
  np.testing.assert_array_equal(res[1], [c_int(v, 8, False) for v in x.tolist()])
  np.testing.assert_array_equal(res[2], [c_int(v, 8, True) for v in x.tolist()])
  assert res[0][0] == -1 and res[1][0] == 255 and res[1][2] == 44
  np.testing.assert_array_equal(res[3], [True, True, True, True, False, True, True, True])
  with np.errstate(over="ignore"): np.testing.assert_array_equal(res[4], x.astype(np.float16))  # 70000.5 -> inf
  np.testing.assert_array_equal(res[5], x.astype(np.float64))

def test_int_to_float_and_bool_to_int_casts():
  n = 4
  a, b = UOp.param(0, dtypes.int64.ptr(n)), UOp.param(1, dtypes.bool.ptr(n))
  of, oi = UOp.param(2, f32.ptr(n)), UOp.param(3, dtypes.uint16.ptr(n))
  g = gidx(n)
  k = linear(of.index(g).store(a.index(g).load().cast(f32)), oi.index(g).store(b.index(g).load().cast(dtypes.uint16)))
  x = np.array([-(2**40) - 1, 3, 2**62 + 12345, -5], np.int64)
  y = np.array([True, False, True, False])
  rf, ri = run(k, x, y, np.zeros(n, np.float32), np.zeros(n, np.uint16), global_size=(n, 1, 1))[2:]
  np.testing.assert_array_equal(rf, x.astype(np.float32))
  np.testing.assert_array_equal(ri, [1, 0, 1, 0])

def test_bitcast_reinterprets_bytes():
  n = 6
  a, o_u, o_f = UOp.param(0, f32.ptr(n)), UOp.param(1, dtypes.uint32.ptr(n)), UOp.param(2, f32.ptr(n))
  g = gidx(n)
  bits = a.index(g).load().bitcast(dtypes.uint32)
  k = linear(o_u.index(g).store(bits), o_f.index(g).store((bits ^ c(0x80000000, dtypes.uint32)).bitcast(f32)))
  x = np.array([1.0, -2.5, 0.0, np.inf, 1e-40, 3.14159], np.float32)
  ru, rf = run(k, x, np.zeros(n, np.uint32), np.zeros(n, np.float32), global_size=(n, 1, 1))[1:]
  np.testing.assert_array_equal(ru, x.view(np.uint32))
  np.testing.assert_array_equal(rf, -x)
  assert ru[0] == 0x3F800000

def test_shifts_and_wraparound():
  n = 4
  a, o1, o2, o3 = (UOp.param(i, dtypes.int8.ptr(n)) for i in range(4))
  g = gidx(n)
  la = a.index(g).load()
  k = linear(o1.index(g).store(la << c(3, dtypes.int8)), o2.index(g).store(la >> c(1, dtypes.int8)), o3.index(g).store(la + c(100, dtypes.int8)))
  x = np.array([-128, 127, 33, -3], np.int8)
  r1, r2, r3 = run(k, x, *(np.zeros(n, np.int8),) * 3, global_size=(n, 1, 1))[1:]
  np.testing.assert_array_equal(r1, [0, -8, 8, -24])
  np.testing.assert_array_equal(r2, [-64, 63, 16, -2])
  np.testing.assert_array_equal(r3, [-28, -29, -123, 97])

def test_where_and_transcendentals():
  n = 16
  a, o = UOp.param(0, f32.ptr(n)), UOp.param(1, f32.ptr(n))
  g = gidx(n)
  la = a.index(g).load()
  v = (la < c(0.0, f32)).where(la.exp2(), la.sqrt().sin())
  k = linear(o.index(g).store(v))
  x = np.linspace(-3, 5, n, dtype=np.float32)
  res = run(k, x, np.zeros(n, np.float32), global_size=(n, 1, 1))[1]
  xd = x.astype(np.float64)
  expected = np.where(x < 0, np.exp2(xd), np.sin(np.sqrt(np.abs(xd)))).astype(np.float32)
  np.testing.assert_allclose(res, expected, rtol=1e-6)

def test_vectorize_gep_and_vector_load():
  n = 5
  a, o = UOp.param(0, f32.ptr(2 * n)), UOp.param(1, f32.ptr(n))
  g = gidx(n)
  pair = a.index(g * c(2)).cast(f32.vec(2).ptr(2 * n)).load(dtype=f32.vec(2))   # a[2g], a[2g+1] in one load
  scaled = pair * UOp.const(f32.vec(2), (10.0, 1.0))
  swapped = UOp.vectorize(scaled.gep(1), scaled.gep(0))
  k = linear(o.index(g).store(swapped.gep(0) - swapped.gep(1)))
  x = np.arange(2 * n, dtype=np.float32)
  res = run(k, x, np.zeros(n, np.float32), global_size=(n, 1, 1))[1]
  np.testing.assert_array_equal(res, x[1::2] - 10 * x[0::2])

def test_define_var_values_arrive_in_order():
  n = 4
  o, a = UOp.param(0, i32.ptr(n)), UOp.param(1, i32.ptr(n))
  v1, v2 = UOp(Ops.DEFINE_VAR, i32, (), ("a", 0, 100)), UOp(Ops.DEFINE_VAR, i32, (), ("b", 0, 100))
  g = gidx(n)
  k = linear(o, a, v1, v2, o.index(g).store(a.index(g).load() * v1 - v2))
  res = run(k, np.zeros(n, np.int32), np.arange(n, dtype=np.int32), global_size=(n, 1, 1), vals=(3, 7))[0]
  np.testing.assert_array_equal(res, np.arange(n) * 3 - 7)

def test_register_array_indexed_per_thread():
  # each thread fills a private 4-element array with g*i, then stores them reversed
  n = 3
  o = UOp.param(0, i32.ptr(4 * n))
  reg, g = acc_reg(i32, 4), gidx(n)
  r1 = rng(4, 0)
  fill = reg.index(r1).store(g * r1)
  l1 = end(fill, r1)
  r2 = rng(4, 1)
  st = o.index(g * c(4) + r2).store(reg.after(l1).index(c(3) - r2).load())
  k = linear(o, reg, g, r1, fill, l1, r2, st, end(st, r2))
  res = run(k, np.zeros(4 * n, np.int32), global_size=(n, 1, 1))[0].reshape(n, 4)
  np.testing.assert_array_equal(res, np.arange(n)[:, None] * np.arange(3, -1, -1))

# *** folded loops: all iterations at once, folded in order; must equal the iteration-by-iteration run bit for bit ***

def _reduce_kernel(n: int, red: int, op: Ops, dtype: DType, valid_below: int | None = None) -> list[UOp]:
  out, a = UOp.param(0, dtype.ptr(n)), UOp.param(1, dtype.ptr(n * red))
  acc, g = acc_reg(dtype), gidx(n)
  init_val = {Ops.ADD: 0, Ops.MUL: 1, Ops.MAX: dtype.min}[op]
  init = acc.index(c(0)).store(c(init_val, dtype))
  r = rng(red, 0, AxisType.REDUCE)
  x = a.index(g * c(red) + r, valid=None if valid_below is None else r < c(valid_below)).load()
  upd = acc.index(c(0)).store(acc.index(c(0)).load().alu(op, x))
  loop = end(upd, r)
  return linear(out, a, acc, g, init, r, upd, loop, out.index(g).store(acc.after(loop).index(c(0)).load()))

@pytest.mark.parametrize("op", [Ops.ADD, Ops.MUL, Ops.MAX], ids=lambda o: o.name)
@pytest.mark.parametrize("d", [dtypes.float32, dtypes.float16, dtypes.int8, dtypes.uint32], ids=lambda d: d.name)
def test_folded_reduction_equals_sequential_loop(op: Ops, d: DType):
  n, red = 7, 3000
  rs = np.random.default_rng(3)
  if dtypes.is_float(d): x = (rs.standard_normal(n * red) * 10.0 ** rs.integers(-3, 4, n * red)).astype(to_np(d))
  else: x = rs.integers(int(d.min), int(d.max) + 1, n * red, dtype=np.int64).astype(to_np(d))
  if op is Ops.MUL and dtypes.is_float(d): x = (1 + x.astype(np.float64) / 1e5).astype(to_np(d))
  if op is Ops.MAX and dtypes.is_float(d): x[5 * red + 17] = np.nan  # one NaN poisons row 5 and only row 5
  k = _reduce_kernel(n, red, op, d)
  fast = run(k, np.zeros(n, to_np(d)), x, global_size=(n, 1, 1), folds=1)[0]
  slow = run(k, np.zeros(n, to_np(d)), x, global_size=(n, 1, 1), fold=False, folds=0)[0]
  np.testing.assert_array_equal(fast.view(np.uint8), slow.view(np.uint8))
  ufunc = {Ops.ADD: np.add, Ops.MUL: np.multiply, Ops.MAX: np.maximum}[op]
  init = np.array([{Ops.ADD: 0, Ops.MUL: 1, Ops.MAX: d.min}[op]], to_np(d))
  with np.errstate(all="ignore"):
    expected = [ufunc.accumulate(np.concatenate([init, row]), dtype=to_np(d))[-1] for row in x.reshape(n, red)]  # left to right
  np.testing.assert_array_equal(fast, np.array(expected, to_np(d)))
  if op is Ops.MAX and dtypes.is_float(d): assert np.isnan(fast[5]) and not np.isnan(np.delete(fast, 5)).any()

@pytest.mark.parametrize("n,red,valid_below", [(1, 200_000, 150_000), (64, 40_000, 30_000), (3, 100, 0)])
def test_folded_reduction_with_gated_loads(n: int, red: int, valid_below: int):
  # loads at r >= valid_below are gated off and read 0; 64 threads x 40000 iterations is folded in three chunks
  x = np.random.default_rng(4).standard_normal(n * red).astype(np.float32)
  k = _reduce_kernel(n, red, Ops.ADD, f32, valid_below=valid_below)
  res = run(k, np.zeros(n, np.float32), x, global_size=(n, 1, 1), folds=1)[0]
  rows = np.concatenate([np.zeros((n, 1), np.float32), x.reshape(n, red)[:, :valid_below]], axis=1)
  np.testing.assert_array_equal(res, np.add.accumulate(rows, axis=1, dtype=np.float32)[:, -1])

def test_fold_inside_if_only_updates_active_threads():
  n, red = 6, 5
  out, a = UOp.param(0, i32.ptr(n)), UOp.param(1, i32.ptr(red))
  acc, g = acc_reg(i32), gidx(n)
  init = acc.index(c(0)).store(g * c(1000))
  cond = g < c(4)
  iff = UOp(Ops.IF, dtypes.void, (cond,))
  r = rng(red, 0, AxisType.REDUCE)
  upd = acc.index(c(0)).store(acc.index(c(0)).load() + a.index(r + g).load())
  loop = end(upd, r)
  k = linear(out, a, acc, g, init, cond, iff, r, upd, loop, UOp(Ops.ENDIF, dtypes.void, (iff,)),
             out.index(g).store(acc.after(loop).index(c(0)).load()))
  # a has red + 3 elements: threads 0..3 read a[g : g + red] in bounds; threads 4 and 5 would not, but they are masked off
  big = np.arange(red + 3, dtype=np.int32)
  res = run(k, np.zeros(n, np.int32), big, global_size=(n, 1, 1), folds=1)[0]
  np.testing.assert_array_equal(res, [g * 1000 + (big[g:g + red].sum() if g < 4 else 0) for g in range(n)])
  # with one element less, active thread 3 reads past the end: that is still reported
  with pytest.raises(IndexError, match="element 7 of a buffer of 7"): run(k, np.zeros(n, np.int32), big[:-1], global_size=(n, 1, 1))

def test_loops_that_are_not_folds_are_recognised():
  # a loop that writes a kernel buffer, and one that reads the accumulator twice, must run iteration by iteration
  out = UOp.param(0, i32.ptr(12))
  ri, rj = rng(3, 0), rng(4, 1)
  st = out.index(ri * c(4) + rj).store(ri * rj)
  k = linear(out, ri, rj, st, end(st, rj), end(end(st, rj), ri))
  assert len(PythonProgram("k", serialize_uops("k", k).encode()).folds) == 0
  acc, o2 = acc_reg(i32), UOp.param(0, i32.ptr(1))
  r = rng(5, 0)
  ld = acc.index(c(0)).load()
  upd = acc.index(c(0)).store(ld * ld + c(1))
  loop = end(upd, r)
  k2 = linear(o2, acc, acc.index(c(0)).store(c(1)), r, upd, loop, o2.index(c(0)).store(acc.after(loop).index(c(0)).load()))
  res = run(k2, np.zeros(1, np.int32), folds=0)[0]
  v = 1
  for _ in range(5): v = v * v + 1
  assert res[0] == v

# *** the pieces ***

def test_render_roundtrip_keeps_ops_dtypes_and_args():
  a = UOp.param(0, dtypes.float16.ptr(3))
  x = UOp.const(f32, float("nan"))
  uops = [a, x, UOp.const(f32, -0.0), UOp.const(dtypes.uint64, 2**64 - 1), UOp(Ops.DEFINE_REG, f32.vec(4).ptr(2, AddrSpace.REG), arg=1)]
  name, rows = deserialize_uops(PythonRenderer().render("k", uops))
  assert name == "k"
  assert [r[1] for r in rows] == [u.dtype for u in uops]
  assert math.isnan(rows[1][3]) and math.copysign(1, rows[2][3]) == -1 and rows[3][3] == 2**64 - 1
  assert rows[4][1].addrspace is AddrSpace.REG and rows[4][1].size == 2

def test_render_rejects_unlinearized_uops():
  a = UOp.param(0, f32.ptr(1))
  with pytest.raises(ValueError, match="before it is defined"): serialize_uops("k", [a.index(c(0)).load()])

def test_program_refuses_ops_it_cannot_run():
  bad = serialize_uops("k", [UOp(Ops.CONTRACT, f32, (), None)]).encode()
  with pytest.raises(NotImplementedError, match="CONTRACT"): PythonProgram("k", bad)

def test_renderer_capabilities():
  r = PythonRenderer()
  # workgroups and shared memory: its threads run in lockstep, so a BARRIER holds without doing anything
  assert r.has_local and r.has_shared and r.local_max == (1024, 1024, 64) and r.shared_max == 64 * 1024
  assert r.global_max == (2**31 - 1,) * 3
  assert dtypes.bfloat16 not in r.supported_dtypes and not any(d in r.supported_dtypes for d in dtypes.fp8s)
  assert all(d in r.supported_dtypes for d in dtypes.ints + (dtypes.bool, dtypes.float16, dtypes.float32, dtypes.float64))
  assert PythonCompiler().compile("abc") == b"abc" and PythonCompiler().cachekey is None

def test_allocator_copies_views_and_host_access():
  al = PythonAllocator("PYTHON")
  buf = al.alloc(16)
  al._copyin(buf, memoryview(np.arange(4, dtype=np.int32)).cast("B"))
  view = al._offset(buf, 8, 4)
  out = np.zeros(2, np.int32)
  al._copyout(memoryview(out).cast("B"), view)
  np.testing.assert_array_equal(out, [1, 2])
  al._as_buffer(view)[:4] = bytes([9, 0, 0, 0])  # writes through the view into the base
  np.testing.assert_array_equal(np.frombuffer(al._as_buffer(buf), np.int32), [0, 9, 2, 3])

def test_wait_returns_seconds():
  o = UOp.param(0, i32.ptr(1))
  prg = PythonProgram("k", PythonCompiler().compile(serialize_uops("k", linear(o.index(c(0)).store(c(5))))))
  buf = np.zeros(4, np.uint8)
  t = prg(buf, wait=True)
  assert isinstance(t, float) and t >= 0 and buf.view(np.int32)[0] == 5
  assert prg(buf) is None

# *** ALU semantics against core.ir.alu.exec_alu ***

def _samples(d: DType, rs: random.Random, k: int) -> list:
  if d is dtypes.bool: return [rs.random() < 0.5 for _ in range(k)]
  if dtypes.is_int(d):
    lo, hi = int(d.min), int(d.max)
    edges = [lo, hi, 0, 1, -1 if lo < 0 else 2, lo + 1, hi - 1, 7]
    return [edges[i] if i < len(edges) else (rs.randint(max(lo, -40), 40) if rs.random() < 0.3 else rs.randint(lo, hi)) for i in range(k)]
  edges = [0.0, -0.0, 1.0, -1.0, math.inf, -math.inf, math.nan, 0.5, 3.0, -2.0]
  raw = [edges[i] if i < len(edges) else rs.choice([rs.uniform(-10, 10), rs.uniform(-1e6, 1e6), float(rs.randint(-5, 5))]) for i in range(k)]
  with np.errstate(over="ignore"): return np.array(raw, to_np(d)).tolist()  # values representable in d (1e6 is inf in half)

def _same(a, b, d: DType, loose: bool) -> bool:
  if isinstance(a, float) and isinstance(b, float):
    if math.isnan(a) or math.isnan(b): return math.isnan(a) and math.isnan(b)
    if loose: return a == b or math.isclose(a, b, rel_tol=4 * float(np.finfo(to_np(d)).eps), abs_tol=1e-300)
    return a == b and math.copysign(1, a) == math.copysign(1, b)
  return a == b and type(a) is type(b)

def _c_differs_from_exec_alu(op: Ops, args: tuple, have, want) -> bool:
  """Two places where exec_alu departs from C and the device follows C (checked in test_c_semantics_where_exec_alu_differs):
  trunc keeps the sign of zero, and pow of a negative base to an odd integer overflows to -inf."""
  if op is Ops.TRUNC: return have == want == 0.0
  if op is Ops.POW: return have == -math.inf and want == math.inf and args[0] < 0 and float(args[1]).is_integer() and args[1] % 2 == 1
  return False

def _int_pow_results(a: int, b: int, d: DType) -> set[int]:
  """What C's pow gives for integers a, b of dtype `d`: pow((double)a, (double)b) cast back to `d`. glibc's pow and numpy's
  are within an ulp but not always correctly rounded (numpy's SIMD pow on AVX-512 hosts gives 31.0**20 one ulp low, which
  changes the wrapped uint64 in its top bits), so the double is one of the three nearest the exact power, found here with
  Python integers: no host's libm in the expected value."""
  x, n = float(a), int(float(b))   # the operands as C converts them (2**64 - 1 becomes 2**64)
  sign = -1.0 if x < 0 and n % 2 else 1.0
  if x == 0 and n < 0: exact = math.inf                                   # C's pole (truncates to 0 below)
  elif abs(x) > 1 and abs(n) * math.log2(abs(x)) > 1100: exact = math.copysign(0.0 if n < 0 else math.inf, sign)   # past double's range
  else:
    try: exact = float(Fraction(x) ** n)                                  # rounded once, to nearest
    except OverflowError: exact = math.copysign(math.inf, sign)
  near = {exact} if math.isinf(exact) else {math.nextafter(exact, -math.inf), exact, math.nextafter(exact, math.inf)}
  return {int(truncate(d, v)) for v in near}

ALU_DTYPES = dtypes.ints + (dtypes.bool, dtypes.float16, dtypes.float32, dtypes.float64)

@pytest.mark.parametrize("op", sorted(GroupOp.ALU, key=lambda o: o.value), ids=lambda o: o.name)
@pytest.mark.parametrize("d", ALU_DTYPES, ids=lambda d: d.name)
def test_alu_matches_exec_alu(op: Ops, d: DType):
  rs = random.Random(f"{op.name}{d.name}")
  k = 200
  nsrc = 1 if op in GroupOp.Unary else 3 if op in GroupOp.Ternary else 2
  operands = [_samples(d, rs, k) for _ in range(nsrc)]
  for i in range(nsrc - 1): rs.shuffle(operands[i + 1])
  if op is Ops.WHERE: operands[0] = _samples(dtypes.bool, rs, k)
  if op is Ops.FDIV and dtypes.is_int(d) and d.itemsize == 8:
    # C divides (double)a/(double)b; exec_alu divides the exact integers. They agree while the operands fit a double.
    operands = [[v % 2**53 for v in o] for o in operands]
  if op is Ops.POW and dtypes.is_float(d):
    # C's pow(0, negative) is inf (a pole); exec_alu answers NaN (math.pow raises). The device follows C; checked below.
    operands[0] = [1.0 if a == 0 and b < 0 else a for a, b in zip(*operands)]
  int_only = (Ops.IDIV, Ops.MOD, Ops.SHL, Ops.SHR, Ops.XOR, Ops.OR, Ops.AND)
  undefined = (Ops.IDIV, Ops.MOD) if d is dtypes.bool else int_only if dtypes.is_float(d) else ()
  if op in undefined:  # the specification refuses these, and so does the device, when the kernel is loaded
    with pytest.raises(TypeError): exec_alu(op, d, tuple(o[0] for o in operands))
    with pytest.raises(TypeError): alu_fn(op, d)
    return
  out_dtype = dtypes.bool if op in GroupOp.Comparison else d
  got = alu(op, out_dtype, [np.array(o, to_np(dtypes.bool if op is Ops.WHERE and i == 0 else d)) for i, o in enumerate(operands)])
  assert got.dtype == to_np(out_dtype), (op, d, got.dtype)
  loose = op in (Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.POW) and dtypes.is_float(d)
  bad = []
  for j in range(k):
    args = tuple(o[j] for o in operands)
    want, have = exec_alu(op, out_dtype, args), got[j].item()
    if op is Ops.POW and dtypes.is_int(d):
      assert want in (near := _int_pow_results(*args, d)), (args, want, near)
      if have not in near: bad.append((args, have, near))
    elif not _same(have, want, out_dtype, loose) and not _c_differs_from_exec_alu(op, args, have, want): bad.append((args, have, want))
  assert not bad, f"{op.name} {d.name}: {len(bad)} mismatches, first {bad[:3]}"

def test_pow_of_zero_to_negative_is_c_infinity():
  res = alu(Ops.POW, f32, [np.array([0.0, -0.0, 0.0], np.float32), np.array([-1.0, -1.0, -2.0], np.float32)])
  np.testing.assert_array_equal(res, [np.inf, -np.inf, np.inf])

def test_c_semantics_where_exec_alu_differs():
  np.testing.assert_array_equal(np.signbit(alu(Ops.TRUNC, f32, [np.array([-0.5, -0.0, 0.5], np.float32)])), [True, True, False])
  assert alu(Ops.POW, dtypes.float64, [np.array([-2.0]), np.array([1025.0])])[0] == -math.inf

# *** through the real codegen and engine ***

def _host(x: np.ndarray) -> UOp:
  from core.engine.realize import from_host
  from core.ir.dtype import from_np
  return from_host(memoryview(np.ascontiguousarray(x)).cast("B"), from_np(x.dtype), "PYTHON", x.shape)

def _np(u: UOp, dtype: np.dtype) -> np.ndarray:
  from core.engine.realize import to_host
  return np.frombuffer(to_host(u), dtype).reshape(u.shape)

def test_device_registry_builds_the_python_device():
  from core.device.registry import Device
  dev = Device["PYTHON"]
  assert isinstance(dev.renderer, PythonRenderer) and isinstance(dev.allocator, PythonAllocator)

def test_engine_elementwise_reduce_and_permute():
  x = np.random.default_rng(5).standard_normal((37, 53)).astype(np.float32)
  a = _host(x)
  np.testing.assert_allclose(_np((a * a + a).r(Ops.ADD, (1,)), np.float32), (x * x + x).sum(1, keepdims=True), rtol=1e-5)
  np.testing.assert_array_equal(_np(a.r(Ops.MAX, (0, 1)), np.float32), x.max(keepdims=True))
  np.testing.assert_array_equal(_np(a.permute((1, 0)).contiguous(), np.float32), x.T)

def test_engine_int_division_and_casts():
  x = np.array([-7, 7, -8, 9, -1, 0], np.int32)
  a = _host(x)
  np.testing.assert_array_equal(_np(a // a.const_like(2), np.int32), [-3, 3, -4, 4, 0, 0])
  np.testing.assert_array_equal(_np(a % a.const_like(-3), np.int32), [-1, 1, -2, 0, -1, 0])
  f = _host(np.array([-1.5, 2.7, 255.9, -0.2], np.float32))
  np.testing.assert_array_equal(_np(f.cast(dtypes.int32), np.int32), [-1, 2, 255, 0])
