"""Depthwise convs (one input channel per group, MobileNet's 3x3s) read their padded input in place: no copy kernel of the
padded input before the conv, and the conv's input loads gated at the border. Results against numpy on AVX2-like (8 float32 lanes, 16 registers) and AVX-512-like (16 lanes, 32 registers)
renderers for odd channel counts, stride 2, padding, a channel multiplier, batch 1 and rows wider than a tile (held whole
in registers); and through Tensor.conv2d on the default device, forward and backward."""
from __future__ import annotations
import numpy as np
import pytest
from core import Device, Tensor
from core.helpers import prod
from core.ir.ops import Ops, AxisType
from core.ir.symbolic import split_sum
from core.codegen.opt.kernel import range_size
from core.schedule.kernelize import create_schedule
from core.codegen.opt import Kernel
from core.codegen.opt.heuristic import hand_coded
from core.codegen.program import program_uops
from opt_helpers import run_ast, host_renderer
from test_conv_channels import _conv_ref

rng = np.random.default_rng(61)

CASES = [  # (batch, channels, size, channel multiplier, kernel, stride, padding)
  (2, 32, 20, 1, 3, 1, 1),     # MobileNet's stride-1 3x3
  (2, 48, 16, 1, 3, 2, 1),     # its stride-2 3x3
  (1, 13, 11, 1, 3, 1, 1),     # batch 1, odd channels and size
  (1, 7, 15, 1, 3, 2, 1),      # stride 2 over an odd size
  (2, 6, 9, 2, 3, 1, 1),       # two output channels per input channel
  (1, 8, 12, 1, 5, 1, 2),      # a 5x5 window, padding 2
  (1, 4, 112, 1, 3, 1, 1),     # MobileNet's 112-wide rows: whole rows in registers
  (1, 6, 56, 1, 3, 2, 1),      # stride 2 to 28 columns, padded to whole vectors
  (1, 3, 30, 1, 3, 1, 1),      # 30 columns padded to 32
  (1, 4, 40, 1, 5, 1, 2),      # a 5x5 window over 40-wide rows
  (1, 5, 24, 1, 3, 1, 1),      # 24 columns: a vector and a half on 16 lanes (masked renderers pad the row to 32)
  (1, 9, 12, 1, 3, 1, 1),      # 12 columns: less than a vector (masked renderers pad the row to 16)
  (1, 5, 24, 1, 3, 2, 1),      # stride 2 to 12 columns
]

def _input_loads(uops: list) -> list:
  return [u for u in uops if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX and u.src[0].src[0].op is Ops.PARAM and
          u.src[0].src[0].arg == 1]

def check_conv_in_place(x: np.ndarray, w: np.ndarray, stride: int, pad: int, groups: int, simd_bytes: int) -> None:
  """The conv is one kernel (no copy of the padded input first), right against numpy on the renderer of that SIMD width, and
  reads the border through gates, not by wrapped or clamped indices."""
  y = Tensor(x).realize().conv2d(Tensor(w).realize(), stride=stride, padding=pad, groups=groups)
  items, _, _ = create_schedule([y.uop])
  assert len(items) == 1, [it.ast.arg for it in items]
  rnd = host_renderer(simd_bytes)
  k = hand_coded(Kernel(items[0].ast, rnd))
  got, spec = run_ast(items[0], k.ast, rnd)
  want = _conv_ref(x, w, stride, pad, groups)
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-4)
  loads = _input_loads(program_uops(spec))
  assert loads and any(len(u.src[0].src) > 2 for u in loads), k.applied

@pytest.mark.parametrize("simd_bytes", [32, 64])
@pytest.mark.parametrize("n, c, hw, mult, ks, stride, pad", CASES)
def test_depthwise_conv_reads_its_padded_input_in_place(simd_bytes, n, c, hw, mult, ks, stride, pad):
  x = rng.standard_normal((n, c, hw, hw)).astype(np.float32)
  w = rng.standard_normal((c * mult, 1, ks, ks)).astype(np.float32)
  check_conv_in_place(x, w, stride, pad, c, simd_bytes)

