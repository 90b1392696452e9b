"""A regular conv whose zero-padded input is small (core.tensor.conv.PAD_IN_PLACE_BYTES: the ONNX ResNet-style model's 3x3s)
reads it in place through gated loads, with no copy kernel first; a large one keeps its copy. Results against numpy on
AVX2-like (8 float32 lanes) and AVX-512-like (16 lanes) renderers, and through Tensor.conv2d on the default device with both
gradients."""
from __future__ import annotations
import numpy as np
import pytest
from core import Tensor
from core.schedule.kernelize import create_schedule
from core.tensor.conv import PAD_IN_PLACE_BYTES
from test_conv_depthwise import check_conv_grads, check_conv_in_place

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
  check_conv_in_place(x, w, stride, pad, groups, simd_bytes)

def test_large_conv_keeps_its_padded_copy():
  # 64 channels of 90x90 padded to 92x92 (2.2 MB) is over the bound: the copy, then the ungated conv
  assert 64 * 92 * 92 * 4 > PAD_IN_PLACE_BYTES
  y = Tensor.ones(1, 64, 90, 90).conv2d(Tensor.ones(8, 64, 3, 3), padding=1)
  items, _, _ = create_schedule([y.uop])
  # the padded copy is two kernels (zeros, then the interior: kernelize.PAD_SPLIT_MIN), then the conv reads it
  assert len(items) == 3 and items[0].bufs[0] is items[1].bufs[0] is items[2].bufs[1], [it.ast.arg for it in items]

@pytest.mark.parametrize("stride", [1, 2])
def test_small_conv_through_tensor(stride):
  # the default device's renderer and optimizer, with both gradients (the weight's reads the padded input too)
  check_conv_grads(rng.standard_normal((2, 6, 9, 9)).astype(np.float32), rng.standard_normal((8, 6, 3, 3)).astype(np.float32), stride, 1)
