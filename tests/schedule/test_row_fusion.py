"""Row reductions broadcast back over their own row (softmax, log_softmax, layernorm) run in one kernel with the
elementwise pass over the row when the row fits realize_points.ROW_FUSE_BYTES; longer rows keep one kernel per
reduction. Counts come from the schedule, values from numpy."""
import numpy as np
import pytest
from core import Tensor
from core.ir.ops import Ops
from core.schedule.kernelize import create_schedule
from core.schedule import realize_points

def kernels(t: Tensor) -> list:
  return [it for it in create_schedule([t.uop])[0] if it.ast.op is Ops.SINK]

def np_softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
  e = np.exp(x - x.max(axis, keepdims=True))
  return e / e.sum(axis, keepdims=True)

def np_layernorm(x: np.ndarray, axis=-1, eps: float = 1e-5) -> np.ndarray:
  y = x - x.mean(axis, keepdims=True)
  return y / np.sqrt((y * y).mean(axis, keepdims=True) + eps)

@pytest.fixture
def x() -> np.ndarray: return np.random.default_rng(0).standard_normal((64, 1000)).astype(np.float32) * 3

def test_softmax_is_one_kernel(x):
  t = Tensor(x).softmax(-1)
  assert len(kernels(t)) == 1
  np.testing.assert_allclose(t.numpy(), np_softmax(x), rtol=1e-5, atol=1e-7)

def test_log_softmax_is_one_kernel(x):
  t = Tensor(x).log_softmax(-1)
  assert len(kernels(t)) == 1
  np.testing.assert_allclose(t.numpy(), np.log(np_softmax(x)), rtol=1e-5, atol=1e-5)

def test_layernorm_is_one_kernel():
  x = np.random.default_rng(1).standard_normal((32, 1024)).astype(np.float32) + 2
  t = Tensor(x).layernorm()
  assert len(kernels(t)) == 1
  np.testing.assert_allclose(t.numpy(), np_layernorm(x), rtol=1e-4, atol=1e-5)

@pytest.mark.parametrize("shape", [(7, 13), (5, 1), (3, 1023), (1, 257), (9, 31)])
def test_odd_row_lengths(shape):
  x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
  np.testing.assert_allclose(Tensor(x).softmax(-1).numpy(), np_softmax(x), rtol=1e-5, atol=1e-7)
  np.testing.assert_allclose(Tensor(x).layernorm().numpy(), np_layernorm(x), rtol=1e-4, atol=1e-4)

