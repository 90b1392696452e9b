"""A product's packed column panels grouped (heuristic.mm_panel_group): panels narrower than MM_GROUP_COLS columns are packed
together, up to that many columns and as many as fit the host's per-core L2, and walked inside each row tile, so a row tile of
the other input is read from L3 once per group, not once per panel. An AVX2-like host (16 ymm, 512 KiB L2, 2x6 tiles: 16-column
panels) groups four; an AVX-512-like one (4x4 tiles: 64-column panels) keeps one panel per pass, as before, except on a 2 MiB
L2 (heuristic.big_l2: 4x6 tiles), which groups two (MM_GROUP_COLS_BIG_L2).
Results against numpy."""
from __future__ import annotations
from types import SimpleNamespace
import numpy as np
import pytest
from core.codegen.opt import Kernel, OptOps
from core.codegen.opt.heuristic import BIG_L2_BYTES, hand_coded, mm_panel_group
from opt_helpers import kernel_of, run_ast, host_renderer

rng = np.random.default_rng(29)

@pytest.mark.parametrize("l2, threads, n_panels, panel, cols, want", [
  (512 << 10, 2, 64, 64 << 10, 16, 4),     # AVX2 1024^3: 2x6 tiles, 16-column panels of K=1024
  (512 << 10, 2, 128, 128 << 10, 16, 4),   # AVX2 2048^3: four fill the L2
  (256 << 10, 2, 128, 128 << 10, 16, 2),   # a smaller L2: as many as fit
  (1 << 20, 2, 16, 256 << 10, 64, 1),      # AVX-512 1024^3: 4x4 tiles, 64-column panels
  (512 << 10, 8, 16, 16 << 10, 16, 2),     # a group per thread at least
  (0, 2, 64, 64 << 10, 16, 1),             # L2 unknown (a renderer that doesn't say): one panel per pass
])
def test_group_from_host_facts(l2, threads, n_panels, panel, cols, want):
  rnd = SimpleNamespace(l2_bytes=l2, threads=threads, big_l2_tiles=False, simd_width=64)
  assert mm_panel_group(rnd, n_panels, panel, cols) == want

@pytest.mark.parametrize("big_l2_tiles, simd, threads, n_panels, panel, cols, want", [
  (True, 64, 2, 16, 256 << 10, 64, 2),     # the Intel host's 1024^3: 4x6 tiles, 64-column panels two a group
  (True, 64, 2, 32, 512 << 10, 64, 1),     # 2048^3: two would pass PACK_MAX_BYTES
  (True, 64, 16, 16, 256 << 10, 64, 1),    # a group per thread at least
  (True, 64, 2, 64, 64 << 10, 32, 2),      # narrower panels group to MM_GROUP_COLS as before
  (True, 32, 2, 16, 256 << 10, 64, 1),     # AVX2 code (unmeasured there)
  (False, 64, 2, 16, 256 << 10, 64, 1),    # a renderer without big_l2_tiles (the C renderer)
])
def test_big_l2_group(big_l2_tiles, simd, threads, n_panels, panel, cols, want):
  rnd = SimpleNamespace(l2_bytes=BIG_L2_BYTES, threads=threads, big_l2_tiles=big_l2_tiles, simd_width=simd)
  assert mm_panel_group(rnd, n_panels, panel, cols) == want

def _grouped(k: Kernel) -> int:
  """The column panels k walks inside each row tile (a TILE before the PACK), 1 when none."""
  tiles = [o.amt for o in k.applied if o.op is OptOps.TILE]
  assert any(o.op is OptOps.PACK for o in k.applied), k.applied
  return tiles[0] if tiles else 1

@pytest.mark.parametrize("simd_bytes, n, kk, m, want", [(32, 96, 256, 256, 4), (32, 96, 1024, 512, 4), (64, 96, 1024, 1024, 1)])
def test_matmul_panels_grouped_by_l2(simd_bytes, n, kk, m, want):
  item, ref = kernel_of(lambda a, b: a @ b, (n, kk), (kk, m), rng=rng)
  rnd = host_renderer(simd_bytes)
  k = hand_coded(Kernel(item.ast, rnd))
  assert _grouped(k) == want, k.applied
  got, _ = run_ast(item, k.ast, rnd)
  np.testing.assert_allclose(got.reshape(ref.shape), ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())
