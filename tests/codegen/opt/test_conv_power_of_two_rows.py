"""Convs whose output rows are 8 or 16 wide (a stride-2 conv's input gradient by phases: 2x2, 1x2 and 2x1 convs of 8x8
outputs) on renderers whose vectors run along the output channels there: such a row holds no row block that is not a power
of two (one that is would take the expander's vector lanes from the channels), so the channel tile takes its rows from the
output rows instead, where _register_block ran half vectors along the row; a row of one whole vector keeps that tile unless
the channel tile holds more than its MM_MIN_ACC accumulators. Results against numpy on AVX2-like and AVX-512-like renderers."""
from __future__ import annotations
import numpy as np
import pytest
from core import Tensor
from core.ir.ops import Ops, AxisType
from core.schedule.kernelize import create_schedule
from core.codegen.opt import Kernel
from core.codegen.opt.heuristic import hand_coded, simd_lanes, MM_MIN_ACC
from core.codegen.opt.kernel import range_size
from core.helpers import prod
from core.codegen.program import program_uops
from opt_helpers import run_ast, host_renderer

rng = np.random.default_rng(8)

def _conv_ref(x: np.ndarray, w: np.ndarray) -> np.ndarray:
  """A stride-1 conv without padding, in float64."""
  win = np.lib.stride_tricks.sliding_window_view(x.astype(np.float64), w.shape[2:], axis=(2, 3))
  return np.einsum("nchwij,ocij->nohw", win, w.astype(np.float64))

def _run_last(y: Tensor, simd_bytes: int) -> tuple[np.ndarray, Kernel, bool]:
  """(the last kernel's output after running y's schedule on the renderer, that kernel optimized, whether it stores lane by
  lane: vectors along the output channels)."""
  items, _, _ = create_schedule([y.uop])
  rnd = host_renderer(simd_bytes)
  for it in items[:-1]: run_ast(it, hand_coded(Kernel(it.ast, rnd)).ast, rnd)
  k = hand_coded(Kernel(items[-1].ast, rnd))
  got, spec = run_ast(items[-1], k.ast, rnd)
  stores = [u for u in program_uops(spec) if u.op is Ops.STORE and u.src[0].op is Ops.INDEX and u.src[0].src[0].op is Ops.PARAM]
  return got, k, bool(stores) and all(u.src[1].dtype.count == 1 for u in stores)

@pytest.mark.parametrize("simd_bytes, kernel, width, channel", [
  (64, (2, 2), 8, True),     # half a vector of 16
  (64, (1, 2), 8, True),
  (64, (3, 3), 8, True),
  (64, (2, 2), 16, True),    # one vector, but 2 x 8 rows by the channels hold 16 accumulators, _register_block's tile 8
  (32, (2, 2), 4, True),     # half a vector of 8
  (32, (2, 2), 8, False),    # one whole vector of 8: AVX2's 16 registers hold 8 accumulators either way
  (32, (3, 3), 8, False),
])
def test_power_of_two_row_takes_the_channel_tile_by_rows(simd_bytes, kernel, width, channel):
  (kh, kw), rnd = kernel, host_renderer(simd_bytes)
  x = rng.standard_normal((2, 64, 8 + kh - 1, width + kw - 1)).astype(np.float32)
  w = rng.standard_normal((64, 64, kh, kw)).astype(np.float32)
  got, k, scattered = _run_last(Tensor(x).realize().conv2d(Tensor(w).realize()), simd_bytes)
  want = _conv_ref(x, w)
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-3)
  assert scattered == channel   # vectors along the channels
  # enough accumulators to hide the FMA latency: whole vectors (not part ones along the row) times the tile's rows
  assert prod(range_size(r) or 1 for r in k.of_type(AxisType.UPCAST)) >= MM_MIN_ACC * simd_lanes(rnd, 4)

@pytest.mark.parametrize("simd_bytes", [32, 64])
def test_strided_conv_input_grad_by_phases(simd_bytes):
  # 3x3/2 on 16x16: dY 8x8, its gradient four phase convs (2x2, 2x1, 1x2, 1x1) of 8x8 outputs, interleaved
  x = rng.standard_normal((2, 32, 16, 16)).astype(np.float32)
  w = rng.standard_normal((64, 32, 3, 3)).astype(np.float32)
  dy = rng.standard_normal((2, 64, 8, 8)).astype(np.float32)
  xt = Tensor(x, requires_grad=True).realize()
  xt.conv2d(Tensor(w).realize(), stride=2, padding=1).backward(Tensor(dy).realize())
  assert xt.grad is not None
  items, _, _ = create_schedule([xt.grad.uop])
  rnd = host_renderer(simd_bytes)
  for it in items: got, _ = run_ast(it, hand_coded(Kernel(it.ast, rnd)).ast, rnd)
  # the reference: scatter dY through the forward's windows
  want = np.zeros((2, 32, 18, 18))
  for i in range(3):
    for j in range(3):
      want[:, :, i:i + 16:2, j:j + 16:2] += np.einsum("nohw,oc->nchw", dy.astype(np.float64), w[:, :, i, j].astype(np.float64))
  np.testing.assert_allclose(got.reshape(2, 32, 16, 16), want[:, :, 1:17, 1:17], rtol=1e-4, atol=1e-3)
