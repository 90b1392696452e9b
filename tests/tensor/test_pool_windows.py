"""The sliding windows under conv2d, pooling and unfold (ConvMixin._pool, Tensor.unfold): exact values against numpy index
arithmetic for strides, dilations, odd sizes and 1-3 spatial dims, and the view built as one tensor (UOp movement ops, not a
Tensor op per step: those cost ~1 ms per conv2d call)."""
from __future__ import annotations
import itertools
import numpy as np
import pytest
from core import Tensor
from core.tensor.tensor import Tensor as TensorCls

rng = np.random.default_rng(23)

def windows_ref(x: np.ndarray, k: tuple[int, ...], s: tuple[int, ...], d: tuple[int, ...]) -> np.ndarray:
  """(..., *spatial) -> (..., *out, *k): out[..., *i, *j] = x[..., *(i*s + j*d)]."""
  nd = len(k)
  sp = x.shape[-nd:]
  outs = [(n - di * (ki - 1) - 1) // si + 1 for n, ki, si, di in zip(sp, k, s, d)]
  ret = np.empty(x.shape[:-nd] + tuple(outs) + tuple(k), x.dtype)
  for i in itertools.product(*map(range, outs)):
    for j in itertools.product(*map(range, k)):
      ret[(...,) + i + j] = x[(...,) + tuple(ii * si + jj * di for ii, jj, si, di in zip(i, j, s, d))]
  return ret

CASES = [  # (shape, kernel, stride, dilation)
  ((2, 3, 9, 9), (3, 3), (1, 1), (1, 1)),
  ((2, 3, 9, 9), (3, 3), (2, 2), (1, 1)),     # a depthwise stride-2 conv's windows
  ((1, 2, 11, 7), (3, 5), (2, 1), (2, 1)),    # per-dim kernel, stride and dilation, odd sizes
  ((2, 4, 10), (3,), (3,), (1,)),             # 1d
  ((1, 1, 6, 5, 7), (2, 2, 3), (2, 1, 2), (1, 2, 1)),   # 3d
  ((3, 5, 5), (5, 5), (1, 1), (1, 1)),        # one window covering the input
]

@pytest.mark.parametrize("shape, k, s, d", CASES)
def test_pool_windows_match_numpy(shape, k, s, d):
  x = rng.standard_normal(shape).astype(np.float32)
  np.testing.assert_array_equal(Tensor(x)._pool(k, s, d).numpy(), windows_ref(x, k, s, d))

@pytest.mark.parametrize("shape, dim, size, step", [((5, 7), 1, 3, 2), ((5, 7), 0, 2, 1), ((3, 4, 9), -1, 4, 3), ((6,), 0, 6, 1)])
def test_unfold_matches_numpy(shape, dim, size, step):
  x = rng.standard_normal(shape).astype(np.float32)
  ax = dim % len(shape)
  want = np.moveaxis(windows_ref(np.moveaxis(x, ax, -1), (size,), (step,), (1,)), -2, ax)
  np.testing.assert_array_equal(Tensor(x).unfold(dim, size, step).numpy(), want)

def test_pool_builds_one_tensor(monkeypatch):
  # the whole window view is one tensor made from the input's UOp: no intermediate Tensors (each costs its checks and wrap)
  made: list[object] = []
  wrap = TensorCls._wrap.__func__
  monkeypatch.setattr(TensorCls, "_wrap", classmethod(lambda cls, uop, *parents: made.append(uop) or wrap(cls, uop, *parents)))
  x = Tensor.empty(8, 144, 58, 58)
  y = x._pool((3, 3), 2, 1)
  assert y.shape == (8, 144, 28, 28, 3, 3) and len(made) == 1
  made.clear()
  assert x.unfold(3, 3, 2).shape == (8, 144, 58, 28, 3) and len(made) == 1

def test_pool_window_grads_match_numpy():
  # the gradient flows back through the UOp view: each input element gets the count of windows that read it
  x = Tensor(rng.standard_normal((1, 2, 7, 6)).astype(np.float32), requires_grad=True)
  x._pool((3, 2), (2, 2), (1, 2)).sum().backward()
  assert x.grad is not None
  want = windows_ref(np.arange(42.0).reshape(1, 1, 7, 6), (3, 2), (2, 2), (1, 2)).astype(np.int64)
  counts = np.bincount(want.ravel(), minlength=42).reshape(7, 6)
  np.testing.assert_array_equal(x.grad.numpy(), np.broadcast_to(counts, (1, 2, 7, 6)).astype(np.float32))
