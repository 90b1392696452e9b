"""arange's running sums of ones fold into index arithmetic (core/schedule/count_fold.py), and values made only of indices
(a causal mask) are recomputed in their consumer instead of getting a buffer (realize_points)."""
import numpy as np
import pytest
from core import Tensor
from core.ir.dtype import dtypes
from core.ir.ops import UOp, Ops
from core.schedule.kernelize import create_schedule
from core.schedule.count_fold import fold_count

def kernels(t: Tensor) -> list:
  return [it for it in create_schedule([t.uop])[0] if it.ast.op is Ops.SINK]

@pytest.mark.parametrize("n", [1, 5, 16, 17, 100, 256, 1000])
def test_arange_is_one_kernel_without_a_loop(n):
  t = Tensor.arange(n)
  ks = kernels(t)
  assert len(ks) == 1 and not any(u.op is Ops.REDUCE for u in ks[0].ast.toposort())
  np.testing.assert_array_equal(t.numpy(), np.arange(n))

@pytest.mark.parametrize("args", [(3, 20, 4), (10, 0, -3), (-5, 5)])
def test_arange_steps(args):
  np.testing.assert_array_equal(Tensor.arange(*args).numpy(), np.arange(*args))

@pytest.mark.parametrize("diag", [-2, 0, 1, 3])
def test_tri_masks(diag):
  x = np.random.default_rng(0).standard_normal((6, 9)).astype(np.float32)
  np.testing.assert_array_equal(Tensor(x).tril(diag).numpy(), np.tril(x, diag))
  np.testing.assert_array_equal(Tensor(x).triu(diag).numpy(), np.triu(x, diag))

def test_mask_broadcast_over_heads_is_not_realized():
  x = np.random.default_rng(1).standard_normal((4, 33, 33)).astype(np.float32)
  t = Tensor(x) + Tensor.ones(33, 33).tril() * 2
  assert len(kernels(t)) == 1
  np.testing.assert_allclose(t.numpy(), x + np.tril(np.ones((33, 33), np.float32)) * 2)

def _count(gate_fn, n: int, i: int) -> int:
  r = UOp.range(n, 1)
  i_ = UOp.const(dtypes.index, i)
  red = gate_fn(r, i_).where(UOp.const(dtypes.int32, 3), UOp.const(dtypes.int32, 0)).reduce(r, op=Ops.ADD)
  folded = fold_count(red)
  assert folded is not None and r not in folded.toposort()
  from core.ir.symbolic import symbolic
  from core.ir.pattern import graph_rewrite
  out = graph_rewrite(folded, symbolic)
  assert out.op is Ops.CONST
  return out.arg

@pytest.mark.parametrize("i", [-3, 0, 2, 7, 12])
def test_fold_count_bounds(i):
  n = 8
  # r > i, r + 2 < i, and both at once: 3 times the number of r in [0, n) that pass
  assert _count(lambda r, x: x < r, n, i) == 3 * sum(1 for r in range(n) if i < r)
  assert _count(lambda r, x: r + 2 < x, n, i) == 3 * sum(1 for r in range(n) if r + 2 < i)
  assert _count(lambda r, x: (x < r + 1) & (r < x + 3), n, i) == 3 * sum(1 for r in range(n) if i < r + 1 and r < i + 3)

def test_fold_count_refuses_other_sums():
  r = UOp.range(8, 1)
  # a coefficient other than 1 on the loop index, and a float sum, are left to the loop
  two_r = (UOp.const(dtypes.index, 5) < r * 2).where(UOp.const(dtypes.int32, 1), UOp.const(dtypes.int32, 0)).reduce(r, op=Ops.ADD)
  assert fold_count(two_r) is None
  flt = (UOp.const(dtypes.index, 5) < r).where(UOp.const(dtypes.float32, 1.0), UOp.const(dtypes.float32, 0.0)).reduce(r, op=Ops.ADD)
  assert fold_count(flt) is None
