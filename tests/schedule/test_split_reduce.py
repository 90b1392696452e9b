"""split_reduce: big reductions with few outputs become partials + total (parallel), with the same numbers as numpy."""
import numpy as np
import pytest
from core.ir.ops import Ops
from core.schedule.kernelize import create_schedule
from core.helpers import Context
from core.tensor.tensor import Tensor

def _kernels(t: Tensor) -> list:
  items, _, _ = create_schedule([t.uop])
  return [it for it in items if it.ast.op is Ops.SINK]

@pytest.mark.parametrize("op", ["sum", "max", "min"])
def test_big_reduction_splits_and_matches_numpy(op):
  x = np.random.default_rng(0).standard_normal(1 << 17).astype(np.float32)
  t = Tensor(x).realize()
  r = getattr(t, op)()
  assert len(_kernels(r)) == 2       # partials, then the total
  np.testing.assert_allclose(r.numpy(), getattr(x.astype(np.float64), op)(), rtol=1e-5)
  with Context(NOOPT=1): assert len(_kernels(getattr(t, op)())) == 1

def test_small_or_wide_reductions_stay_one_kernel():
  x = np.random.default_rng(1).standard_normal((128, 4096)).astype(np.float32)
  t = Tensor(x).realize()
  assert len(_kernels(t.max(1))) == 1                 # 128 outputs: parallel already
  assert len(_kernels(Tensor(x[:2, :100]).realize().sum())) == 1   # short
  np.testing.assert_allclose(t.max(1).numpy(), x.max(1))

def test_uneven_axis_and_int_reduction():
  x = np.arange(3 * 70001, dtype=np.int32).reshape(3, 70001) % 97
  t = Tensor(x).realize()
  np.testing.assert_array_equal(t.sum().numpy(), x.sum())
  np.testing.assert_array_equal(t.max().numpy(), x.max())

@pytest.mark.parametrize("shape,axis", [(((1 << 20) + 77,), None), ((3, 100_003), 1), ((70_001, 2), 0)])
def test_padded_rows_sum_their_tail_in_the_total(shape, axis):
  # the Tensor layer pads a float sum to whole rows; the partials kernel then reads full rows only, with no per-element gate
  x = np.random.default_rng(2).random(shape, dtype=np.float32)
  t = Tensor(x).realize()
  ks = _kernels(t.sum(axis))
  assert len(ks) == 2
  gated = [u for u in ks[0].ast.toposort() if u.op is Ops.INDEX and len(u.src) > 2]
  assert not gated, gated
  want = x.astype(np.float64).sum(axis)
  np.testing.assert_allclose(t.sum(axis).numpy(), want, rtol=1e-6)
  with Context(NOOPT=1): np.testing.assert_allclose(t.sum(axis).numpy(), want, rtol=1e-6)

@pytest.mark.parametrize("op", ["sum", "max", "min"])
@pytest.mark.parametrize("shape,axis", [((1_000_003,), None), ((3, 100_003), 1)])
def test_prime_length_splits_with_a_tail_in_the_total(op, shape, axis):
  # no divisor of a prime length fits: equal rows of the first elements are the partials, the rest joins the total
  x = np.random.default_rng(4).integers(-10**6, 10**6, shape).astype(np.int32)
  t = Tensor(x).realize()
  assert len(_kernels(getattr(t, op)(axis))) == 2
  np.testing.assert_array_equal(getattr(t, op)(axis).numpy(), getattr(x, op)(axis))
  if op != "sum":   # float max/min take split_reduce too (float sums take the Tensor layer's two levels), and are exact
    f = x.astype(np.float32) / 7
    np.testing.assert_array_equal(getattr(Tensor(f).realize(), op)(axis).numpy(), getattr(f, op)(axis))
