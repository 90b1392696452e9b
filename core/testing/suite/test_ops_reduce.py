"""Reductions, running sums, matmul/einsum and softmax against numpy, forward and backward; includes a > 2^24 element sum."""
from __future__ import annotations
import numpy as np
import pytest
from core.tensor.tensor import Tensor
from core.ir.dtype import dtypes, to_np
from core.testing.helpers import check_op, rng, scale_factor
from core.testing.capabilities import dtype_params, skip_unless

AXES = [None, 0, 1, -1, (0, 2), (0, 1, 2)]
SHAPE = (3, 4, 5)

@pytest.mark.parametrize("axis", AXES, ids=str)
@pytest.mark.parametrize("keepdim", [False, True])
def test_sum_mean_max_min(axis, keepdim):
  check_op([SHAPE], lambda t: t.sum(axis, keepdim), lambda x: x.sum(axis, keepdims=keepdim))
  check_op([SHAPE], lambda t: t.mean(axis, keepdim), lambda x: x.mean(axis, keepdims=keepdim))
  check_op([SHAPE], lambda t: t.max(axis, keepdim), lambda x: x.max(axis, keepdims=keepdim))
  check_op([SHAPE], lambda t: t.min(axis, keepdim), lambda x: x.min(axis, keepdims=keepdim))

@pytest.mark.parametrize("axis", AXES, ids=str)
def test_prod_var_std(axis):
  check_op([SHAPE], lambda t: t.prod(axis), lambda x: x.prod(axis), low=0.5, high=1.5)
  check_op([SHAPE], lambda t: t.var(axis), lambda x: x.var(axis, ddof=1))
  check_op([SHAPE], lambda t: t.std(axis, correction=0), lambda x: x.std(axis))
  check_op([SHAPE], lambda t: t.logsumexp(axis), lambda x: np.log(np.exp(x).sum(axis)))

def test_logsumexp_of_rows_with_nan_and_inf_matches_numpy():
  # its max is the one that need not propagate NaN (MAX_NO_NAN): a NaN makes the row's sum of exps NaN whatever the max is,
  # an inf (or a row of -inf) is shifted by 0; along either axis, and past the length a reduce is split at (40000)
  inf, nan = np.inf, np.nan
  rows = np.array([[1, nan, 2, 0], [nan] * 4, [-inf] * 4, [inf, 1, 2, 0], [inf, nan, 0, 1], [-inf, 0, 1, 2], [inf, -inf, 0, 1],
                   [inf, inf, 1, 0], [-inf, nan, -inf, -inf], [3, 1, 2, 0]], np.float32)
  long = rng(0).standard_normal((4, 40000)).astype(np.float32)
  long[0, 39997], long[1, 20000], long[2, 7], long[3] = nan, inf, -inf, -inf
  for x in (rows, long):
    with np.errstate(all="ignore"): want = np.log(np.exp(x.astype(np.float64)).sum(1)).astype(np.float32)
    np.testing.assert_allclose(Tensor(x).logsumexp(1).numpy(), want, rtol=1e-5)
    np.testing.assert_allclose(Tensor(np.ascontiguousarray(x.T)).logsumexp(0).numpy(), want, rtol=1e-5)
    assert np.isnan(Tensor(x).logsumexp().item())
  np.testing.assert_allclose(Tensor(rows[[3, 5, 9]]).logsumexp().item(), np.log(np.exp(rows[[3, 5, 9]].astype(np.float64)).sum()))

def test_reduce_edge_shapes():
  check_op([(0, 3)], lambda t: t.sum(0), lambda x: x.sum(0))
  check_op([(0, 3)], lambda t: t.prod(0), lambda x: x.prod(0))
  check_op([(0, 3)], lambda t: t.sum(1), lambda x: x.sum(1))
  check_op([(1,)], lambda t: t.sum(), lambda x: x.sum())
  check_op([()], lambda t: t.sum(), lambda x: x.sum())
  check_op([(4, 6)], lambda t: t.sum(0), lambda x: x.sum(0), permute_inputs=True)
  check_op([(4, 6)], lambda t: t[1:, ::2].max(1), lambda x: x[1:, ::2].max(1))
  assert np.isnan(Tensor.ones(0).mean().item())
  assert Tensor.ones(0).max().item() == -np.inf

