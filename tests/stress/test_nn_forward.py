"""Stress: conv2d (groups, stride, dilation, padding) and pooling forward passes against direct numpy loops."""
from __future__ import annotations
import numpy as np
import pytest
from core import Tensor

def _conv_np(x, w, groups, stride, dil, pad):
  n, _, h, ww = x.shape
  o, cg, kh, kw = w.shape
  xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
  oh, ow = (h + 2 * pad - dil * (kh - 1) - 1) // stride + 1, (ww + 2 * pad - dil * (kw - 1) - 1) // stride + 1
  out, og = np.zeros((n, o, oh, ow)), o // groups
  for g in range(groups):
    for i in range(oh):
      for j in range(ow):
        patch = xp[:, g * cg:(g + 1) * cg, i * stride:i * stride + dil * (kh - 1) + 1:dil, j * stride:j * stride + dil * (kw - 1) + 1:dil]
        out[:, g * og:(g + 1) * og, i, j] = np.einsum("nchw,ochw->no", patch, w[g * og:(g + 1) * og])
  return out

@pytest.mark.parametrize("groups,stride,dil,pad", [(2, 1, 1, 0), (2, 2, 2, 1), (1, 3, 1, 2), (4, 1, 2, 0)])
def test_conv2d_forward(groups, stride, dil, pad):
  rng = np.random.default_rng(groups * 10 + stride)
  x = rng.standard_normal((2, 4, 7, 6)).astype(np.float32)
  w = rng.standard_normal((8, 4 // groups, 3, 2)).astype(np.float32)
  b = rng.standard_normal(8).astype(np.float32)
  got = Tensor(x).conv2d(Tensor(w), Tensor(b), groups=groups, stride=stride, dilation=dil, padding=pad).numpy()
  np.testing.assert_allclose(got, _conv_np(x, w, groups, stride, dil, pad) + b.reshape(1, 8, 1, 1), rtol=1e-4, atol=1e-4)

def _maxpool_np(x, k, s, p):
  xp = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)), constant_values=-np.inf)
  oh, ow = (xp.shape[2] - k) // s + 1, (xp.shape[3] - k) // s + 1
  return np.array([[xp[:, :, i * s:i * s + k, j * s:j * s + k].max((2, 3)) for j in range(ow)] for i in range(oh)]).transpose(2, 3, 0, 1)

def test_max_pool2d_padding_negative_values():
  x = -np.abs(np.random.default_rng(0).standard_normal((2, 3, 7, 6)).astype(np.float32)) - 1
  np.testing.assert_equal(Tensor(x).max_pool2d(3, stride=2, padding=1).numpy(), _maxpool_np(x, 3, 2, 1))

def test_avg_pool2d_floor_mode():
  x = np.random.default_rng(1).standard_normal((1, 2, 7, 5)).astype(np.float32)
  np.testing.assert_allclose(Tensor(x).avg_pool2d(2).numpy(), x[:, :, :6, :4].reshape(1, 2, 3, 2, 2, 2).mean((3, 5)), rtol=1e-6)
