"""A transposing copy whose output rows share L1 sets (rows a multiple of 4 KiB apart) and whose buffers fit the cache (together under
the renderer's `stream_min_bytes`: plain stores) runs no tiles along the input's rows: each tile column's output lines would evict
each other in L1 (one Zen 5 thread, 512^2: 28 -> 73 GB/s, 1024^2: 18.5 -> 38); on AVX2 and 16-byte renderers too, whose tiles
read whole input lines as AVX-512's do. Streamed kernels, rows over many sets, half-line tiles and renderers that give no bound
keep their tiles. Opts on explicit 16-, 32- and 64-byte renderers; results against numpy."""
from __future__ import annotations
import numpy as np
import pytest
from core.codegen.opt import Kernel, OptOps, heuristic
from core.codegen.opt.copy import tiles_along_rows, stores_cached, CONFLICT_ROWS
from core.codegen.opt.heuristic import hand_coded, MM_ROW_TILE
from opt_helpers import kernel_of, product_item, run_ast, host_renderer

rng = np.random.default_rng(31)

def _transpose(a): return a.T.contiguous() if hasattr(a, "uop") else a.T

@pytest.mark.parametrize("row_bytes, lanes, lane_bytes, want", [
  (16384, 16, 4, 1), (2048, 16, 4, 1), (16384, 32, 2, 1),   # rows' lines in 1-2 sets
  (16640, 16, 4, MM_ROW_TILE), (256, 16, 4, MM_ROW_TILE),     # over 16 sets
  (3072, 16, 4, CONFLICT_ROWS // 16),                        # 4 sets: as streamed
  (16384, 8, 4, MM_ROW_TILE),                                # half-line tiles
])
def test_cached_tiles_along_rows(row_bytes, lanes, lane_bytes, want):
  assert tiles_along_rows(row_bytes, lanes, lane_bytes, MM_ROW_TILE, cached=True) == want

def test_streamed_tiles_along_rows_unchanged():
  assert tiles_along_rows(16384, 16, 4, MM_ROW_TILE) == tiles_along_rows(16384, 16, 4, MM_ROW_TILE, cached=False) == CONFLICT_ROWS // 16

def _opts(shape: tuple[int, int], simd_bytes: int, bound: int) -> tuple[Kernel, list]:
  item, want = kernel_of(_transpose, shape, rng=rng)
  rnd = host_renderer(simd_bytes)
  rnd.stream_min_bytes = bound
  k = hand_coded(Kernel(item.ast, rnd))
  got, _ = run_ast(item, k.ast, rnd)
  np.testing.assert_array_equal(got.reshape(want.shape), want)
  return k, [o.op for o in k.applied]

@pytest.mark.parametrize("simd_bytes", [64, 32, 16], ids=["AVX-512", "AVX2", "16-byte"])
@pytest.mark.parametrize("shape", [(512, 512), (512, 528), (1024, 1024), (1024, 2048)])
def test_cached_transpose_runs_no_tiles_along_rows(shape, simd_bytes):
  # 4 MiB and under: below a 28 MiB bound, plainly stored; the register tile's two upcasts (16 x 16 floats: whole lines read and
  # written, in two or four registers a row on the narrower renderers; AVX2's 16 registers read 8 rows, heuristic.CACHED_TILE_REGS)
  # and nothing reordering its loops
  k, ops = _opts(shape, simd_bytes, 28 << 20)
  assert stores_cached(k) and [o.amt for o in k.applied if o.op is OptOps.UPCAST] == ([8, 16] if simd_bytes == 32 else [16, 16]) and \
    OptOps.TILE not in ops and OptOps.SWAP not in ops, k.applied

@pytest.mark.parametrize("shape, bound, simd_bytes, tiles", [
  ((1024, 1024), 4 << 20, 64, CONFLICT_ROWS // 16),   # 8 MiB of buffers over a 4 MiB bound: streamed
  ((1024, 1024), 0, 64, CONFLICT_ROWS // 16),         # no bound known
  ((1024, 1024), 4 << 20, 32, CONFLICT_ROWS // 16),   # AVX2, streamed: whole-line tiles, as AVX-512's
  ((512, 520), 28 << 20, 32, 0),                      # AVX2, 65 tiles of 8 rows (half lines: 520 rows hold no 16): a SWAP
  ((1040, 1024), 28 << 20, 64, 0),                    # output rows 1040 floats apart: lines over 16 sets (a SWAP: 65 tiles)
])
def test_others_keep_their_tiles(shape, bound, simd_bytes, tiles, monkeypatch):
  monkeypatch.setattr(heuristic, "STRIP_TILES", 0)   # AVX2's streamed 1024^2 would run in strips instead (test_transpose_strips)
  k, ops = _opts(shape, simd_bytes, bound)
  assert [o.amt for o in k.applied if o.op is OptOps.TILE] == ([tiles] if tiles else []) and (tiles or OptOps.SWAP in ops), k.applied

@pytest.mark.parametrize("simd_bytes", [32, 16], ids=["AVX2", "16-byte"])
@pytest.mark.parametrize("bound", [0, 28 << 20], ids=["no-bound", "cached"])
@pytest.mark.parametrize("dt", [np.float32, np.int32, np.float16])
@pytest.mark.parametrize("shape, perm", [((1024, 528), (1, 0)), ((1000, 520), (1, 0)), ((513, 1031), (1, 0)), ((2, 64, 56, 56), (0, 2, 3, 1)),
                                         ((2, 56, 56, 64), (0, 3, 1, 2)), ((64, 48, 512), (2, 0, 1))])
def test_narrow_renderers_transpose_like_numpy(shape, perm, dt, bound, simd_bytes):
  # whole-line tiles whose rows span two (four) registers, half-line ones where no 16 rows divide, odd shapes with no tile
  x = (rng.standard_normal(shape) * 1000).astype(dt)
  item = product_item(lambda a: a.permute(*perm).contiguous(), x)
  rnd = host_renderer(simd_bytes)
  rnd.stream_min_bytes = bound
  got, _ = run_ast(item, hand_coded(Kernel(item.ast, rnd)).ast, rnd)
  np.testing.assert_array_equal(got.reshape(x.transpose(perm).shape), x.transpose(perm))
