"""A whole-row depthwise conv tile holds the most rows of DW_TILE_ROWS that divide the output's rows and fit: 6 or 3 where 4 does
not (mobilenet's 12- and 24-row maps), since each input row loaded serves up to 3 output rows of the tile. Results against
numpy on AVX2-like and AVX-512-like renderers, and the rows the tile holds. Rows longer than a vector and a lane take that tile
padded to masked vectors (18 on 16 lanes -> 32), where other tiles ran most of the row lane by lane."""
from __future__ import annotations
import numpy as np
import pytest
from core import Tensor
from core.schedule.kernelize import create_schedule
from core.codegen.opt import Kernel
from core.codegen.opt.heuristic import hand_coded
from opt_helpers import run_ast, host_renderer, register_tile

rng = np.random.default_rng(24)

def _dw_ref(x: np.ndarray, w: np.ndarray, stride: int) -> np.ndarray:
  """3x3 depthwise conv, padding 1, in float64."""
  xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
  win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))[:, :, ::stride, ::stride]
  return np.einsum("nchwij,cij->nchw", win, w[:, 0].astype(np.float64))

def _dw(n: int, c: int, hw: int, stride: int, simd_bytes: int) -> tuple[np.ndarray, np.ndarray, tuple]:
  """relu(dw3x3(x, w) + b) on the renderer: (its output, numpy's, the conv kernel's applied opts on a renderer with masked
  vectors, which decide its tile: rows past a vector pad to them)."""
  x = rng.standard_normal((n, c, hw, hw)).astype(np.float32)
  w = rng.standard_normal((c, 1, 3, 3)).astype(np.float32)
  b = rng.standard_normal(c).astype(np.float32)
  want = np.maximum(_dw_ref(x, w, stride) + b[:, None, None], 0)
  items, _, _ = create_schedule([Tensor(x).realize().conv2d(Tensor(w).realize(), Tensor(b).realize(), groups=c, padding=1,
                                                            stride=stride).relu().uop])
  rnd = host_renderer(simd_bytes)
  for it in items[:-1]: run_ast(it, hand_coded(Kernel(it.ast, rnd)).ast, rnd)   # the padded input's copy, if any
  got, _ = run_ast(items[-1], hand_coded(Kernel(items[-1].ast, rnd)).ast, rnd)
  return got.reshape(want.shape), want, hand_coded(Kernel(items[-1].ast, host_renderer(simd_bytes, masked=True))).applied

@pytest.mark.parametrize("simd_bytes", [32, 64])
@pytest.mark.parametrize("n, c, hw, stride", [
  (1, 64, 24, 1),    # mobilenet's 24x24 map: 3 rows of 2 vectors on AVX-512
  (1, 144, 12, 1),   # its 12x12 maps: 6 rows of one vector
  (1, 64, 24, 2),
  (2, 8, 12, 1),
  (1, 16, 6, 1),     # the whole map in one tile on AVX2
  (1, 32, 18, 1),
  (1, 8, 28, 1),     # 28 rows: 4 or 2, as before
  (1, 8, 22, 1),     # 22 on 16 lanes: one vector and a masked one
  (1, 8, 34, 2),
  (1, 8, 10, 1),     # 10 on 8 lanes
  (1, 8, 9, 1),      # a vector and one lane keeps its tile
])
def test_depthwise_values(n, c, hw, stride, simd_bytes):
  got, want, _ = _dw(n, c, hw, stride, simd_bytes)
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)

@pytest.mark.parametrize("simd_bytes, c, hw, stride, tile", [
  (64, 64, 24, 1, (16, 2, 3)),    # 4 rows x 2 vectors pass the register limit: 3 rows (was 2)
  (64, 144, 12, 1, (16, 1, 6)),   # was 4
  (64, 64, 24, 2, (16, 1, 6)),    # was 4
  (32, 144, 12, 1, (8, 2, 6)),    # was 4
])
def test_depthwise_tile_holds_more_rows(simd_bytes, c, hw, stride, tile):
  got, want, applied = _dw(1, c, hw, stride, simd_bytes)
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
  assert register_tile(list(applied)) == tile, applied

@pytest.mark.parametrize("simd_bytes, hw, tile", [
  (64, 18, (16, 2, 3)),   # 18 wide: a vector and a masked one (was no vector along the row)
  (64, 34, (16, 3, 2)),
  (32, 10, (8, 2, 2)),
])
def test_depthwise_row_past_a_vector_takes_masked_vectors(simd_bytes, hw, tile):
  got, want, applied = _dw(1, 8, hw, 1, simd_bytes)
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
  assert register_tile(list(applied)) == tile, applied
