"""A transposing copy of close input rows (NHWC -> NCHW: a pixel's channels, 256 bytes) runs its output row's tiles in chunks of
at most CLOSE_CHUNK_BYTES of input and CLOSE_CHUNK_STEPS steps or more, the tiles across the rows (the channel tiles) between a
chunk and its steps: every pass over the channels reads the chunk's lines from L1, not one line in four of a whole image. Rows far
apart (NCHW -> NHWC) keep their order. Choices on an AVX2 and an AVX-512 renderer, without a pool and with 2 threads; results
against numpy."""
from __future__ import annotations
import numpy as np
import pytest
from core.codegen.opt import OptOps
from core.codegen.opt import heuristic
from core.codegen.opt.expander import strided_offset
from core.ir.ops import AxisType, Ops
from opt_helpers import permuted_kernel

rng = np.random.default_rng(48)

def _kernel(shape, perm, simd_bytes, threads):
  k, _ = permuted_kernel(shape, perm, simd_bytes, threads, rng)
  load = next(u for u in k.ast.toposort() if u.op is Ops.LOAD)
  # each loop's step through the input, in elements
  return k, [strided_offset(load.src[0].src[1], r)[1] for r in k.of_type(AxisType.LOOP)]

@pytest.mark.parametrize("threads", [0, 2])
@pytest.mark.parametrize("simd_bytes", [32, 64])
@pytest.mark.parametrize("shape", [(2, 56, 56, 64), (4, 32, 32, 64), (4, 24, 24, 64)])
def test_close_rows_run_in_chunks(shape, simd_bytes, threads):
  k, steps = _kernel(shape, (0, 3, 1, 2), simd_bytes, threads)
  row = shape[-1]   # the input rows' stride: one pixel's channels
  # innermost the chunk's tile steps (several input rows a step), then the channel tiles (along the rows: less than a row a step),
  # then the chunks (the steps' span), whose input fits CLOSE_CHUNK_BYTES
  assert any(o.op is OptOps.TILE for o in k.applied), k.applied
  inner, across, chunk = steps[-1], steps[-2], steps[-3]
  n = int(k.of_type(AxisType.LOOP)[-1].src[0].arg)
  assert inner % row == 0 and 0 < across < row and chunk == n * inner, (k, steps)
  assert heuristic.CLOSE_CHUNK_STEPS <= n and chunk * 4 <= heuristic.CLOSE_CHUNK_BYTES, (k, steps)

def test_chunks_of_too_few_steps_are_not_cut():
  # 128 channels: an AVX-512 tile step spans 16 rows of 512 bytes, 8 KiB, so a chunk of CLOSE_CHUNK_BYTES holds 2 steps, fewer than
  # CLOSE_CHUNK_STEPS: the passes keep their order (chunks of 2 steps ran 0.81x the time of AVX2 code's 256x512 transpose)
  k, steps = _kernel((2, 32, 32, 128), (0, 3, 1, 2), 64, 0)
  assert not any(o.op is OptOps.TILE for o in k.applied) and steps[-1] == 16 * 128, (k, steps)

@pytest.mark.parametrize("simd_bytes", [32, 64])
def test_rows_far_apart_keep_their_order(simd_bytes):
  # NCHW -> NHWC: a channel plane per input row, rows far apart; its tiles along the rows stay innermost (copy.tiles_along_rows)
  k, steps = _kernel((2, 64, 56, 56), (0, 2, 3, 1), simd_bytes, 2)
  assert steps[-1] < 56 * 56, (k, steps)
