"""Stress: views of views (strided/negative slices, permute/reshape/pad/flip), reductions over them, setitem into views."""
from __future__ import annotations
import numpy as np
from core import Tensor

def _arr(shape, seed=0):
  return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)

def test_step_slice_then_movement_then_reduce():
  a = _arr((7, 9, 5))
  t = Tensor(a)
  v = t[1::2, ::-3, 4:0:-2].permute(2, 0, 1).pad(((1, 0), (0, 2), (1, 1))).flip(1)
  n = np.pad(a[1::2, ::-3, 4:0:-2].transpose(2, 0, 1), ((1, 0), (0, 2), (1, 1)))[:, ::-1]
  np.testing.assert_allclose(v.numpy(), n, rtol=1e-6)
  np.testing.assert_allclose(v.sum(axis=(0, 2)).numpy(), n.sum(axis=(0, 2)), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(v.max(axis=1).numpy(), n.max(axis=1), rtol=1e-6)

def test_reshape_of_strided_view():
  a = _arr((6, 8))
  v = Tensor(a)[::-1, 1::3].reshape(3, 2, 3).permute(1, 2, 0).reshape(6, 3)
  n = a[::-1, 1::3].reshape(3, 2, 3).transpose(1, 2, 0).reshape(6, 3)
  np.testing.assert_allclose(v.numpy(), n)
  np.testing.assert_allclose((v * 2 + v.T.sum(0).reshape(6, 1)).numpy(), n * 2 + n.T.sum(0).reshape(6, 1), rtol=1e-5, atol=1e-6)

def test_negative_step_full_reverse_each_axis():
  a = np.arange(60, dtype=np.int32).reshape(3, 4, 5)
  t = Tensor(a)
  np.testing.assert_equal(t[::-1, ::-2, ::-4].numpy(), a[::-1, ::-2, ::-4])
  np.testing.assert_equal(t[-1:-4:-1, 3:0:-2, -2::-3].numpy(), a[-1:-4:-1, 3:0:-2, -2::-3])

def test_empty_slices():
  a = _arr((4, 5))
  t = Tensor(a)
  assert t[3:1].shape == (0, 5)
  np.testing.assert_equal(t[3:1].sum(0).numpy(), a[3:1].sum(0))
  assert t[:, 4:0:1].shape == a[:, 4:0:1].shape

def test_pad_then_shrink_then_flip_chain():
  a = _arr((5, 6))
  t = Tensor(a).pad(((2, 3), (1, 1)), value=-1.0)[1:-1, ::2].flip(0).pad(((0, 1), (2, 0)))
  n = np.pad(np.pad(a, ((2, 3), (1, 1)), constant_values=-1.0)[1:-1, ::2][::-1], ((0, 1), (2, 0)))
  np.testing.assert_allclose(t.numpy(), n)
  np.testing.assert_allclose(t.sum().numpy(), n.sum(), rtol=1e-5)

def test_setitem_step_view_then_read_other_views():
  a = np.arange(48, dtype=np.float32).reshape(6, 8)
  t = Tensor(a.copy())
  n = a.copy()
  t[1:, ::2] = -1.0
  n[1:, ::2] = -1.0
  np.testing.assert_equal(t.numpy(), n)
  np.testing.assert_equal(t[::-1, 1::3].numpy(), n[::-1, 1::3])
  np.testing.assert_equal(t.T[2].numpy(), n.T[2])

def test_setitem_ellipsis_last():
  a = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
  t = Tensor(a.copy())
  n = a.copy()
  t[..., 0] = Tensor(np.array([[100, 101, 102], [103, 104, 105]], dtype=np.int32))
  n[..., 0] = [[100, 101, 102], [103, 104, 105]]
  np.testing.assert_equal(t.numpy(), n)
  t[..., -1] = 7
  n[..., -1] = 7
  np.testing.assert_equal(t.sum(axis=2).numpy(), n.sum(axis=2))

def test_setitem_negative_step():
  a = np.arange(10, dtype=np.float32)
  t = Tensor(a.copy())
  n = a.copy()
  t[::-3] = Tensor(np.array([1, 2, 3, 4], dtype=np.float32))
  n[::-3] = [1, 2, 3, 4]
  np.testing.assert_equal(t.numpy(), n)

def test_setitem_with_tensor_value_from_same_tensor():
  a = np.arange(12, dtype=np.float32).reshape(3, 4)
  t = Tensor(a.copy())
  n = a.copy()
  t[0] = t[2] * 10
  n[0] = n[2] * 10
  np.testing.assert_equal(t.numpy(), n)
  # overlapping: shift a row into the next one
  t[1:] = t[:-1]
  n[1:] = n[:-1].copy()
  np.testing.assert_equal(t.numpy(), n)

def test_setitem_on_lazy_tensor_keeps_other_view_consistent():
  a = np.arange(16, dtype=np.float32).reshape(4, 4)
  base = Tensor(a) + 1
  v = base[1:3]
  base[1:3, 1:3] = 0.0
  n = a + 1
  n[1:3, 1:3] = 0.0
  np.testing.assert_equal(base.numpy(), n)
  # v was built from base's old lazy graph: it is a different tensor, it keeps the old values
  np.testing.assert_equal(v.numpy(), (a + 1)[1:3])

def test_setitem_fancy_index():
  a = np.arange(20, dtype=np.float32).reshape(5, 4)
  t = Tensor(a.copy())
  n = a.copy()
  t[Tensor([0, 3, -1])] = -5.0
  n[[0, 3, -1]] = -5.0
  np.testing.assert_equal(t.numpy(), n)

def test_getitem_fancy_mixed():
  a = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
  t = Tensor(a)
  idx = np.array([[0, 2], [1, 1]])
  np.testing.assert_equal(t[:, Tensor(idx), 1:4:2].numpy(), a[:, idx, 1:4:2])
  np.testing.assert_equal(t[Tensor([2, 0]), :, Tensor([4, -1])].numpy(), a[[2, 0], :, [4, -1]])
