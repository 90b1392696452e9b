"""A 3x3 conv whose output rows hold an odd number of whole vectors (AVX2's 56 = 7 x 8) on a renderer with 16 vector registers
takes the channel tile with its kernel window left as loops (heuristic.CHANNEL_TAP_LOOPS): 4 channel vectors x 3 pixels, 12
accumulators, the row padded to whole pixel blocks (56 -> 57: the pad pixel's loads gated, its outputs not stored), where the
unrolled window held 2 x 4. Results against numpy (the padded row's last block included, with and without a fused bn and relu)
on an AVX2-like renderer; AVX-512's tiles render as without the rule."""
from __future__ import annotations
import numpy as np
import pytest
from core import Tensor
from core.schedule.kernelize import create_schedule
from core.codegen.opt import Kernel, OptOps
from core.codegen.opt.heuristic import hand_coded
from core.codegen.program import get_program, program_source
import core.codegen.opt.heuristic as heuristic
from opt_helpers import run_ast, host_renderer

def _ref(x: np.ndarray, w: np.ndarray) -> np.ndarray:
  xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
  win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))
  return np.einsum("nchwij,ocij->nohw", win, w.astype(np.float64))

def _conv(n: int, c: int, hw: int, o: int) -> Tensor:
  return Tensor(np.zeros((n, c, hw, hw), np.float32)).conv2d(Tensor(np.zeros((o, c, 3, 3), np.float32)), padding=1)

def _applied(y: Tensor, simd_bytes: int) -> list:
  return list(hand_coded(Kernel(create_schedule([y.uop])[0][-1].ast, host_renderer(simd_bytes))).applied)

def _source(y: Tensor, simd_bytes: int) -> str:
  rnd = host_renderer(simd_bytes)   # a renderer of its own each time: programs are cached by renderer
  return program_source(get_program(hand_coded(Kernel(create_schedule([y.uop])[0][-1].ast, rnd)).ast, rnd, optimize=False))

# (output channels, row): the tile's channel vectors x pixels and the padded row, or None where the row needs none
TILES = [(64, 56, (4, 3), 57), (32, 40, (4, 3), 42), (32, 24, (4, 3), None), (16, 40, (2, 5), None)]

@pytest.mark.parametrize("o,hw,tile,padded", TILES, ids=["56", "40", "24", "16 channels"])
def test_avx2_odd_rows_take_the_tap_loop_tile(o, hw, tile, padded, monkeypatch):
  if not host_renderer(32).odd_row_channel_tile: pytest.skip("the renderer keeps the row tile on odd rows")
  applied = _applied(_conv(2, 8, hw, o), 32)
  assert [a.amt for a in applied if a.op is OptOps.UPCAST] == [8, *tile], applied
  assert [a.amt for a in applied if a.op is OptOps.PADTO] == ([] if padded is None else [3]), applied
  assert not any(a.op is OptOps.UNROLL for a in applied), applied   # the window stays loops
  monkeypatch.setattr(heuristic, "CHANNEL_TAP_LOOPS", False)
  old = _applied(_conv(2, 8, hw, o), 32)
  assert [a.amt for a in old if a.op is OptOps.UPCAST] == [8, 2, 4] and any(a.op is OptOps.UNROLL for a in old), old

@pytest.mark.parametrize("o,hw,tile,padded", TILES, ids=["56", "40", "24", "16 channels"])
def test_tap_loop_tile_gives_numpys_results(o, hw, tile, padded):
  rng = np.random.default_rng(hw + o)
  n, c = 2, 8
  x, w = rng.standard_normal((n, c, hw, hw), dtype=np.float32), rng.standard_normal((o, c, 3, 3), dtype=np.float32)
  s, b = rng.standard_normal(o, dtype=np.float32), rng.standard_normal(o, dtype=np.float32)
  ref = _ref(x, w)
  conv = Tensor(x).realize().conv2d(Tensor(w).realize(), padding=1)
  fused = (conv * Tensor(s).reshape(1, o, 1, 1) + Tensor(b).reshape(1, o, 1, 1)).relu()
  rnd = host_renderer(32)
  for y, want in ((conv, ref), (fused, np.maximum(ref * s.reshape(1, o, 1, 1) + b.reshape(1, o, 1, 1), 0))):
    items = create_schedule([y.uop])[0]
    for it in items[:-1]: run_ast(it, hand_coded(Kernel(it.ast, rnd)).ast, rnd)   # the padded input's copy, if any
    got, _ = run_ast(items[-1], hand_coded(Kernel(items[-1].ast, rnd)).ast, rnd)
    # every output, the last pixel block's (the pad's neighbours) too
    np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())

@pytest.mark.parametrize("simd_bytes,shape", [(64, (2, 64, 56, 64)), (64, (2, 64, 48, 64)), (32, (2, 64, 48, 64))],
                         ids=["AVX-512 56", "AVX-512 48", "AVX2 48"])
def test_other_rows_and_renderers_render_as_without_the_rule(simd_bytes, shape, monkeypatch):
  new = _source(_conv(*shape), simd_bytes)
  monkeypatch.setattr(heuristic, "CHANNEL_TAP_LOOPS", False)
  assert _source(_conv(*shape), simd_bytes) == new
