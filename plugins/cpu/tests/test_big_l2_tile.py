"""A plain product on a core with a 2 MiB L2 (heuristic.big_l2: the Intel AVX-512 server core) takes the 4 x 6 register tile
(MM_TILES_BIG_L2), and its FMA loop's loads of the packed panel prefetch it PACKED_AHEAD_BYTES on into the L1
(prefetch.packed_panel_offsets, AVX-512 code), two such panels packed together (heuristic.MM_GROUP_COLS_BIG_L2); a 1 MiB L2 (the Zen 5's, host_like_renderer) keeps the 4 x 4 tile and no such
prefetch; so does the C renderer (no `big_l2_tiles`). Sources rendered for AVX-512 on any host; results against numpy where this
host runs AVX-512."""
from __future__ import annotations
import re
import numpy as np
import pytest
from core import Tensor
from core.codegen.opt import Kernel, OptOps
from core.codegen.opt.heuristic import BIG_L2_BYTES, hand_coded
from core.codegen.program import get_program, program_source
from core.schedule.kernelize import create_schedule
from plugin_cpu.prefetch import PACKED_AHEAD_BYTES
from cpu_kernels import host_like_renderer, run_item

# a prefetch into the L1 and its distance in elements, as the LLVM renderer writes it after a load
LOAD_PREFETCH = r"%\w+ = load <16 x float>, ptr (%\w+), align \d+\n  (%\w+) = getelementptr float, ptr \1, i64 (\d+)\n" \
                r"  call void @llvm.prefetch.p0\(ptr \2, i32 0, i32 3, i32 1\)"

def _renderer(l2: int):
  rnd = host_like_renderer("LLVM", 64, threads=0)
  rnd.l2_bytes = l2
  return rnd

def _matmul(n: int, kk: int, m: int, rng: np.random.Generator | None = None):
  a, b = (np.zeros((n, kk), np.float32), np.zeros((kk, m), np.float32)) if rng is None else \
    (rng.standard_normal((n, kk), dtype=np.float32), rng.standard_normal((kk, m), dtype=np.float32))
  (item,), _, _ = create_schedule([(Tensor(a).realize() @ Tensor(b).realize()).uop])
  return item, a.astype(np.float64) @ b

def _tile(k: Kernel) -> tuple[int, int]:
  """(column vectors, rows) of the register tile: the UPCASTs after the lanes, along the columns' axis and the other."""
  ups = [o for o in k.applied if o.op is OptOps.UPCAST]
  cols = [o.amt for o in ups[1:] if o.axis == ups[0].axis]
  rows = [o.amt for o in ups[1:] if o.axis != ups[0].axis]
  return (cols or [1])[0], rows[0]

@pytest.mark.parametrize("l2, tile", [(BIG_L2_BYTES, (4, 6)), (1 << 20, (4, 4))], ids=["2 MiB", "1 MiB"])
@pytest.mark.parametrize("n", [1024, 2048])
def test_big_l2_takes_the_taller_tile(n, l2, tile):
  k = hand_coded(Kernel(_matmul(n, n, n)[0].ast, _renderer(l2)))
  assert any(o.op is OptOps.PACK for o in k.applied) and _tile(k) == tile, k.applied

