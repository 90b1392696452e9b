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
