"""A transposing copy whose output rows share L1 sets (rows a multiple of 4 KiB apart) and whose buffers fit the cache (together under
the renderer's `stream_min_bytes`: plain stores) runs no tiles along the input's rows: each tile column's output lines would evict
each other in L1 (one Zen 5 thread, 512^2: 28 -> 73 GB/s, 1024^2: 18.5 -> 38); half-line tiles (AVX2) run 2, the pair reading
whole input lines, where they kept 16. Streamed kernels, rows over many sets, quarter-line tiles (16-byte vectors) and renderers
that give no bound keep their tiles. Opts on explicit 16-, 32- and 64-byte renderers; results against numpy."""
from __future__ import annotations
import numpy as np
import pytest
from core.codegen.opt import Kernel, OptOps
from core.codegen.opt.copy import tiles_along_rows, stores_cached, CONFLICT_ROWS
from core.codegen.opt.heuristic import hand_coded, MM_ROW_TILE
from opt_helpers import kernel_of, run_ast, host_renderer

rng = np.random.default_rng(31)

def _transpose(a): return a.T.contiguous() if hasattr(a, "uop") else a.T

@pytest.mark.parametrize("row_bytes, lanes, lane_bytes, want", [
  (16384, 16, 4, 1), (2048, 16, 4, 1), (16384, 32, 2, 1),   # rows' lines in 1-2 sets
  (16640, 16, 4, MM_ROW_TILE), (256, 16, 4, MM_ROW_TILE),     # over 16 sets
  (3072, 16, 4, CONFLICT_ROWS // 16),                        # 4 sets: as streamed
  (16384, 8, 4, 2), (2048, 8, 4, 2), (16384, 16, 2, 2),     # half-line tiles (AVX2): a pair reads whole lines
  (16384, 4, 4, MM_ROW_TILE),                                # quarter lines (16-byte vectors): kept
  (3072, 8, 4, MM_ROW_TILE), (256, 8, 4, MM_ROW_TILE),       # half lines over 4 sets, or as many as rows: as streamed
])
def test_cached_tiles_along_rows(row_bytes, lanes, lane_bytes, want):
  assert tiles_along_rows(row_bytes, lanes, lane_bytes, MM_ROW_TILE, cached=True) == want

def test_streamed_tiles_along_rows_unchanged():
  assert tiles_along_rows(16384, 16, 4, MM_ROW_TILE) == tiles_along_rows(16384, 16, 4, MM_ROW_TILE, cached=False) == CONFLICT_ROWS // 16
  assert tiles_along_rows(16384, 8, 4, MM_ROW_TILE) == tiles_along_rows(2048, 4, 4, MM_ROW_TILE) == MM_ROW_TILE

def _opts(shape: tuple[int, int], simd_bytes: int, bound: int) -> tuple[Kernel, list]:
  item, want = kernel_of(_transpose, shape, rng=rng)
  rnd = host_renderer(simd_bytes)
  rnd.stream_min_bytes = bound
  k = hand_coded(Kernel(item.ast, rnd))
  got, _ = run_ast(item, k.ast, rnd)
  np.testing.assert_array_equal(got.reshape(want.shape), want)
  return k, [o.op for o in k.applied]

@pytest.mark.parametrize("shape", [(512, 512), (512, 528), (1024, 1024), (1024, 2048)])
def test_cached_transpose_runs_no_tiles_along_rows(shape):
  # 4 MiB and under: below a 28 MiB bound, plainly stored; the register tile's two upcasts and nothing reordering its loops
  k, ops = _opts(shape, 64, 28 << 20)
  assert stores_cached(k) and ops.count(OptOps.UPCAST) == 2 and OptOps.TILE not in ops and OptOps.SWAP not in ops, k.applied

@pytest.mark.parametrize("shape", [(512, 512), (512, 528), (1024, 1024), (1024, 2048), (3072, 768)])
def test_cached_half_line_tiles_read_whole_lines(shape):
  # AVX2 tiles of half input lines: 2 along the input's rows, each line read whole by the pair, where 16 ran (AVX2 code on one
  # Zen 5 thread, 1024^2: 20 -> 39 GB/s)
  k, ops = _opts(shape, 32, 28 << 20)
  assert stores_cached(k) and [o.amt for o in k.applied if o.op is OptOps.TILE] == [2] and OptOps.SWAP not in ops, k.applied

@pytest.mark.parametrize("shape, bound, simd_bytes, tiles", [
  ((1024, 1024), 4 << 20, 64, CONFLICT_ROWS // 16),   # 8 MiB of buffers over a 4 MiB bound: streamed
  ((1024, 1024), 0, 64, CONFLICT_ROWS // 16),         # no bound known
  ((1024, 1024), 4 << 20, 32, MM_ROW_TILE),           # AVX2 streamed: half-line tiles keep theirs
  ((768, 2304), 28 << 20, 32, MM_ROW_TILE),           # AVX2, output rows 3 KiB apart: lines in 4 sets
  ((1024, 1024), 28 << 20, 16, MM_ROW_TILE),          # 16-byte vectors: quarter-line tiles
  ((1040, 1024), 28 << 20, 64, 0),                    # output rows 1040 floats apart: lines over 16 sets (a SWAP: 65 tiles)
])
def test_others_keep_their_tiles(shape, bound, simd_bytes, tiles):
  k, ops = _opts(shape, simd_bytes, bound)
  assert [o.amt for o in k.applied if o.op is OptOps.TILE] == ([tiles] if tiles else []) and (tiles or OptOps.SWAP in ops), k.applied
