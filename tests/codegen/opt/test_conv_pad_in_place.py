"""A regular conv whose zero-padded input is small (core.tensor.conv.PAD_IN_PLACE_BYTES: the ONNX ResNet-style model's 3x3s)
reads it in place through gated loads, with no copy kernel first; a large one keeps its copy. Results against numpy on
AVX2-like (8 float32 lanes) and AVX-512-like (16 lanes) renderers, and through Tensor.conv2d on the default device with both
gradients."""
from __future__ import annotations
import numpy as np
import pytest
from core import Device, Tensor
from core.codegen.opt import Kernel
from core.codegen.opt.heuristic import hand_coded
from core.codegen.opt.kernel import range_size
from core.ir.ops import AxisType
from core.schedule.kernelize import create_schedule
import core.tensor.conv as conv
from core.tensor.conv import PAD_IN_PLACE_BYTES
from opt_helpers import host_renderer, run_ast
from test_conv_channels import _conv_ref
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

@pytest.fixture
def large_in_place(monkeypatch):
  """Sets whether the default device's renderer reads large convs in place (Renderer.large_conv_in_place, on a thread pool):
  the graph's choice, with no conv plan replayed from a test that built the same conv with it set otherwise."""
  monkeypatch.setattr(conv, "replayed", lambda key, inputs, build: build())
  def set_(on: bool) -> None:
    rnd = Device[Device.DEFAULT].renderer
    monkeypatch.setattr(rnd, "large_conv_in_place", on, raising=False)
    if on and not rnd.threads: monkeypatch.setattr(rnd, "threads", 2)
  return set_

def _realized(*shape: int) -> Tensor: return Tensor(np.ones(shape, np.float32)).realize()

def test_large_conv_keeps_its_padded_copy(large_in_place):
  # 64 channels of 90x90 padded to 92x92 (2.2 MB) is over the bound: the copy, then the ungated conv
  assert 64 * 92 * 92 * 4 > PAD_IN_PLACE_BYTES
  large_in_place(False)
  y = Tensor.ones(1, 64, 90, 90).conv2d(Tensor.ones(8, 64, 3, 3), padding=1)
  items, _, _ = create_schedule([y.uop])
  # the padded copy is two kernels (zeros, then the interior: kernelize.PAD_SPLIT_MIN), then the conv reads it
  assert len(items) == 3 and items[0].bufs[0] is items[1].bufs[0] is items[2].bufs[1], [it.ast.arg for it in items]

@pytest.mark.parametrize("stride", [1, 2])
def test_small_conv_through_tensor(stride):
  # the default device's renderer and optimizer, with both gradients (the weight's reads the padded input too)
  check_conv_grads(rng.standard_normal((2, 6, 9, 9)).astype(np.float32), rng.standard_normal((8, 6, 3, 3)).astype(np.float32), stride, 1)