def test_grouped_conv_keeps_its_padded_copy():
  # groups with several input channels each stay on the copy where the input is large: their products per input element
  # repay it (a small one is read in place, test_conv_pad_in_place)
  y = Tensor.ones(1, 64, 90, 90).conv2d(Tensor.ones(64, 32, 3, 3), padding=1, groups=2)
  items, _, _ = create_schedule([y.uop])
  # the padded copy is two kernels (zeros, then the interior: kernelize.PAD_SPLIT_MIN), then the conv reads it
  assert len(items) == 3 and items[0].bufs[0] is items[1].bufs[0] is items[2].bufs[1], [it.ast.arg for it in items]

def check_conv_grads(x: np.ndarray, w: np.ndarray, stride: int, groups: int) -> None:
  """A 3x3 pad-1 conv through Tensor.conv2d on the default device, and the gradients of both inputs, against numpy: by the
  conv's linearity dW[o, c, i, j] = sum g[n, o] * xpad[n, c, windows shifted by (i, j)] within each group, dX by the adjoint."""
  xt, wt = Tensor(x, requires_grad=True), Tensor(w, requires_grad=True)
  y = xt.conv2d(wt, stride=stride, padding=1, groups=groups)
  want = _conv_ref(x, w, stride, 1, groups)
  np.testing.assert_allclose(y.numpy(), want, rtol=1e-4, atol=1e-4)
  g = rng.standard_normal(want.shape).astype(np.float32)
  (y * Tensor(g)).sum().backward()
  (n, c), oc, o = x.shape[:2], w.shape[0], want.shape[-1]
  gg, wg = g.reshape(n, groups, oc // groups, o, o), w.reshape(groups, oc // groups, c // groups, 3, 3)
  xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
  dw, dxp = np.zeros(w.shape), np.zeros_like(xp)
  for i in range(3):
    for j in range(3):
      sl = (slice(None), slice(None), slice(i, i + stride * o, stride), slice(j, j + stride * o, stride))
      win = xp[sl].reshape(n, groups, c // groups, o, o)
      dw[:, :, i, j] = np.einsum("ngkpq,ngcpq->gkc", gg, win).reshape(oc, c // groups)
      dxp[sl] += np.einsum("ngkpq,gkc->ngcpq", gg, wg[..., i, j]).reshape(n, c, o, o)
  assert wt.grad is not None and xt.grad is not None
  np.testing.assert_allclose(wt.grad.numpy(), dw, rtol=1e-4, atol=1e-3)
  np.testing.assert_allclose(xt.grad.numpy(), dxp[:, :, 1:-1, 1:-1], rtol=1e-4, atol=1e-3)

@pytest.mark.parametrize("stride, hw", [(1, 10), (2, 10), (1, 64), (2, 58)])
def test_depthwise_conv_through_tensor(stride, hw):
  # the default device's renderer and optimizer, and the gradients of both inputs (the weight's through the padded view); 64
  # and 58 wide rows are held whole in registers on 8- and 16-lane hosts
  check_conv_grads(rng.standard_normal((2, 12, hw, hw)).astype(np.float32), rng.standard_normal((12, 1, 3, 3)).astype(np.float32), stride, 12)

@pytest.mark.parametrize("masked", [True, False])
@pytest.mark.parametrize("simd_bytes", [32, 64])
@pytest.mark.parametrize("hw, stride", [(112, 1), (56, 2), (56, 1)])
def test_depthwise_conv_holds_whole_rows(simd_bytes, hw, stride, masked):
  # a row wider than the conv tile (112 and 56 columns, 28 at stride 2) is upcast whole and the window unrolled whole: every
  # input load's column gate is a constant, where a tile at a loop position builds and applies a lane mask per load. Also
  # on a renderer without masked vector loads (the C renderer): its stride-2 row of 28 is padded to 32 on 8 lanes as well
  # (it took 4-wide tiles along the row), right against numpy
  x, w = rng.standard_normal((8, 32, hw, hw)).astype(np.float32), rng.standard_normal((32, 1, 3, 3)).astype(np.float32)
  y = Tensor(x).realize().conv2d(Tensor(w).realize(), stride=stride, padding=1, groups=32)
  items, _, _ = create_schedule([y.uop])
  rnd = host_renderer(simd_bytes)
  if not masked: rnd.masked_vectors = False
  k = hand_coded(Kernel(items[0].ast, rnd))
  ow, lanes = hw // stride, simd_bytes // 4
  st = next(u for u in k.ast.toposort() if u.op is Ops.STORE and u.src[0].src[0].op is Ops.PARAM)   # the output, not a PACK copy
  parts = split_sum(st.src[0].src[1])
  assert parts is not None
  coef = {t: c for t, c in parts[0]}
  # no loop walks along the row: every loop or thread axis in the output index steps whole rows (or images, channels)
  loops = k.of_type(AxisType.LOOP) + k.of_type(AxisType.GLOBAL)
  assert all(coef.get(r, ow) % ow == 0 for r in loops), k.applied
  assert not k.of_type(AxisType.REDUCE) and len(k.of_type(AxisType.UNROLL)) == 2, k.applied
  # the accumulators fit the renderer's vector registers with a load and a weight beside them
  assert prod(range_size(a) or 1 for a in k.axes if a.arg[1] is AxisType.UPCAST) // lanes + 2 <= rnd.simd_regs, k.applied
  # values where the host has these vectors: 64-byte code built for an AVX2 host splits each 16-lane masked load in two, and
  # LLVM folds a half whose odd lanes are on (stride 2) into a plain 32-byte load under a vshufps, which also reads its
  # masked-off first lane: 4 bytes before the input, a fault where the input starts a mapping. No renderer of such a host
  # emits 16 lanes; its 8-lane code keeps vmaskmovps for every masked load
  if simd_bytes > Device[Device.DEFAULT].renderer.simd_width: pytest.skip(f"values need {simd_bytes}-byte vectors (the structure is checked)")
  got, _ = run_ast(items[0], k.ast, rnd)
  want = _conv_ref(x, w, stride, 1, 32)
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-4)

@pytest.mark.parametrize("simd_bytes", [32, 64])
@pytest.mark.parametrize("hw, stride", [(24, 1), (12, 1), (24, 2)])
def test_depthwise_conv_pads_short_rows_to_masked_vectors(simd_bytes, hw, stride):
  # rows that hold no whole vector (12 and 24 columns on 16 lanes, 12 on 8: a small MobileNet's) are padded to whole vectors
  # and held whole in registers on a renderer with masked vector loads and stores, where narrower vectors at a loop position
  # built a lane mask per load (mobilenet's 64x24x24 and 144x12x12 convs: 36 -> 15 and 45 -> 9 us on one Zen 5 thread)
  rnd = host_renderer(simd_bytes)
  if not rnd.masked_vectors: pytest.skip("a renderer with masked vector loads")
  x, w = rng.standard_normal((1, 6, hw, hw)).astype(np.float32), rng.standard_normal((6, 1, 3, 3)).astype(np.float32)
  y = Tensor(x).realize().conv2d(Tensor(w).realize(), stride=stride, padding=1, groups=6)
  items, _, _ = create_schedule([y.uop])
  k = hand_coded(Kernel(items[0].ast, rnd))
  ow, lanes = hw // stride, simd_bytes // 4
  upcast = prod(range_size(a) or 1 for a in k.axes if a.arg[1] is AxisType.UPCAST)
  rows = upcast // -(-ow // lanes * lanes)
  # whole rows of full vectors: the upcast axes are some rows' worth of padded columns, and no loop walks along the row
  assert upcast % lanes == 0 and rows >= 1 and upcast == rows * -(-ow // lanes) * lanes, k.applied
  st = next(u for u in k.ast.toposort() if u.op is Ops.STORE and u.src[0].src[0].op is Ops.PARAM)
  parts = split_sum(st.src[0].src[1])
  assert parts is not None
  assert all(c % ow == 0 for t, c in parts[0] if t in k.of_type(AxisType.LOOP) + k.of_type(AxisType.GLOBAL)), k.applied
  got, _ = run_ast(items[0], k.ast, rnd)
  want = _conv_ref(x, w, stride, 1, 6)
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-4)
