"""A plain product's packed column panels go on the threads in small blocks (heuristic._panel_blocks): every iteration of the
loop over its panel groups its own block, up to MM_PANEL_BLOCKS per thread, where they split evenly among the threads (each
iteration packs its own panels, so smaller blocks copy nothing more, and a thread that fell behind on shared cores leaves the
others one small block). On AVX2-like (2x6 tiles, 16-column panels in groups of 4) and AVX-512-like (4x4 tiles, 64-column
panels) renderers alike. Results against numpy."""
from __future__ import annotations
import numpy as np
import pytest
from core.codegen.opt import Kernel, OptOps
from core.codegen.opt.heuristic import hand_coded, _panel_blocks
from opt_helpers import kernel_of, run_ast, host_renderer

rng = np.random.default_rng(41)

@pytest.mark.parametrize("n, threads, want", [
  (16, 2, 16),     # 1024 columns in 64-column groups: one block each
  (32, 2, 32),     # 2048
  (64, 2, 32),     # 4096: MM_PANEL_BLOCKS per thread at most
  (48, 2, 24),     # 3072: the most that divide evenly
  (12, 8, 12),     # no multiple of 8 threads divides 12: _block_count's (the loop whole)
  (11, 2, 11),     # odd: _block_count's
])
def test_blocks_from_counts(n, threads, want):
  assert _panel_blocks(n, threads) == want

def _thread(k: Kernel) -> int:
  t = [o.amt for o in k.applied if o.op is OptOps.THREAD]
  assert len(t) == 1 and any(o.op is OptOps.PACK for o in k.applied), k.applied
  return t[0]

# (96 rows x K) @ (K x 1024): 16 groups of 64 columns on both (AVX2: 4 panels of 16; AVX-512: one of 64); before: 8 blocks
@pytest.mark.parametrize("simd_bytes", [32, 64])
@pytest.mark.parametrize("kk", [256, 512])
def test_matmul_block_per_panel_group(simd_bytes, kk):
  item, ref = kernel_of(lambda a, b: a @ b, (96, kk), (kk, 1024), rng=rng)
  rnd = host_renderer(simd_bytes)
  k = hand_coded(Kernel(item.ast, rnd))
  assert _thread(k) == 16, k.applied
  got, _ = run_ast(item, k.ast, rnd)
  np.testing.assert_allclose(got.reshape(ref.shape), ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())

# sizes that are no multiple of the tiles (padded rows and columns, an odd number of panel groups): right results
@pytest.mark.parametrize("simd_bytes", [32, 64])
@pytest.mark.parametrize("n, kk, m", [(100, 300, 700), (61, 129, 1000), (250, 64, 333)])
def test_matmul_odd_sizes(simd_bytes, n, kk, m):
  item, ref = kernel_of(lambda a, b: a @ b, (n, kk), (kk, m), rng=rng)
  rnd = host_renderer(simd_bytes)
  k = hand_coded(Kernel(item.ast, rnd))
  got, _ = run_ast(item, k.ast, rnd)
  np.testing.assert_allclose(got.reshape(ref.shape), ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())