def test_max_ties_split_gradient():
  t = Tensor([1.0, 3.0, 3.0, 2.0], requires_grad=True)
  t.max().backward()
  np.testing.assert_allclose(t.grad.numpy(), [0, 0.5, 0.5, 0])

@pytest.mark.parametrize("dt", dtype_params([dtypes.int8, dtypes.uint8, dtypes.int32, dtypes.int64, dtypes.bool, dtypes.float16]))
def test_reduce_dtypes(dt):
  r = rng(1)
  x = r.integers(0, 2 if dt is dtypes.bool else 100, size=(4, 30)).astype(to_np(dt))
  t = Tensor(x)
  assert t.sum().dtype is ({dtypes.int8: dtypes.int32, dtypes.uint8: dtypes.uint32, dtypes.int32: dtypes.int32, dtypes.int64: dtypes.int64,
                            dtypes.bool: dtypes.int32, dtypes.float16: dtypes.float16}[dt])
  np.testing.assert_allclose(t.sum(1).numpy(), x.astype(np.float64).sum(1), rtol=1e-3)
  np.testing.assert_equal(t.max(1).numpy(), x.max(1))
  np.testing.assert_equal(t.min(0).numpy(), x.min(0))
  np.testing.assert_equal(t.any(1).numpy(), x.any(1))
  np.testing.assert_equal(t.all(0).numpy(), x.all(0))
  if dt is not dtypes.bool: np.testing.assert_equal(t.argmax(1).numpy(), x.argmax(1))

def test_int_min_max_extremes():
  skip_unless(dtypes.int8)
  x = np.array([-128, 127, 0, -1], dtype=np.int8)
  assert Tensor(x).min().item() == -128 and Tensor(x).max().item() == 127
  assert Tensor(x).argmin().item() == 0

def test_argmax_argmin():
  x = rng(2).integers(0, 5, size=(4, 6)).astype(np.float32)  # ties: the first index wins
  for axis in (None, 0, 1):
    np.testing.assert_equal(Tensor(x).argmax(axis).numpy(), x.argmax(axis))
    np.testing.assert_equal(Tensor(x).argmin(axis).numpy(), x.argmin(axis))
  assert Tensor(x).argmax(1, keepdim=True).shape == (4, 1)
  assert Tensor(x).argmax().dtype is dtypes.int32

@pytest.mark.parametrize("n", [1, 5, 64, 65, 300])
def test_cumsum_cumprod(n):
  check_op([(2, n)], lambda t: t.cumsum(1), lambda x: x.cumsum(1))
  check_op([(n, 3)], lambda t: t.cumsum(0), lambda x: x.cumsum(0))
  if n <= 65: check_op([(n,)], lambda t: t.cumprod(0), lambda x: x.cumprod(0), low=0.8, high=1.2)
  x = rng(3).integers(-5, 5, size=(n,)).astype(np.int32)
  np.testing.assert_equal(Tensor(x).cumsum().numpy(), x.cumsum())

def test_cumsum_zero_size():
  assert Tensor.ones(0, 3).cumsum(0).shape == (0, 3)

@pytest.mark.parametrize("shapes", [((3, 4), (4, 5)), ((4,), (4, 2)), ((3, 4), (4,)), ((4,), (4,)), ((2, 3, 4), (4, 5)),
                                    ((2, 1, 3, 4), (5, 4, 2)), ((1, 1), (1, 1)), ((0, 4), (4, 3)), ((3, 0), (0, 2))], ids=str)
def test_matmul(shapes):
  check_op(shapes, lambda a, b: a @ b, lambda a, b: a @ b)