def test_rows_above_the_bound_keep_one_kernel_per_reduction():
  n = realize_points.ROW_FUSE_BYTES // 4 + 3   # float32 rows just over the bound
  x = np.random.default_rng(3).standard_normal((3, n)).astype(np.float32)
  t = Tensor(x).softmax(-1)
  assert len(kernels(t)) == 3   # the max, the sum of exp, the division
  np.testing.assert_allclose(t.numpy(), np_softmax(x), rtol=1e-5, atol=1e-9)
  at = Tensor(x[:, :realize_points.ROW_FUSE_BYTES // 4]).softmax(-1)   # exactly at the bound: fused
  assert len(kernels(at)) == 1

def test_other_axes_and_keepdim():
  x = np.random.default_rng(4).standard_normal((6, 50, 10)).astype(np.float32)
  for axis in (0, 1, 2):
    t = Tensor(x).softmax(axis)
    assert len(kernels(t)) == 1
    np.testing.assert_allclose(t.numpy(), np_softmax(x, axis), rtol=1e-5, atol=1e-7)
  t = Tensor(x).layernorm(axis=(1, 2))
  assert len(kernels(t)) == 1
  np.testing.assert_allclose(t.numpy(), np_layernorm(x, (1, 2)), rtol=1e-4, atol=1e-5)
  # keepdim=False reshaped back by hand: the same broadcast after a reshape
  xt = Tensor(x)
  c = xt - xt.mean(2).reshape(6, 50, 1)
  assert len(kernels(c)) == 1
  np.testing.assert_allclose(c.numpy(), x - x.mean(2, keepdims=True), rtol=1e-5, atol=1e-6)

def test_reduction_over_other_axes_is_not_fused():
  # a total over every axis broadcast back would be recomputed per row: still its own kernel
  x = np.random.default_rng(5).standard_normal((16, 8)).astype(np.float32)
  t = Tensor(x) - Tensor(x).sum(1, keepdim=True).sum(0, keepdim=True)
  assert len(kernels(t)) == 2
  np.testing.assert_allclose(t.numpy(), x - x.sum(), rtol=1e-5, atol=1e-4)

def test_softmax_backward():
  rng = np.random.default_rng(6)
  x, w = rng.standard_normal((8, 37)).astype(np.float32), rng.standard_normal((8, 37)).astype(np.float32)
  xt = Tensor(x, requires_grad=True)
  (xt.softmax(-1) * Tensor(w)).sum().backward()
  s = np_softmax(x)
  expected = s * (w - (s * w).sum(-1, keepdims=True))   # the softmax Jacobian applied to w
  assert xt.grad is not None
  np.testing.assert_allclose(xt.grad.numpy(), expected, rtol=1e-4, atol=1e-6)

def _np_sdpa(q, k, v, causal):
  s = q @ k.swapaxes(-1, -2) / np.sqrt(q.shape[-1])
  if causal: s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
  return np_softmax(s) @ v

@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_computes_qk_once(causal):
  rng = np.random.default_rng(7)
  q, k, v = (rng.standard_normal((1, 3, 40, 16)).astype(np.float32) for _ in range(3))
  Q, K, V = Tensor(q).realize(), Tensor(k).realize(), Tensor(v).realize()
  out = Q.scaled_dot_product_attention(K, V, is_causal=causal)
  ks = kernels(out)
  qbuf = Q.uop.base if hasattr(Q.uop, "base") else Q.uop
  readers = [kk for kk in ks if any(b is qbuf or b is Q.uop for b in kk.bufs)]
  assert len(readers) == 1, "q @ k^T is computed by one kernel"
  # q @ k^T, the softmax (its causal mask a comparison of indices inside it, count_fold), the product with v
  assert len(ks) == 3
  np.testing.assert_allclose(out.numpy(), _np_sdpa(q, k, v, causal), rtol=1e-4, atol=1e-5)

def test_reduction_of_an_assigned_buffer_is_realized_first():
  # x <- x / ||x row||: fused, a thread would overwrite rows another still reads (a whole-tensor norm reads every row)
  x = np.random.default_rng(8).standard_normal((64, 100)).astype(np.float32)
  t = Tensor(x.copy()).realize()
  t.assign(t / (t * t).sum().sqrt()).realize()
  np.testing.assert_allclose(t.numpy(), x / np.sqrt((x * x).sum()), rtol=1e-5, atol=1e-7)
  r = Tensor(x.copy()).realize()
  r.assign(r - r.max(1, keepdim=True)).realize()
  np.testing.assert_allclose(r.numpy(), x - x.max(1, keepdims=True), rtol=1e-6)

def test_row_fusion_is_per_device(x):
  # only renderers without workgroups fuse rows: a GPU's row kernel would give a whole row to one work-item
  from core.engine.realize import fuse_rows
  assert fuse_rows("CPU") and not fuse_rows("PYTHON")
  t = Tensor(x).softmax(-1)
  assert len([it for it in create_schedule([t.uop], lambda d: False)[0] if it.ast.op is Ops.SINK]) == 3
  p = Tensor(x, device="PYTHON").softmax(-1)
  assert len([it for it in create_schedule([p.uop], fuse_rows)[0] if it.ast.op is Ops.SINK]) == 3
  np.testing.assert_allclose(p.numpy(), np_softmax(x), rtol=1e-5, atol=1e-7)
