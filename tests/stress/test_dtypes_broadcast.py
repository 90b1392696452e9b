"""Stress: broadcasting corner cases, dtype promotion of every int/float pair, integer division/modulo, shifts, bitwise ops."""
from __future__ import annotations
import itertools
import numpy as np
import pytest
from core import Tensor, dtypes
from core.ir.dtype import least_upper_dtype, to_np

INTS = [dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64]
FLOATS = [dtypes.float16, dtypes.float32, dtypes.float64]
ALL = [dtypes.bool] + INTS + FLOATS

def _vals(dt, seed):
  rng = np.random.default_rng(seed)
  if dt is dtypes.bool: return rng.integers(0, 2, 6).astype(bool)
  if dtypes.is_float(dt): return rng.uniform(-4, 4, 6).astype(to_np(dt))
  info = np.iinfo(to_np(dt))
  return rng.integers(max(info.min, -100), min(info.max, 100), 6, endpoint=True).astype(to_np(dt))

@pytest.mark.parametrize("d1,d2", list(itertools.product(ALL, ALL)), ids=lambda d: d.name)
def test_promotion_add_mul(d1, d2):
  a, b = _vals(d1, 1), _vals(d2, 2)
  want = least_upper_dtype(d1, d2)
  ta, tb = Tensor(a, dtype=d1), Tensor(b, dtype=d2)
  s, m = ta + tb, ta * tb
  assert s.dtype is want and m.dtype is want
  nd = to_np(want)
  with np.errstate(over="ignore"):
    if want is dtypes.bool:
      ws, wm = a.astype(bool) | b.astype(bool), a.astype(bool) & b.astype(bool)
    else: ws, wm = a.astype(nd) + b.astype(nd), a.astype(nd) * b.astype(nd)
  tol = 1e-2 if want is dtypes.float16 else 1e-6
  np.testing.assert_allclose(s.numpy().astype(np.float64), ws.astype(np.float64), rtol=tol)
  np.testing.assert_allclose(m.numpy().astype(np.float64), wm.astype(np.float64), rtol=tol)

def test_broadcast_size_zero():
  a = Tensor.ones(0, 3)
  b = Tensor(np.arange(3, dtype=np.float32))
  assert (a + b).shape == (0, 3)
  assert (a + b).sum(0).shape == (3,)
  np.testing.assert_equal((a + b).sum(0).numpy(), np.zeros(3, np.float32))
  assert (a * Tensor.ones(1, 1)).shape == (0, 3)
  np.testing.assert_equal(Tensor.ones(0, 3).max(1).numpy().shape, (0,))

def test_broadcast_scalar_vs_one():
  s = Tensor(3.0)
  o = Tensor([2.0])
  assert (s + o).shape == (1,)
  assert (s * s).shape == ()
  np.testing.assert_equal((s + o).numpy(), [5.0])
  np.testing.assert_equal((Tensor.ones(2, 1, 3) * o).numpy(), np.full((2, 1, 3), 2.0, np.float32))

def test_expand_then_reduce():
  a = np.arange(3, dtype=np.float32).reshape(3, 1)
  t = Tensor(a).expand(3, 1000)
  np.testing.assert_equal(t.sum(1).numpy(), a.reshape(3) * 1000)
  np.testing.assert_equal(t.sum(0).numpy(), np.full(1000, 3, np.float32))
  np.testing.assert_equal(Tensor(a).expand(3, 4).T.reshape(12).numpy(), np.broadcast_to(a, (3, 4)).T.reshape(12))

def test_where_three_shapes():
  rng = np.random.default_rng(0)
  c = rng.integers(0, 2, (4, 1, 1)).astype(bool)
  x = rng.standard_normal((1, 5, 1)).astype(np.float32)
  y = rng.integers(-3, 3, (1, 1, 6)).astype(np.int32)
  got = Tensor(c).where(Tensor(x), Tensor(y))
  assert got.shape == (4, 5, 6) and got.dtype is dtypes.float32
  np.testing.assert_allclose(got.numpy(), np.where(c, x, y))

def test_where_scalars_mixed():
  c = np.array([True, False, True])
  np.testing.assert_equal(Tensor(c).where(1, 2.5).numpy(), np.where(c, 1, 2.5))
  np.testing.assert_equal(Tensor(c).where(Tensor([7, 8, 9]), -1).numpy(), np.where(c, [7, 8, 9], -1))