def test_matmul_non_contiguous_and_dtypes():
  check_op([(5, 4), (4, 3)], lambda a, b: a.dot(b), lambda a, b: a @ b, permute_inputs=True)
  skip_unless(dtypes.int8)
  a, b = rng(4).integers(-3, 3, (3, 4)).astype(np.int8), rng(5).integers(-3, 3, (4, 2)).astype(np.int8)
  np.testing.assert_equal((Tensor(a) @ Tensor(b)).numpy(), a @ b)
  assert (Tensor(a) @ Tensor(b)).dtype is dtypes.int8
  with pytest.raises(RuntimeError, match="matmul"): Tensor.ones(2, 3) @ Tensor.ones(4, 2)
  with pytest.raises(RuntimeError, match="matmul"): Tensor(3.0) @ Tensor.ones(3, 3)

@pytest.mark.parametrize("formula,shapes", [("ij,jk->ik", [(2, 3), (3, 4)]), ("ij->ji", [(2, 3)]), ("ij->", [(2, 3)]), ("i,i->", [(5,), (5,)]),
                                            ("i,j->ij", [(2,), (3,)]), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]), ("ii->i", [(3, 3)]),
                                            ("ij,jk", [(2, 3), (3, 4)]), ("...ij,...jk->...ik", [(2, 2, 3), (2, 3, 4)]), ("ijk->kj", [(2, 3, 4)])])
def test_einsum(formula, shapes):
  check_op(shapes, lambda *ts: Tensor.einsum(formula, *ts), lambda *xs: np.einsum(formula, *xs))

@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_softmax(axis):
  check_op([(3, 5)], lambda t: t.softmax(axis), lambda x: np.exp(x) / np.exp(x).sum(axis, keepdims=True), low=-5, high=5)
  check_op([(3, 5)], lambda t: t.log_softmax(axis), lambda x: x - np.log(np.exp(x).sum(axis, keepdims=True)), low=-5, high=5)

def test_softmax_large_values_stable():
  x = np.array([[1000.0, 1001.0, 999.0]], dtype=np.float32)
  want = np.exp(x - 1001) / np.exp(x - 1001).sum()
  np.testing.assert_allclose(Tensor(x).softmax().numpy(), want, rtol=1e-5)

@pytest.mark.skipif(scale_factor() < 1, reason="the > 2^24 element reduction only runs at CORE_TEST_SCALE >= 1")
def test_large_reduction():
  """Past 2^24 a float32 running sum stops growing (16777216 + 1 == 16777216): the result must still be exact-ish."""
  n = (1 << 24) + (1 << 20) + 3
  assert Tensor.ones(n).sum().item() == pytest.approx(n, rel=1e-6)
  pattern = (np.arange(n, dtype=np.int64) % 7).astype(np.float32) * 0.25
  got = (Tensor.arange(n) % 7).cast(dtypes.float32).mul(0.25).sum().item()
  assert got == pytest.approx(pattern.astype(np.float64).sum(), rel=1e-6)

def np_cum_index(x, axis, better):
  """Values and indices of a running max/min; the index is the latest position holding the running value (torch)."""
  x = np.moveaxis(x, axis, -1)
  vals, idx = np.empty_like(x), np.zeros(x.shape, np.int32)
  for pos in np.ndindex(*x.shape[:-1]):
    best, at = None, 0
    for j, v in enumerate(x[pos]):
      if best is None or not better(best, v): best, at = v, j
      vals[pos + (j,)], idx[pos + (j,)] = best, at
  return np.moveaxis(vals, -1, axis), np.moveaxis(idx, -1, axis)

@pytest.mark.parametrize("axis", [0, 1, -1])
def test_cummax_cummin(axis):
  check_op([(4, 5)], lambda t: t.cummax(axis)[0], lambda x: np.maximum.accumulate(x, axis))
  check_op([(4, 5)], lambda t: t.cummin(axis)[0], lambda x: np.minimum.accumulate(x, axis))
  x = rng(6).integers(-3, 3, size=(4, 5)).astype(np.int32)   # ties
  v, i = Tensor(x).cummax(axis)
  wv, wi = np_cum_index(x, axis, lambda best, v: best > v)
  np.testing.assert_equal(v.numpy(), wv)
  np.testing.assert_equal(i.numpy(), wi)
  v, i = Tensor(x.astype(np.float32)).cummin(axis)
  wv, wi = np_cum_index(x, axis, lambda best, v: best < v)
  np.testing.assert_equal(v.numpy(), wv)
  np.testing.assert_equal(i.numpy(), wi)
  assert i.dtype is dtypes.int32

