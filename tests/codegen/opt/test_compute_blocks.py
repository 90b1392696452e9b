"""A product or conv without a packed copy whose thread loop the general split cuts (a conv's images) takes as many blocks as
_panel_blocks would, up to MM_PANEL_BLOCKS per thread, while each keeps MIN_BLOCK_WORK iterations (heuristic._compute_blocks):
the blocks share no copy, and a shorter last block leaves the thread that finished first less idle time. Other kernels keep
_block_count's split. On AVX2-like and AVX-512-like 2-thread renderers alike. Results against numpy."""
from __future__ import annotations
import numpy as np
import pytest
from core.codegen.opt import Kernel, OptOps, apply_opts
import core.codegen.opt.heuristic as H
from core.codegen.opt.heuristic import hand_coded, _compute_blocks
from opt_helpers import kernel_of, run_ast, host_renderer

rng = np.random.default_rng(43)
BIG = 1 << 40

@pytest.mark.parametrize("n, threads, work, want", [
  (32, 2, BIG, 32),        # the conv1x1 bench row's 32 images: one block each
  (64, 2, BIG, 32),        # MM_PANEL_BLOCKS per thread at most
  (16, 2, BIG, 16),
  (8, 2, BIG, 8),          # no more than the loop has
  (32, 2, 40 << 20, 8),    # blocks of at least MIN_BLOCK_WORK: 10 at most, and never fewer than _block_count's 8
  (32, 2, 80 << 20, 16),   # 20 at most: the most of those that divide 32 evenly among 2 threads
  (12, 8, BIG, 12),        # no multiple of 8 threads divides 12: _block_count's (the loop whole)
  (11, 2, BIG, 11),        # odd: _block_count's
])
def test_blocks_from_counts(n, threads, work, want):
  assert _compute_blocks(n, threads, work) == want

def _threads(k: Kernel) -> list[int]: return [o.amt for o in k.applied if o.op is OptOps.THREAD]

def _conv1x1(n: int, c: int, hw: int, o: int):
  return kernel_of(lambda x, w: np.einsum("oc,nchw->nohw", w, x) if isinstance(x, np.ndarray) else x.conv2d(w.reshape(o, c, 1, 1)),
                   (n, c, hw, hw), (o, c), rng=rng)

# 1x1 convs read in place (no PACK): their images go one, or a few, to a block (before: _block_count's 8); on AVX-512 a register
# tile holds two images (the 49 vectors of a 28x28 map in no pairs: WHOLE_ROW_THIRD_VECTORS), a block each
@pytest.mark.parametrize("simd_bytes, n, want", [(32, 32, 32), (32, 16, 16), (64, 32, 16), (64, 16, 8)])
def test_unpacked_conv_images_in_fine_blocks(simd_bytes, n, want):
  item, _ = _conv1x1(n, 256, 28, 64)
  # masked pad lanes decide the tile (on AVX2 too: 64 channels in 6-row tiles, 66), hence PACK or not
  k = hand_coded(Kernel(item.ast, host_renderer(simd_bytes, masked=True)))
  assert not any(o.op is OptOps.PACK for o in k.applied), k.applied
  assert _threads(k) == [want], k.applied

# a row sum and a matmul (its own panel split) keep the blocks they had: the same opts with the finer split off
@pytest.mark.parametrize("simd_bytes", [32, 64])
@pytest.mark.parametrize("fn, shapes", [(lambda x: x.sum(1), [(8192, 2048)]), (lambda a, b: a @ b, [(1024, 1024), (1024, 1024)])],
                         ids=["row_sum", "matmul"])
def test_other_kernels_keep_their_split(simd_bytes, fn, shapes, monkeypatch):
  item, _ = kernel_of(fn, *shapes, rng=rng)
  rnd = host_renderer(simd_bytes)
  got = hand_coded(Kernel(item.ast, rnd)).applied
  monkeypatch.setattr(H, "MIN_BLOCK_WORK", BIG)
  assert got == hand_coded(Kernel(item.ast, rnd)).applied

def test_fine_conv_blocks_match_numpy():
  item, ref = _conv1x1(32, 256, 28, 64)
  rnd = host_renderer(32)
  k = hand_coded(Kernel(item.ast, host_renderer(32, masked=True)))
  assert _threads(k) == [32], k.applied
  got, _ = run_ast(item, apply_opts(item.ast, k.applied, rnd), rnd)   # its pad is whole tile rows: no masked lanes
  np.testing.assert_allclose(got.reshape(ref.shape), ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())
