"""Stress: reductions over several axes, keepdim, permuted inputs, inf/nan, argmax ties, int accumulation, cumsum."""
from __future__ import annotations
import numpy as np
import pytest
from core import Tensor, dtypes

def _arr(shape, seed=0): return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)

def _same_as_numpy(a: np.ndarray, *reductions: tuple[str, int | None]) -> None:
  """Each reduction (the method, the same name in Tensor and numpy, and its axis) of Tensor(a) equals numpy's exactly."""
  t = Tensor(a)
  for op, axis in reductions: np.testing.assert_equal(getattr(t, op)(axis).numpy(), getattr(a, op)(axis), err_msg=f"{op}({axis})")

@pytest.mark.parametrize("axis", [(0, 2), (1,), (0, 1, 3), (3, 0), None])
@pytest.mark.parametrize("keepdim", [False, True])
def test_sum_max_multi_axis_permuted(axis, keepdim):
  a = _arr((3, 4, 5, 6))
  t = Tensor(a).permute(2, 0, 3, 1)
  n = a.transpose(2, 0, 3, 1)
  np.testing.assert_allclose(t.sum(axis, keepdim=keepdim).numpy(), n.sum(axis, keepdims=keepdim), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(t.max(axis, keepdim=keepdim).numpy(), n.max(axis, keepdims=keepdim))
  np.testing.assert_allclose(t.min(axis, keepdim=keepdim).numpy(), n.min(axis, keepdims=keepdim))
  np.testing.assert_allclose(t.mean(axis, keepdim=keepdim).numpy(), n.mean(axis, keepdims=keepdim), rtol=1e-5, atol=1e-6)

def test_max_min_inf_negative():
  a = np.array([[-np.inf, -5, -1e30], [np.inf, -np.inf, 3], [-7, -8, -9]], np.float32)
  _same_as_numpy(a, ("max", 1), ("min", 1), ("max", 0), ("min", None))

def test_max_all_neg_inf():
  _same_as_numpy(np.full((3, 4), -np.inf, np.float32), ("max", 1))

def test_max_with_nan_propagates():
  _same_as_numpy(np.array([[1, np.nan, 3], [4, 5, 6]], np.float32), ("max", 1))  # numpy and torch propagate NaN

def test_min_with_nan_propagates():
  _same_as_numpy(np.array([[1, np.nan, 3], [4, 5, 6]], np.float32), ("min", 1))

def test_int_max_min_extremes():
  _same_as_numpy(np.array([[-2**31, 5, 2**31 - 1], [-1, -2**31, 0]], np.int32), ("max", 1), ("min", 1))
  _same_as_numpy(np.array([[0, 255, 7], [1, 2, 3]], np.uint8), ("max", 1), ("min", 1))

def test_argmax_argmin_ties_first():
  _same_as_numpy(np.array([[1, 3, 3, 0], [2, 2, 2, 2], [-1, -5, -5, -1]], np.float32), ("argmax", 1), ("argmin", 1), ("argmax", 0),
                 ("argmax", None))

def test_argmax_int_and_permuted():
  a = np.random.default_rng(3).integers(-3, 3, (5, 7)).astype(np.int32)
  np.testing.assert_equal(Tensor(a).T.argmax(1).numpy(), a.T.argmax(1))
  np.testing.assert_equal(Tensor(a).T.argmin(0).numpy(), a.T.argmin(0))

def test_sum_int8_uint8_accumulates_wide():
  a = np.full((300,), 100, np.int8)
  s = Tensor(a).sum()
  assert s.dtype in (dtypes.int32, dtypes.int64)
  assert s.item() == 30000
  u = np.full((1000,), 255, np.uint8)
  su = Tensor(u).sum()
  assert su.dtype in (dtypes.uint32, dtypes.uint64)
  assert su.item() == 255000
  b = Tensor(np.ones(500, bool)).sum()
  assert b.item() == 500

def test_mean_of_ints():
  a = np.array([[1, 2], [3, 6]], np.int32)
  m = Tensor(a).mean(1)
  assert dtypes.is_float(m.dtype)
  np.testing.assert_allclose(m.numpy(), [1.5, 4.5])
  np.testing.assert_allclose(Tensor(np.array([255, 255], np.uint8)).mean().numpy(), 255.0)

def test_prod_int_overflow_wraps():
  a = np.array([2**16, 2**16, 3], np.int32)
  got = Tensor(a).prod().item()
  want = int(np.prod(a.astype(np.int64)))  # 3 * 2^32 wraps to 0 in int32
  want32 = ((want + 2**31) % 2**32) - 2**31
  assert got == want32
  b = np.array([12345, 6789, 101], np.int32)
  want = int(np.prod(b.astype(np.int64)))
  assert Tensor(b).prod().item() == ((want + 2**31) % 2**32) - 2**31

def test_prod_negative_and_zero():
  a = np.array([[-2, 3, -4], [5, 0, -1]], np.float32)
  np.testing.assert_equal(Tensor(a).prod(1).numpy(), a.prod(1))

@pytest.mark.parametrize("n", [1, 63, 64, 65, 200, 1000, 4097])
def test_cumsum_long(n):
  a = np.random.default_rng(n).integers(-5, 5, n).astype(np.int32)
  np.testing.assert_equal(Tensor(a).cumsum().numpy(), np.cumsum(a))

def test_cumsum_float_2d_axes():
  a = _arr((70, 3))
  np.testing.assert_allclose(Tensor(a).cumsum(0).numpy(), np.cumsum(a, 0), rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(Tensor(a).cumsum(1).numpy(), np.cumsum(a, 1), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(Tensor(a)[::-1].cumsum(0).numpy(), np.cumsum(a[::-1], 0), rtol=1e-4, atol=1e-4)

def test_cumprod_cummax():
  a = np.array([3, -1, 2, 5, -4, 1, 0.5], np.float32)
  np.testing.assert_allclose(Tensor(a).cumprod().numpy(), np.cumprod(a))
  np.testing.assert_equal(Tensor(a).cummax()[0].numpy(), np.maximum.accumulate(a))
  b = np.random.default_rng(1).integers(-100, 100, 150).astype(np.int32)
  np.testing.assert_equal(Tensor(b).cummax()[0].numpy(), np.maximum.accumulate(b))

def test_long_float_sum_precision():
  n = (1 << 14) * 3 + 7
  a = np.ones(n, np.float32)
  assert Tensor(a).sum().item() == n
  a2 = np.ones((2, 20000), np.float32)
  np.testing.assert_equal(Tensor(a2).sum(1).numpy(), [20000, 20000])

def test_reduce_then_expand_then_reduce():
  a = _arr((4, 6))
  t = Tensor(a)
  r = (t - t.mean(1, keepdim=True)).square().sum(1) / t.max(1)
  n = ((a - a.mean(1, keepdims=True)) ** 2).sum(1) / a.max(1)
  np.testing.assert_allclose(r.numpy(), n, rtol=1e-5, atol=1e-5)

def test_var_std_softmax_logsumexp():
  a = _arr((5, 7))
  t = Tensor(a)
  np.testing.assert_allclose(t.var(1).numpy(), a.var(1, ddof=1), rtol=1e-5)
  np.testing.assert_allclose(t.std(0, correction=0).numpy(), a.std(0), rtol=1e-5)
  e = np.exp(a - a.max(1, keepdims=True))
  np.testing.assert_allclose(t.softmax(1).numpy(), e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(t.logsumexp(1).numpy(), np.log(np.exp(a).sum(1)), rtol=1e-5)

def test_any_all():
  a = np.array([[0, 0, 1], [0, 0, 0], [2, 3, 4]], np.int32)
  np.testing.assert_equal(Tensor(a).any(1).numpy(), a.any(1))
  np.testing.assert_equal(Tensor(a).all(1).numpy(), a.all(1))
  np.testing.assert_equal(Tensor(a).all().numpy(), a.all())

def test_argmax_argmin_with_nan_pick_nan():
  a = np.array([[1, np.nan, 3], [np.nan, 5, np.nan], [2, 1, 0]], np.float32)
  np.testing.assert_equal(Tensor(a).argmax(1).numpy(), a.argmax(1))  # numpy/torch: NaN is the maximum
  np.testing.assert_equal(Tensor(a).argmin(1).numpy(), a.argmin(1))
