"""A regular conv whose zero-padded input is small (core.tensor.conv.PAD_IN_PLACE_BYTES: the ONNX ResNet-style model's 3x3s)
reads it in place through gated loads, with no copy kernel first; a large one keeps its copy. Results against numpy on
AVX2-like (8 float32 lanes) and AVX-512-like (16 lanes) renderers, and through Tensor.conv2d on the default device with both
gradients."""
from __future__ import annotations
import numpy as np
import pytest
from core import Tensor
from core.schedule.kernelize import create_schedule
from core.codegen.opt import Kernel
from core.codegen.opt.heuristic import hand_coded
from core.codegen.program import program_uops
from core.tensor.conv import PAD_IN_PLACE_BYTES
from opt_helpers import run_ast, host_renderer
from test_conv_channels import _conv_ref
from test_conv_depthwise import _input_loads

rng = np.random.default_rng(67)

CASES = [  # (batch, in channels, size, out channels, kernel, stride, padding, groups)
  (2, 3, 32, 16, 3, 1, 1, 1),     # the ResNet-style model's stem
  (2, 16, 16, 32, 3, 2, 1, 1),    # its stride-2 3x3
  (2, 32, 8, 32, 3, 1, 1, 1),     # its last stage
  (1, 5, 11, 7, 3, 1, 1, 1),      # odd channels and size
  (1, 8, 12, 8, 5, 2, 2, 2),      # a grouped 5x5, stride and padding 2
]

@pytest.mark.parametrize("simd_bytes", [32, 64])
@pytest.mark.parametrize("n, c, hw, o, ks, stride, pad, groups", CASES)
def test_small_conv_reads_its_padded_input_in_place(simd_bytes, n, c, hw, o, ks, stride, pad, groups):
  x = rng.standard_normal((n, c, hw, hw)).astype(np.float32)
  w = rng.standard_normal((o, c // groups, ks, ks)).astype(np.float32)
  y = Tensor(x).realize().conv2d(Tensor(w).realize(), stride=stride, padding=pad, groups=groups)
  items, _, _ = create_schedule([y.uop])
  assert len(items) == 1, [it.ast.arg for it in items]   # no copy kernel of the padded input
  rnd = host_renderer(simd_bytes)
  k = hand_coded(Kernel(items[0].ast, rnd))
  got, spec = run_ast(items[0], k.ast, rnd)
  want = _conv_ref(x, w, stride, pad, groups)
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-4)
  loads = _input_loads(program_uops(spec))
  assert loads and any(len(u.src[0].src) > 2 for u in loads), k.applied   # the border read through gates

def test_large_conv_keeps_its_padded_copy():
  # 64 channels of 90x90 padded to 92x92 (2.2 MB) is over the bound: the copy, then the ungated conv
  assert 64 * 92 * 92 * 4 > PAD_IN_PLACE_BYTES
  y = Tensor.ones(1, 64, 90, 90).conv2d(Tensor.ones(8, 64, 3, 3), padding=1)
  items, _, _ = create_schedule([y.uop])
  assert len(items) == 2, [it.ast.arg for it in items]

@pytest.mark.parametrize("stride", [1, 2])
def test_small_conv_through_tensor(stride):
  # the default device's renderer and optimizer, with both gradients (the weight's reads the padded input too)
  x = rng.standard_normal((2, 6, 9, 9)).astype(np.float32)
  w = rng.standard_normal((8, 6, 3, 3)).astype(np.float32)
  xt, wt = Tensor(x, requires_grad=True), Tensor(w, requires_grad=True)
  y = xt.conv2d(wt, stride=stride, padding=1)
  want = _conv_ref(x, w, stride, 1, 1)
  np.testing.assert_allclose(y.numpy(), want, rtol=1e-4, atol=1e-4)
  g = rng.standard_normal(want.shape).astype(np.float32)
  (y * Tensor(g)).sum().backward()
  xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
  o = want.shape[-1]
  dw, dxp = np.zeros(w.shape), np.zeros_like(xp)
  for i in range(3):
    for j in range(3):
      win = xp[:, :, i:i + stride * o:stride, j:j + stride * o:stride]     # (n, c, o, o)
      dw[:, :, i, j] = np.einsum("nkpq,ncpq->kc", g, win)
      dxp[:, :, i:i + stride * o:stride, j:j + stride * o:stride] += np.einsum("nkpq,kc->ncpq", g, w[:, :, i, j])
  assert wt.grad is not None and xt.grad is not None
  np.testing.assert_allclose(wt.grad.numpy(), dw, rtol=1e-4, atol=1e-3)
  np.testing.assert_allclose(xt.grad.numpy(), dxp[:, :, 1:-1, 1:-1], rtol=1e-4, atol=1e-3)