@pytest.mark.parametrize("n", [1, 6, 17])
def test_logcumsumexp(n):
  check_op([(2, n)], lambda t: t.logcumsumexp(1), lambda x: np.logaddexp.accumulate(x, 1), low=-5, high=5)
  check_op([(n, 3)], lambda t: t.logcumsumexp(0), lambda x: np.logaddexp.accumulate(x, 0), low=-5, high=5)

def test_logcumsumexp_extremes():
  x = np.array([-1000.0, 0.0, 3.0, -np.inf, 2.0, 1000.0], np.float32)   # far apart: no overflow, no underflow to -inf
  np.testing.assert_allclose(Tensor(x).logcumsumexp().numpy(), np.logaddexp.accumulate(x.astype(np.float64)), rtol=1e-6)
  np.testing.assert_equal(Tensor([-np.inf, -np.inf]).logcumsumexp().numpy(), [-np.inf, -np.inf])

def test_cumulative_zero_size_and_scalar():
  for f in (lambda t: t.cumsum(1), lambda t: t.cumprod(1), lambda t: t.cummax(1)[0], lambda t: t.cummin(1)[1], lambda t: t.logcumsumexp(1)):
    assert f(Tensor.ones(3, 0)).shape == (3, 0)
  assert Tensor(2.0).cumsum().item() == 2.0 and Tensor(2.0).cummax()[1].item() == 0
  for name in ("cumsum", "cumprod", "cummax", "cummin", "logcumsumexp"):   # the error names the op the user called
    with pytest.raises(IndexError, match=f"^{name}: dim 1 is out of range for a tensor with 0 dims"): getattr(Tensor(2.0), name)(1)
    with pytest.raises(IndexError, match=f"^{name}: dim -2 is out of range for a tensor with 1 dims"): getattr(Tensor.ones(3), name)(-2)

# torch sums ellipsis dims left out of the output; numpy refuses, so its formula names them
@pytest.mark.parametrize("formula,np_formula,shapes", [("...ij,...jk", None, [(2, 2, 3), (2, 3, 4)]), ("i...->...", None, [(3, 2, 2)]),
                                                       ("...i,i->...", None, [(2, 3, 4), (4,)]), ("b...,b...->b", "bx,bx->b", [(2, 3), (2, 3)]),
                                                       ("...ii->...i", None, [(2, 3, 3)]), ("ij...,jk...->ik...", None, [(2, 3, 2), (3, 2, 2)])],
                         ids=str)
def test_einsum_ellipsis(formula, np_formula, shapes):
  check_op(shapes, lambda *ts: Tensor.einsum(formula, *ts), lambda *xs: np.einsum(np_formula or formula, *xs))

def test_prod_gradient_with_zeros():
  for v in ([1.0, 2.0, 3.0], [0.0, 2.0, 3.0], [0.0, 0.0, 3.0]):
    check_op([(3,)], lambda t: t.prod(), lambda x: x.prod(), inputs=[np.array(v, np.float32)])
  x = np.array([[0.0, 2.0, 3.0], [1.0, 0.0, 0.0], [2.0, 3.0, 4.0]], np.float32)
  check_op([x.shape], lambda t: t.prod(1), lambda a: a.prod(1), inputs=[x])

def test_reduce_scalar_with_axis():
  for f, nf in ((lambda t: t.sum(0), np.sum), (lambda t: t.max(-1), np.max), (lambda t: t.softmax(0), lambda x: np.ones_like(x)),
                (lambda t: t.log_softmax(-1), lambda x: np.zeros_like(x)), (lambda t: t.logsumexp(0), lambda x: x)):
    check_op([()], f, nf)
  check_op([(3, 4)], lambda t: t.softmin(1), lambda x: np.exp(-x) / np.exp(-x).sum(1, keepdims=True))
