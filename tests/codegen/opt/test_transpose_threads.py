"""The thread split of a transposing copy whose input rows are close (NHWC -> NCHW: a pixel's channels, 256 bytes): one block per
thread of the tiles across those rows, the images inside each block, so the threads read parts of the same rows at once (2 threads
on the Zen 5, 32x56x56x64: 2.21 -> 1.36 ms of CPU time). Rows far apart (NCHW -> NHWC) and a copy whose tiles across the rows
are its outermost loop keep the usual split. Choices on an AVX2 and an AVX-512 renderer; results against numpy."""
from __future__ import annotations
import numpy as np
import pytest
from core.codegen.opt import OptOps
from core.ir.ops import AxisType
from opt_helpers import permuted_kernel

rng = np.random.default_rng(23)

def _split(shape, perm, simd_bytes):
  k, rnd = permuted_kernel(shape, perm, simd_bytes, 2, rng)
  return k, rnd, [o for o in k.applied if o.op is OptOps.THREAD]

@pytest.mark.parametrize("simd_bytes", [32, 64])
@pytest.mark.parametrize("shape", [(2, 56, 56, 64), (4, 28, 28, 32), (3, 28, 28, 128)])
def test_nhwc_to_nchw_threads_split_the_channel_tiles(simd_bytes, shape):
  k, rnd, threads = _split(shape, (0, 3, 1, 2), simd_bytes)
  # blocks of the channel tiles (one per thread, or more where the images would not split evenly themselves), the image loop
  # whole inside each block
  assert len(threads) == 1 and threads[0].axis != 0 and threads[0].amt % rnd.threads == 0, k.applied
  assert int(k.of_type(AxisType.LOOP)[0].src[0].arg) == shape[0], k

@pytest.mark.parametrize("simd_bytes", [32, 64])
@pytest.mark.parametrize("shape, perm", [((2, 64, 56, 56), (0, 2, 3, 1)), ((1, 56, 56, 256), (0, 3, 1, 2)), ((4096, 64), (1, 0))])
def test_other_transposes_keep_the_usual_split(simd_bytes, shape, perm):
  # rows far apart (NCHW -> NHWC: a channel plane per row), or the tiles across the rows already the outermost loop: the first
  # loop is split, into about 4 blocks per thread where it is long enough
  k, rnd, threads = _split(shape, perm, simd_bytes)
  assert len(threads) == 1 and threads[0].axis == 0, k.applied
