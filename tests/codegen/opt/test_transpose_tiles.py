"""Transposing copies (a.T.contiguous(), NCHW <-> NHWC) through register tiles: each tile row of the output is a whole cache
line (two 8-lane vectors on AVX2, one 16-lane vector on AVX-512), so a streaming store never writes half a line; results
against numpy on both kinds of renderer and on odd shapes that hold no whole tile."""
from __future__ import annotations
import numpy as np
import pytest
from core import Tensor
from core.codegen.opt import Kernel, OptOps
from core.codegen.opt.heuristic import hand_coded, TRANSPOSE_ROW_BYTES
from opt_helpers import kernel_of, run_ast, host_renderer

rng = np.random.default_rng(23)

def _transpose(a): return a.T.contiguous() if isinstance(a, Tensor) else a.T

def _upcasts(k: Kernel) -> list[int]: return [o.amt for o in k.applied if o.op is OptOps.UPCAST]

@pytest.mark.parametrize("simd_bytes", [32, 64])
def test_transpose_tile_rows_are_whole_cache_lines(simd_bytes):
  item, want = kernel_of(_transpose, (1024, 2048), rng=rng)
  rnd = host_renderer(simd_bytes)
  k = hand_coded(Kernel(item.ast, rnd))
  # the output row's upcast first (a line: 16 floats on both), then 16 rows of the input side (a line of each read: two
  # registers on AVX2, one on AVX-512)
  assert _upcasts(k) == [TRANSPOSE_ROW_BYTES // 4, TRANSPOSE_ROW_BYTES // 4], k.applied
  # the tiles down the output's rows innermost, or strips along the output row (these rows, 4 and 8 KiB apart, take them on
  # both), one block per thread's part of a strip (test_transpose_strips)
  assert k.applied[-1].op in (OptOps.TILE, OptOps.SWAP, OptOps.THREAD), k.applied
  got, _ = run_ast(item, k.ast, rnd)
  np.testing.assert_array_equal(got.reshape(want.shape), want)

def test_transpose_row_without_a_whole_line_keeps_one_vector():
  # 1000 output columns: a multiple of 8, not of 16, so AVX2 tiles one vector wide (8x8), as before
  item, want = kernel_of(_transpose, (1000, 520), rng=rng)
  rnd = host_renderer(32)
  k = hand_coded(Kernel(item.ast, rnd))
  assert _upcasts(k) == [8, 8], k.applied
  got, _ = run_ast(item, k.ast, rnd)
  np.testing.assert_array_equal(got.reshape(want.shape), want)

@pytest.mark.parametrize("shape", [(1024, 528), (520, 1000), (513, 1031), (17, 4096), (4096, 24)])
def test_transpose_matches_numpy(shape):
  x = rng.standard_normal(shape).astype(np.float32)
  np.testing.assert_array_equal(Tensor(x).T.contiguous().numpy(), x.T)

@pytest.mark.parametrize("shape, perm", [((2, 64, 56, 56), (0, 2, 3, 1)), ((2, 56, 56, 64), (0, 3, 1, 2)), ((3, 5, 7, 9), (0, 2, 3, 1)),
                                         ((2, 24, 33, 40), (0, 3, 1, 2)), ((1, 3, 600, 520), (0, 2, 3, 1))])
def test_permute_matches_numpy(shape, perm):
  x = rng.standard_normal(shape).astype(np.float32)
  np.testing.assert_array_equal(Tensor(x).permute(*perm).contiguous().numpy(), x.transpose(perm))