@pytest.mark.parametrize("n", [1024, 2048])
def test_packed_panel_loads_prefetch_ahead_on_a_big_l2(n):
  # the 4 x 6 tile's panel holds 64 columns a reduce step (256 bytes): its loads prefetch PACKED_AHEAD_BYTES of steps on (1024:
  # two panels packed together, MM_GROUP_COLS_BIG_L2; 2048's two would pass PACK_MAX_BYTES)
  rnd = _renderer(BIG_L2_BYTES)
  src = program_source(get_program(_matmul(n, n, n)[0].ast, rnd))
  panel = set(re.findall(r"(%\w+) = alloca \[(\d+) x float\]", src))
  assert len(panel) == 1 and int(next(iter(panel))[1]) == n * 64 * {1024: 2, 2048: 1}[n], panel
  acc = next(iter(panel))[0]
  # the prefetching loads read the panel (their pointers are getelementptrs into it), its 4 vectors a step in each FMA loop (1024
  # rows: a loop and its peeled tail, 1024 not being a multiple of 6; 2048: one loop, its last tile's extra rows gated)
  ptrs = set(re.findall(rf"(%\w+) = getelementptr inbounds float, ptr {acc}, ", src))
  hits = [(p, int(o)) for p, _, o in re.findall(LOAD_PREFETCH, src) if p in ptrs]
  assert len(hits) == {1024: 8, 2048: 4}[n] and {o for _, o in hits} == {PACKED_AHEAD_BYTES // 4}, hits

def _grouped(k: Kernel) -> int:
  """The column panels k packs together and walks inside each row tile (a TILE before the PACK), 1 when none; 0: no PACK."""
  return next((o.amt for o in k.applied if o.op is OptOps.TILE), 1) if any(o.op is OptOps.PACK for o in k.applied) else 0

@pytest.mark.parametrize("l2, simd, n, group", [(BIG_L2_BYTES, 64, 1024, 2), (BIG_L2_BYTES, 64, 512, 2), (BIG_L2_BYTES, 64, 2048, 1),
                                                (1 << 20, 64, 1024, 1)], ids=["2 MiB 1024", "2 MiB 512", "2 MiB 2048", "1 MiB 1024"])
def test_big_l2_groups_two_panels(l2, simd, n, group):
  # the 4x6 tile's 64-column panels two a group on a 2 MiB L2 (MM_GROUP_COLS_BIG_L2) where the pair fits PACK_MAX_BYTES
  # (2048: 512 KiB each, alone); a 1 MiB L2 keeps one panel a pass
  k = hand_coded(Kernel(_matmul(n, n, n)[0].ast, _renderer(l2)))
  assert _tile(k) == ((4, 6) if l2 == BIG_L2_BYTES else (4, 4)) and _grouped(k) == group, k.applied

def test_c_renderer_keeps_its_tile():
  rnd = host_like_renderer("C", 64, threads=0)
  rnd.l2_bytes = BIG_L2_BYTES
  assert _tile(hand_coded(Kernel(_matmul(1024, 1024, 1024)[0].ast, rnd))) == (4, 4)

def test_no_panel_prefetch_on_a_smaller_l2():
  src = program_source(get_program(_matmul(1024, 1024, 1024)[0].ast, _renderer(1 << 20)))
  acc = re.findall(r"(%\w+) = alloca \[65536 x float\]", src)
  assert len(acc) == 1
  ptrs = set(re.findall(rf"(%\w+) = getelementptr inbounds float, ptr {acc[0]}, ", src))
  assert not [p for p, _, _ in re.findall(LOAD_PREFETCH, src) if p in ptrs]

@pytest.mark.skipif("avx512f" not in __import__("plugin_cpu.compiler", fromlist=["host_flags"]).host_flags(), reason="runs AVX-512 code")
@pytest.mark.parametrize("n, kk, m, group", [(1024, 1024, 1024, 2), (390, 512, 256, 2), (200, 768, 320, 0)])
def test_big_l2_products_give_numpys_results(n, kk, m, group):
  # rows not a multiple of 6 (padded, a peeled tail), panels with and without the prefetch (768 x 64 floats: 192 KiB; 512: 128),
  # grouped two a pass, and too few rows to pack
  item, want = _matmul(n, kk, m, np.random.default_rng(n + kk + m))
  rnd = _renderer(BIG_L2_BYTES)
  k = hand_coded(Kernel(item.ast, rnd))
  assert _tile(k) == (4, 6) and _grouped(k) == group, k.applied
  bufs, src = run_item(item, rnd, ast=k.ast)
  np.testing.assert_allclose(bufs[0].numpy().reshape(want.shape), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
