"""A transposing copy whose output rows lie a multiple of the L1 way (4 KiB) apart (4096^2, 2048^2: every tile's output lines in
one L1 set) runs fewer tiles innermost along the input's rows where its tile reads whole input lines (16 floats, AVX-512): about
copy.CONFLICT_ROWS output rows a burst, not MM_ROW_TILE tiles (one Zen 5 thread, 4096^2: 25 -> 32 GB/s); AVX2's tiles read whole
lines too (16 floats in two registers). Rows whose lines spread over the sets, and half-line tiles, keep MM_ROW_TILE. Tile counts
on an AVX2 and an AVX-512 renderer; results against numpy. The threads of such a transpose split the output's columns (each reads input rows of its own), not its rows."""
from __future__ import annotations
import numpy as np
import pytest
from core.codegen.opt import Kernel, OptOps, heuristic
from core.codegen.opt.copy import tiles_along_rows, CONFLICT_ROWS
from core.codegen.opt.heuristic import hand_coded, MM_ROW_TILE
from core.codegen.opt.expander import strided_offset
from core.ir.ops import Ops, AxisType
from opt_helpers import kernel_of, run_ast, host_renderer

rng = np.random.default_rng(29)

def _transpose(a): return a.T.contiguous() if hasattr(a, "uop") else a.T

@pytest.mark.parametrize("row_bytes, lanes, lane_bytes, want", [
  (16384, 16, 4, CONFLICT_ROWS // 16),   # 4096 floats: all 16 rows' lines in one set
  (8192, 16, 4, CONFLICT_ROWS // 16),
  (16384, 32, 2, CONFLICT_ROWS // 32),   # 2-byte elements, 32 lanes: still a line
  (17408, 16, 4, CONFLICT_ROWS // 16),   # 17 KiB apart: 4 sets for 16 rows
  (16384, 8, 4, MM_ROW_TILE),            # half-line tiles
  (16640, 16, 4, MM_ROW_TILE),           # 16 KiB + 4 lines: 16 sets
  (4160, 16, 4, MM_ROW_TILE),
  (256, 16, 4, MM_ROW_TILE),             # NCHW -> NHWC's 64 channels: 4 lines a row
])
def test_tiles_along_rows(row_bytes, lanes, lane_bytes, want):
  assert tiles_along_rows(row_bytes, lanes, lane_bytes, MM_ROW_TILE) == want

def _tiles(k: Kernel) -> list[int]: return [o.amt for o in k.applied if o.op is OptOps.TILE]

def _check_tiles(shape: tuple[int, int], simd_bytes: int, tiles: list[int], monkeypatch):
  # the tiles along the input's rows, where AVX2's long rows would run in strips instead (test_transpose_strips)
  monkeypatch.setattr(heuristic, "STRIP_TILES", 0)
  item, want = kernel_of(_transpose, shape, rng=rng)
  rnd = host_renderer(simd_bytes)
  k = hand_coded(Kernel(item.ast, rnd))
  assert _tiles(k) == tiles, k.applied
  got, _ = run_ast(item, k.ast, rnd)
  np.testing.assert_array_equal(got.reshape(want.shape), want)

@pytest.mark.parametrize("simd_bytes", [32, 64])
@pytest.mark.parametrize("shape", [(2048, 2048), (1024, 4096), (512, 4096)])
def test_power_of_two_rows_take_fewer_tiles(simd_bytes, shape, monkeypatch):
  _check_tiles(shape, simd_bytes, [CONFLICT_ROWS // 16], monkeypatch)

@pytest.mark.parametrize("simd_bytes", [32, 64])
def test_rows_over_many_sets_keep_the_row_tile(simd_bytes, monkeypatch):
  # input rows of 1040 floats: the output's rows 65 lines apart, one set further each
  _check_tiles((1040, 4096), simd_bytes, [MM_ROW_TILE], monkeypatch)

@pytest.mark.parametrize("simd_bytes", [32, 64])
@pytest.mark.parametrize("shape", [(2048, 2048), (1056, 4096), (4096, 1024)])
def test_threads_split_the_output_columns(simd_bytes, shape):
  item, want = kernel_of(_transpose, shape, rng=rng)
  rnd = host_renderer(simd_bytes)
  k = hand_coded(Kernel(item.ast, rnd))
  (g,) = k.of_type(AxisType.GLOBAL)
  st = next(u for u in k.ast.toposort() if u.op is Ops.STORE)
  # a block further along the output's columns: a step within one output row (of shape[0] elements), not a block of rows
  assert (step := strided_offset(st.src[0].src[1], g)) is not None and 0 < step[1] < shape[0], k.applied
  got, _ = run_ast(item, k.ast, rnd)
  np.testing.assert_array_equal(got.reshape(want.shape), want)
