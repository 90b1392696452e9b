"""Stress: gradients compared with central differences computed in float64 numpy."""
from __future__ import annotations
from typing import Callable
import numpy as np
import pytest
from core import Tensor

def _numgrad(f_np: Callable[[np.ndarray], float], x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
  g = np.zeros_like(x, dtype=np.float64)
  flat, gf = x.reshape(-1), g.reshape(-1)
  for i in range(flat.size):
    old = flat[i]
    flat[i] = old + eps
    hi = f_np(x)
    flat[i] = old - eps
    lo = f_np(x)
    flat[i] = old
    gf[i] = (hi - lo) / (2 * eps)
  return g

def _check(f_t: Callable[[Tensor], Tensor], f_np: Callable[[np.ndarray], float], shape, seed=0, rtol=1e-5, atol=1e-6):
  x = np.random.default_rng(seed).standard_normal(shape)
  t = Tensor(x.copy(), dtype="float64", requires_grad=True)
  f_t(t).backward()
  assert t.grad is not None
  np.testing.assert_allclose(t.grad.numpy(), _numgrad(f_np, x.copy()), rtol=rtol, atol=atol)

def test_same_tensor_several_branches():
  _check(lambda t: (t * t.exp() + t.sum(0, keepdim=True) * t - t.T.sum()).sum(),
         lambda x: float((x * np.exp(x) + x.sum(0, keepdims=True) * x - x.T.sum()).sum()), (3, 4))

def test_diamond_graph_with_reuse():
  def ft(t):
    a = t.relu()
    b = a * 2 + t.sin()
    return (a * b).sum() + b.max()
  def fn(x):
    a = np.maximum(x, 0)
    b = a * 2 + np.sin(x)
    return float((a * b).sum() + b.max())
  _check(ft, fn, (5,), seed=3)

def test_grad_through_pad_flip_shrink():
  w = np.random.default_rng(9).standard_normal((3, 6))
  _check(lambda t: (t.pad(((1, 2), (0, 3))).flip(1)[::2, 1:] * Tensor(w)).sum(),
         lambda x: float((np.pad(x, ((1, 2), (0, 3)))[:, ::-1][::2, 1:] * w).sum()), (3, 4))

def test_grad_through_cumsum():
  w = np.random.default_rng(2).standard_normal(70)
  _check(lambda t: (t.cumsum(0) * Tensor(w)).sum(), lambda x: float((np.cumsum(x) * w).sum()), (70,))

def test_grad_through_gather():
  idx = np.array([[0, 2, 1], [2, 2, 0]])
  w = np.random.default_rng(4).standard_normal((2, 3))
  _check(lambda t: (t.gather(0, Tensor(idx)) * Tensor(w)).sum(),
         lambda x: float((np.take_along_axis(x, idx, 0) * w).sum()), (3, 3))

def test_grad_through_fancy_getitem():
  w = np.random.default_rng(5).standard_normal((4, 3))
  _check(lambda t: (t[Tensor([1, 1, 0, -1])] * Tensor(w)).sum(), lambda x: float((x[[1, 1, 0, -1]] * w).sum()), (3, 3))

def test_setitem_on_a_tensor_that_needs_gradients_is_refused():
  # writing into a buffer cuts the graph: a clear error instead of silently missing gradients (tinygrad refuses too)
  t = Tensor(np.ones((3, 4)), requires_grad=True)
  y = t * 1
  with pytest.raises(RuntimeError, match="needs gradients"): y[1] = t[0] * 3
  z = t.detach() * 1
  z[1] = 5.0
  np.testing.assert_allclose(z.numpy()[1], 5.0)

def test_grad_conv2d():
  rng = np.random.default_rng(7)
  wk = rng.standard_normal((3, 2, 3, 3))
  def conv_np(x):
    n, c, h, ww = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((n, 3, (h + 2 - 3) // 2 + 1, (ww + 2 - 3) // 2 + 1))
    for i in range(out.shape[2]):
      for j in range(out.shape[3]):
        out[:, :, i, j] = np.einsum("nchw,ochw->no", xp[:, :, 2 * i:2 * i + 3, 2 * j:2 * j + 3], wk)
    return out
  x = rng.standard_normal((2, 2, 5, 6))
  got = Tensor(x).conv2d(Tensor(wk), stride=2, padding=1).numpy()
  np.testing.assert_allclose(got, conv_np(x), rtol=1e-6, atol=1e-8)
  _check(lambda t: (t.conv2d(Tensor(wk), stride=2, padding=1) ** 2).sum(), lambda x: float((conv_np(x) ** 2).sum()), (2, 2, 5, 6))

def test_grad_conv2d_weight():
  rng = np.random.default_rng(8)
  x = rng.standard_normal((1, 2, 4, 4))
  def fn(wk):
    out = np.zeros((1, 2, 3, 3))
    for i in range(3):
      for j in range(3): out[:, :, i, j] = np.einsum("nchw,ochw->no", x[:, :, i:i + 2, j:j + 2], wk)
    return float((out * out).sum())
  _check(lambda w: (Tensor(x).conv2d(w) ** 2).sum(), fn, (2, 2, 2, 2))

def test_grad_max_pool2d():
  rng = np.random.default_rng(11)
  w = rng.standard_normal((1, 2, 2, 3))
  def fn(x):
    out = x[:, :, :4, :6].reshape(1, 2, 2, 2, 3, 2).max(axis=(3, 5))
    return float((out * w).sum())
  _check(lambda t: (t.max_pool2d(2) * Tensor(w)).sum(), fn, (1, 2, 5, 7))

def test_grad_reduce_max_ties_split():
  t = Tensor(np.array([1.0, 3.0, 3.0, 2.0]), dtype="float64", requires_grad=True)
  t.max().backward()
  np.testing.assert_allclose(t.grad.numpy(), [0, 0.5, 0.5, 0])

def test_grad_softmax_crossentropy():
  y = np.array([2, 0, 1])
  def fn(x):
    m = x - x.max(1, keepdims=True)
    ls = m - np.log(np.exp(m).sum(1, keepdims=True))
    return float(-ls[np.arange(3), y].mean())
  _check(lambda t: t.sparse_categorical_crossentropy(Tensor(y)), fn, (3, 4))

def test_grad_matmul_chain_broadcast():
  rng = np.random.default_rng(12)
  a, b = rng.standard_normal((2, 3, 4)), rng.standard_normal((4,))
  _check(lambda t: ((Tensor(a) @ t).tanh() @ Tensor(b)).sum(),
         lambda x: float((np.tanh(a @ x) @ b).sum()), (4, 4))

def test_grad_where_and_abs_div():
  _check(lambda t: ((t > 0).where(t.abs().sqrt(), t * t) / (1 + t.square())).sum(),
         lambda x: float((np.where(x > 0, np.sqrt(np.abs(x)), x * x) / (1 + x * x)).sum()), (8,), seed=21)

def test_grad_accumulates_across_backward():
  t = Tensor(np.array([1.0, 2.0]), dtype="float64", requires_grad=True)
  (t * 3).sum().backward()
  (t * t).sum().backward()
  np.testing.assert_allclose(t.grad.numpy(), [3 + 2, 3 + 4])

def test_grad_of_expanded_then_reduced():
  _check(lambda t: t.reshape(3, 1).expand(3, 5).mul(Tensor(np.arange(15.0).reshape(3, 5))).max(1).sum(),
         lambda x: float((x.reshape(3, 1) * np.arange(15.0).reshape(3, 5)).max(1).sum()), (3,))

@pytest.mark.parametrize("fn", ["cumsum_flip", "pad_reflect"])
def test_grad_misc(fn):
  if fn == "cumsum_flip":
    _check(lambda t: (t.flip(0).cumsum(0).flip(0) ** 2).sum(), lambda x: float((np.cumsum(x[::-1])[::-1] ** 2).sum()), (9,))
  else:
    _check(lambda t: (t.pad(((2, 1),), mode="reflect") ** 3).sum(), lambda x: float((np.pad(x, (2, 1), mode="reflect") ** 3).sum()), (5,))