@pytest.mark.parametrize("groups,dilation", [(1, 1), (2, 1), (1, 2)])
def test_large_conv_reads_in_place_where_the_renderer_does(large_in_place, groups, dilation):
  # Renderer.large_conv_in_place: an ungrouped undilated conv of any size reads its padded input through gates, one kernel
  large_in_place(True)
  y = _realized(1, 64, 92, 92).conv2d(Tensor.ones(64, 64 // groups, 3, 3), padding=dilation, groups=groups, dilation=dilation)
  items, _, _ = create_schedule([y.uop])
  assert len(items) == (1 if groups == dilation == 1 else 3), [it.ast.arg for it in items]

@pytest.mark.parametrize("simd_bytes,cout,in_place", [(64, 32, True), (64, 64, True), (64, 16, False), (64, 24, False), (64, 48, False),
                                                      (32, 16, True), (32, 48, True), (32, 24, False)])
def test_large_conv_in_place_only_with_whole_channel_tiles(large_in_place, monkeypatch, simd_bytes, cout, in_place):
  # output channels that fill no whole channel tile (two vectors) take tiles along the gated rows in place: they keep the copy
  large_in_place(True)
  monkeypatch.setattr(Device[Device.DEFAULT].renderer, "simd_width", simd_bytes, raising=False)
  y = _realized(1, 64, 92, 92).conv2d(Tensor.ones(cout, 64, 3, 3), padding=1)
  items, _, _ = create_schedule([y.uop])
  assert len(items) == (1 if in_place else 3), [it.ast.arg for it in items]

def test_large_conv_of_a_computed_input_keeps_its_copy(large_in_place):
  # an input computed in the same graph (ResNet's relu(batchnorm)) runs its producer once, fused into the padded copy; in place
  # it would be computed at each of the window's gated loads (ResNet-18 inference, b8, 2 threads: 141-143 ms -> 152-155)
  large_in_place(True)
  y = _realized(1, 64, 92, 92).relu().conv2d(Tensor.ones(64, 64, 3, 3), padding=1)
  items, _, _ = create_schedule([y.uop])
  assert len(items) == 3, [it.ast.arg for it in items]

def _image_blocks_kernel(l2_bytes: int, threads: int) -> tuple[Kernel, np.ndarray, np.ndarray, object]:
  # 4 images of 16 x 56 x 56 (200 KB each) -> 64 channels: AVX-512's channel tile is 2 vectors of 16, so 2 channel blocks
  x = rng.standard_normal((4, 16, 56, 56)).astype(np.float32)
  w = rng.standard_normal((64, 16, 3, 3)).astype(np.float32)
  y = Tensor(x).realize().conv2d(Tensor(w).realize(), padding=1)
  items, _, _ = create_schedule([y.uop])
  assert len(items) == 1, [it.ast.arg for it in items]
  rnd = host_renderer(64)
  rnd.large_conv_in_place, rnd.l2_bytes, rnd.threads = True, l2_bytes, threads
  return hand_coded(Kernel(items[0].ast, rnd)), x, w, (items[0], rnd)

@pytest.mark.parametrize("threads", [0, 2])
def test_large_conv_in_place_takes_image_blocks(large_in_place, threads):
  # an input over the L2 whose images fit it, on a thread pool: the images outside the channel blocks, each image's input read by
  # both while in the L2, and the thread blocks images; without one the channel blocks stay outermost. Values against numpy
  large_in_place(True)
  k, x, w, (item, rnd) = _image_blocks_kernel(256 << 10, threads)
  if threads: assert [range_size(r) for r in k.of_type(AxisType.GLOBAL)] == [4], k.applied
  else: assert [range_size(r) for r in k.of_type(AxisType.LOOP)][:2] == [2, 4], k.applied
  got, _ = run_ast(item, k.ast, rnd)
  want = _conv_ref(x, w, 1, 1, 1)
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-4)

def test_large_conv_in_the_l2_keeps_channel_blocks_outermost(large_in_place):
  # the whole input (800 KB) within the L2: every channel block reads it from there, the blocks stay outermost (the thread loop)
  large_in_place(True)
  k, *_ = _image_blocks_kernel(1 << 20, 2)
  assert [range_size(r) for r in k.of_type(AxisType.GLOBAL)] == [2], k.applied

def test_a_device_change_drops_the_conv_plans(monkeypatch):
  # the conv's plan (keyed by device name) holds its renderer's choice: after Device.reset() the name's new renderer decides
  def kernels(on: bool) -> int:
    rnd = Device[Device.DEFAULT].renderer
    monkeypatch.setattr(rnd, "large_conv_in_place", on, raising=False)
    if not rnd.threads: monkeypatch.setattr(rnd, "threads", 2)
    y = Tensor.ones(1, 64, 92, 92).contiguous().realize().conv2d(Tensor.ones(64, 64, 3, 3).contiguous().realize(), padding=1)
    return len(create_schedule([y.uop])[0])
  assert kernels(True) == 1
  Device.reset()
  assert kernels(False) == 3   # the padded copy's two kernels, then the conv
