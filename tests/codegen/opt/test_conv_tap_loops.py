"""A 3x3 conv's channel tile (output rows of an odd number of whole vectors, AVX2's 56 = 7 x 8, or of part vectors, 28 and 14)
on a renderer with 16 vector registers takes its kernel window as loops (heuristic.CHANNEL_TAP_LOOPS) where its input's copy is
read ungated: 4 channel vectors x 3 pixels, 12 accumulators, the row padded to whole pixel blocks (56 -> 57: the pad pixel's
loads gated, its outputs not stored), where the unrolled window held 2 x 4 (1 x 7 on 14). An input read in place through gates
keeps the unrolled window. Results against numpy (the padded row's last block included, with and without a fused bn and relu)
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

def _conv(n: int, c: int, hw: int, o: int, x: np.ndarray | None = None, w: np.ndarray | None = None) -> Tensor:
  """The conv of a computed input (twice x: padded by a copy kernel, its window loads ungated, whatever the device reads in
  place) over more than conv.PAD_IN_PLACE_BYTES."""
  x = np.zeros((n, c, hw, hw), np.float32) if x is None else x
  w = np.zeros((o, c, 3, 3), np.float32) if w is None else w
  return (Tensor(x).realize() * 2).conv2d(Tensor(w).realize(), padding=1)

def _applied(y: Tensor, simd_bytes: int) -> list:
  return list(hand_coded(Kernel(create_schedule([y.uop])[0][-1].ast, host_renderer(simd_bytes))).applied)

def _source(y: Tensor, simd_bytes: int) -> str:
  rnd = host_renderer(simd_bytes)   # a renderer of its own each time: programs are cached by renderer
  return program_source(get_program(hand_coded(Kernel(create_schedule([y.uop])[0][-1].ast, rnd)).ast, rnd, optimize=False))

# (images, input channels, row, output channels): the tile's channel vectors x pixels, whether the row is padded to it (to 57,
# 42, 30, 15), and the unrolled window's tile (upcasts after the 8 lanes) without the rule
TILES = [((2, 32, 56, 64), (4, 3), True, [2, 4]), ((2, 64, 40, 32), (4, 3), True, [2, 4]), ((4, 64, 24, 32), (4, 3), False, [2, 4]),
         ((4, 64, 28, 32), (4, 3), True, [2, 4]), ((8, 128, 14, 32), (4, 3), True, [7])]
IDS = ["56", "40", "24", "28", "14"]

@pytest.mark.parametrize("shape,tile,padded,old", TILES, ids=IDS)
def test_avx2_rows_take_the_tap_loop_tile(shape, tile, padded, old, monkeypatch):
  if not host_renderer(32).odd_row_channel_tile: pytest.skip("the renderer keeps the row tile on odd rows")
  applied = _applied(_conv(*shape), 32)
  assert [a.amt for a in applied if a.op is OptOps.UPCAST] == [8, *tile], applied
  assert [a.amt for a in applied if a.op is OptOps.PADTO] == ([3] if padded else []), applied
  assert not any(a.op is OptOps.UNROLL for a in applied), applied   # the window stays loops
  monkeypatch.setattr(heuristic, "CHANNEL_TAP_LOOPS", False)
  before = _applied(_conv(*shape), 32)
  assert [a.amt for a in before if a.op is OptOps.UPCAST] == [8, *old] and any(a.op is OptOps.UNROLL for a in before), before

@pytest.mark.parametrize("in_place", [True, False], ids=["input read in place", "16 output channels"])
def test_others_keep_the_unrolled_window(in_place):
  # a small input, padded through gated loads in the conv (conv.PAD_IN_PLACE_BYTES): the taps as loops spilled there; 16
  # output channels hold no 4 vectors (2 x 5 as loops gained too little)
  if not host_renderer(32).odd_row_channel_tile: pytest.skip("the renderer keeps the row tile on odd rows")
  y = Tensor(np.zeros((2, 8, 56, 56), np.float32)).realize().conv2d(Tensor(np.zeros((64, 8, 3, 3), np.float32)).realize(), padding=1) \
    if in_place else _conv(2, 64, 40, 16)
  applied = _applied(y, 32)
  assert [a.amt for a in applied if a.op is OptOps.UPCAST] == [8, 2, 4] and any(a.op is OptOps.UNROLL for a in applied), applied

@pytest.mark.parametrize("shape,tile,padded,old", TILES, ids=IDS)
def test_tap_loop_tile_gives_numpys_results(shape, tile, padded, old):
  n, c, hw, o = shape
  rng = np.random.default_rng(hw + o)
  x, w = rng.standard_normal((n, c, hw, hw), dtype=np.float32), rng.standard_normal((o, c, 3, 3), dtype=np.float32)
  s, b = rng.standard_normal(o, dtype=np.float32), rng.standard_normal(o, dtype=np.float32)
  ref = _ref(2 * x, w)
  conv = _conv(n, c, hw, o, x, w)
  fused = (conv * Tensor(s).reshape(1, o, 1, 1) + Tensor(b).reshape(1, o, 1, 1)).relu()
  rnd = host_renderer(32)
  for y, want in ((conv, ref), (fused, np.maximum(ref * s.reshape(1, o, 1, 1) + b.reshape(1, o, 1, 1), 0))):
    items = create_schedule([y.uop])[0]
    for it in items[:-1]: run_ast(it, hand_coded(Kernel(it.ast, rnd)).ast, rnd)   # the padded input's copy
    got, _ = run_ast(items[-1], hand_coded(Kernel(items[-1].ast, rnd)).ast, rnd)
    # every output, the last pixel block's (the pad's neighbours) too
    np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())

@pytest.mark.parametrize("simd_bytes,shape", [(64, (2, 64, 56, 64)), (64, (2, 64, 48, 64)), (32, (2, 64, 48, 64))],
                         ids=["AVX-512 56", "AVX-512 48", "AVX2 48"])
def test_other_rows_and_renderers_render_as_without_the_rule(simd_bytes, shape, monkeypatch):
  new = _source(_conv(*shape), simd_bytes)
  monkeypatch.setattr(heuristic, "CHANNEL_TAP_LOOPS", False)
  assert _source(_conv(*shape), simd_bytes) == new