@pytest.mark.parametrize("dt", [dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64])
def test_floordiv_mod_negative(dt):
  a = np.array([7, -7, 7, -7, 0, 1, -1, 9, -9, 5], to_np(dt))
  b = np.array([2, 2, -2, -2, 3, -3, 3, -4, 4, 5], to_np(dt))
  np.testing.assert_equal((Tensor(a) // Tensor(b)).numpy(), a // b)
  np.testing.assert_equal((Tensor(a) % Tensor(b)).numpy(), a % b)
  np.testing.assert_equal((Tensor(a) // 3).numpy(), a // 3)
  np.testing.assert_equal((Tensor(a) % -3).numpy(), a % -3)
  np.testing.assert_equal(Tensor(a).div(Tensor(b), rounding_mode="trunc").numpy(), np.trunc(a / b).astype(a.dtype))

def test_rfloordiv_rmod():
  b = np.array([2, -2, 3, -3], np.int32)
  np.testing.assert_equal((7 // Tensor(b)).numpy(), 7 // b)
  np.testing.assert_equal((-7 % Tensor(b)).numpy(), -7 % b)

def test_float_floordiv_mod():
  a = np.array([7.5, -7.5, 7.5, -7.5, -0.5], np.float32)
  b = np.array([2, 2, -2, -2, 1], np.float32)
  np.testing.assert_equal((Tensor(a) // Tensor(b)).numpy(), a // b)
  np.testing.assert_allclose((Tensor(a) % Tensor(b)).numpy(), a % b)

@pytest.mark.parametrize("dt", [dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64])
def test_unsigned_bitwise_and_shifts(dt):
  nd = to_np(dt).type
  info = np.iinfo(nd)
  a = np.array([0, 1, info.max, info.max // 2, 0xA5 & info.max, 3], nd)
  b = np.array([info.max, 3, 1, 0x0F, 0x5A & info.max, 0], nd)
  np.testing.assert_equal((Tensor(a) & Tensor(b)).numpy(), a & b)
  np.testing.assert_equal((Tensor(a) | Tensor(b)).numpy(), a | b)
  np.testing.assert_equal((Tensor(a) ^ Tensor(b)).numpy(), a ^ b)
  np.testing.assert_equal((~Tensor(a)).numpy(), ~a)
  np.testing.assert_equal((Tensor(a) << 3).numpy(), (a << nd(3)).astype(nd))
  np.testing.assert_equal((Tensor(a) >> 2).numpy(), a >> nd(2))
  np.testing.assert_equal((Tensor(a) // Tensor(np.maximum(b, 1))).numpy(), a // np.maximum(b, 1))

def test_signed_shifts():
  a = np.array([-8, -1, 5, 1 << 20, -(1 << 20)], np.int32)
  np.testing.assert_equal((Tensor(a) >> 2).numpy(), a >> 2)
  np.testing.assert_equal((Tensor(a) << 3).numpy(), a << 3)

def test_int_overflow_wraps_elementwise():
  a = np.array([2**31 - 1, -2**31], np.int32)
  np.testing.assert_equal((Tensor(a) + 1).numpy(), np.array([-2**31, -2**31 + 1], np.int32))
  u = np.array([250, 5], np.uint8)
  np.testing.assert_equal((Tensor(u) + 10).numpy(), (u + np.uint8(10)))
  np.testing.assert_equal((Tensor(u) * 3).numpy(), (u * np.uint8(3)))

def test_casts_float_to_int_truncate_and_to_uint8():
  a = np.array([-2.7, -0.5, 0.5, 2.7, 100.9], np.float32)
  np.testing.assert_equal(Tensor(a).cast(dtypes.int32).numpy(), a.astype(np.int32))
  np.testing.assert_equal(Tensor(np.array([1.5, 254.9], np.float32)).cast(dtypes.uint8).numpy(), [1, 254])
  np.testing.assert_equal(Tensor(np.array([-1, 300], np.int32)).cast(dtypes.uint8).numpy(), np.array([-1, 300]).astype(np.uint8))

def test_int_true_div_gives_float():
  a = np.array([7, -7, 1], np.int32)
  r = Tensor(a) / 2
  assert dtypes.is_float(r.dtype)
  np.testing.assert_allclose(r.numpy(), a / 2)

def test_bool_arith():
  a = np.array([True, False, True])
  b = np.array([True, True, False])
  np.testing.assert_equal((Tensor(a) + Tensor(b)).numpy(), a | b)
  np.testing.assert_equal((Tensor(a) + 1).numpy(), a.astype(np.int32) + 1)
  np.testing.assert_equal(Tensor(a).sum().item(), 2)
