"""A product's packed column panels grouped by the host's L2: the panels that fit a quarter of the per-core L2 are packed
together and walked inside each row tile (heuristic.mm_panel_group), so a row tile's rows of the other input come from the
cache once per group, not from L3 once per panel. An AVX2-like host (16 ymm, 512 KiB L2) groups a 1024-wide matmul's 64 KiB
panels in twos; an AVX-512-like one (1 MiB L2, 256 KiB panels of its 4x4 tile) keeps one panel per pass, as before.
Results against numpy."""
from __future__ import annotations
from types import SimpleNamespace
import numpy as np
import pytest
from core.codegen.opt import Kernel, OptOps
from core.codegen.opt.heuristic import hand_coded, mm_panel_group
from opt_helpers import kernel_of, run_ast, host_renderer

rng = np.random.default_rng(29)

@pytest.mark.parametrize("l2, threads, n_panels, panel, want", [
  (512 << 10, 2, 64, 64 << 10, 2),     # AVX2 1024^3: 2x6 tiles, 16-float panels of K=1024 (two fit 128 KiB)
  (512 << 10, 2, 128, 128 << 10, 1),   # AVX2 2048^3: one panel is already a quarter of L2
  (1 << 20, 2, 16, 256 << 10, 1),      # AVX-512 1024^3: 4x4 tiles, 64-float panels of K=1024
  (512 << 10, 2, 16, 16 << 10, 8),     # small panels: as many as fit, leaving a group per thread
  (512 << 10, 8, 16, 16 << 10, 2),
  (0, 2, 64, 64 << 10, 1),             # L2 unknown (a renderer that doesn't say): one panel per pass
])
def test_group_from_host_facts(l2, threads, n_panels, panel, want):
  assert mm_panel_group(SimpleNamespace(l2_bytes=l2, threads=threads), n_panels, panel) == want

def _grouped(k: Kernel) -> int:
  """The column panels k walks inside each row tile (a TILE before the PACK), 1 when none."""
  tiles = [o.amt for o in k.applied if o.op is OptOps.TILE]
  assert any(o.op is OptOps.PACK for o in k.applied), k.applied
  return tiles[0] if tiles else 1

@pytest.mark.parametrize("simd_bytes, n, kk, m, want", [(32, 96, 256, 256, 8), (32, 96, 1024, 512, 2), (64, 96, 1024, 1024, 1)])
def test_matmul_panels_grouped_by_l2(simd_bytes, n, kk, m, want):
  item, ref = kernel_of(lambda a, b: a @ b, (n, kk), (kk, m), rng=rng)
  rnd = host_renderer(simd_bytes)
  k = hand_coded(Kernel(item.ast, rnd))
  assert _grouped(k) == want, k.applied
  got, _ = run_ast(item, k.ast, rnd)
  np.testing.assert_allclose(got.reshape(ref.shape), ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())
