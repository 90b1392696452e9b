"""A 3x3 conv's weight gradient dW[c, kh, kw, o] (o in vectors: the scheduler hands dY over as NHWC) takes its register rows
from the input channels c, not the kernel column kw: the packed dY panel of a block of o is then reused across every block of
c, and kw still adds accumulators as `third`. With kw (3) as the rows the tile had 2 vectors x 3 = 6 accumulators, no packed
panel and dY read a whole row of channels apart per reduce step (ResNet-18 train step, one Zen 3 thread, A/B in one process:
8x256x14x14 58 -> 22 ms, 8x512x7x7 51 -> 23 ms, 8x128x28x28 50 -> 23 ms). Results against numpy on AVX2 and AVX-512 renderers."""
from __future__ import annotations
from typing import Any
import numpy as np
import pytest
from core import Tensor
from core.codegen.opt import Kernel, OptOps
from core.codegen.opt.heuristic import hand_coded, MM_WINDOW
from core.codegen.opt.kernel import range_size
from core.ir.ops import AxisType
from core.schedule.kernelize import create_schedule
from core.tensor import conv
from opt_helpers import run_ast, host_renderer

rng = np.random.default_rng(7)

def _conv_weight_grad_np(x: np.ndarray, g: np.ndarray) -> np.ndarray:
  xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
  h, w = x.shape[2:]
  return np.stack([np.stack([np.einsum("nchw,nohw->oc", xp[:, :, i:i + h, j:j + w], g) for j in range(3)], -1) for i in range(3)], -2)

def _weight_grad(n: int, c: int, hw: int, simd_bytes: int) -> tuple[list, Any, np.ndarray]:
  """The schedule of a padded 3x3 conv's weight gradient over random x and dY, a host renderer of `simd_bytes` vectors that
  always packs the dY panel, and the numpy result."""
  xn, gn = rng.standard_normal((n, c, hw, hw), dtype=np.float32), rng.standard_normal((n, c, hw, hw), dtype=np.float32)
  x, w = Tensor(xn).realize(), Tensor(rng.standard_normal((c, c, 3, 3), dtype=np.float32), requires_grad=True).realize()
  dw = (x.conv2d(w, padding=1) * Tensor(gn).realize()).sum().gradient(w)[0]
  items, _, _ = create_schedule([dw.uop])
  rnd = host_renderer(simd_bytes)
  # dY this small (50 KiB) is read in place (heuristic._panel_in_place; same speed here); the panel of ResNet's sizes is what this pins
  rnd.panel_l2_share = 1 << 40
  return items, rnd, _conv_weight_grad_np(xn, gn)

@pytest.mark.parametrize("simd_bytes", [32, 64])
@pytest.mark.parametrize("n,c,hw", [(2, 32, 14), (2, 32, 7)])
def test_weight_grad_rows_are_channels(simd_bytes, n, c, hw, monkeypatch):
  monkeypatch.setattr(conv, "PARTIALS_PER_DY", 1)   # the one sum over images and pixels (2x32x14 would sum per image first)
  items, rnd, ref = _weight_grad(n, c, hw, simd_bytes)
  got = None
  for it in items:
    k = hand_coded(Kernel(it.ast, rnd))
    if k.of_type(AxisType.REDUCE):
      # the weight gradient: rows (the second UPCAST) on an axis longer than a kernel window, and the dY panel packed
      k0 = Kernel(it.ast, rnd)
      ups = [o for o in k.applied if o.op is OptOps.UPCAST]
      assert len(ups) >= 3 and (range_size(k0.axes[ups[2].axis]) or 0) > MM_WINDOW, k.applied
      assert any(o.op is OptOps.PACK for o in k.applied), k.applied
    got, _ = run_ast(it, k.ast, rnd)
  np.testing.assert_allclose(got.reshape(ref.shape), ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())

@pytest.mark.parametrize("simd_bytes,amts", [(32, [8, 6, 2]), (64, [16, 4, 4])])
def test_weight_grad_tile_fills_the_vector_registers(simd_bytes, amts, monkeypatch):
  """The weight gradient's register tile is a plain product's (MM_TILES_PLAIN): 16 vector registers (AVX2) hold 2 vectors x 6
  rows of c (12 accumulators, c padded to a multiple of 6), not MM_TILES' 2 x 4; 32 (AVX-512) keep 4 x 4."""
  monkeypatch.setattr(conv, "PARTIALS_PER_DY", 1)
  items, rnd, ref = _weight_grad(2, 64, 7, simd_bytes)
  got, tiles = None, []
  for it in items:
    k = hand_coded(Kernel(it.ast, rnd))
    if k.of_type(AxisType.REDUCE): tiles.append([o.amt for o in k.applied if o.op is OptOps.UPCAST][:3])
    got, _ = run_ast(it, k.ast, rnd)
  assert tiles == [amts], tiles
  np.testing.assert_allclose(got.reshape(ref.shape), ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())
