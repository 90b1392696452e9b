"""A packed product's row tile (a matmul's A rows, broadcast in the reduce loop) beyond the panel budget, whatever its size,
prefetches the next row tile into the L2 from its first load, once per line (plugin_cpu/prefetch.row_tile_offsets): AVX2's LLVM
renderer only (16 vector registers, where measured); AVX-512 and the C renderer render as without the rule. Sources from
renderers like the hosts we measure on (rendered, not run); results against numpy from AVX2 kernels run on this host."""
from __future__ import annotations
import re
import numpy as np
import pytest
from cpu_kernels import host_like_renderer, run_rendered
from core import Tensor
from core.schedule.kernelize import create_schedule
from core.codegen.opt import Kernel
from core.codegen.opt.heuristic import hand_coded
from core.codegen.program import get_program, program_source
import plugin_cpu.prefetch as prefetch

# a gated block of prefetches into the L2 (locality 1): its distances in elements
GATED = r"br i1 %\w+, label %(prefetch\d+), label %\1\.done\n\1:\n((?:  %\w+ = getelementptr float, ptr %\w+, i64 \d+\n  call void @llvm\.prefetch\.p0\(ptr %\w+, i32 0, i32 1, i32 1\)\n)+)"

def _source(ren: str, simd_bytes: int, n: int, k: int, m: int, threads: int = 2) -> str:
  (item,), _, _ = create_schedule([(Tensor(np.zeros((n, k), np.float32)) @ Tensor(np.zeros((k, m), np.float32))).uop])
  rnd = host_like_renderer(ren, simd_bytes, threads)   # a renderer of its own each time: programs are cached by renderer
  return program_source(get_program(hand_coded(Kernel(item.ast, rnd)).ast, rnd, optimize=False))

def _gated_distances(src: str) -> list[list[int]]:
  return [[int(d) for d in re.findall(r"i64 (\d+)", body)] for _, body in re.findall(GATED, src)]

@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("n, k", [(96, 2048), (100, 2048), (300, 1536), (200, 512), (300, 256)])
def test_avx2_row_tile_prefetches_the_next_tile(n, k, threads):
  # AVX2's 2 x 6 tile: six rows of A, k apart; the next tile is 6 rows on. One gate, under the reduce index's line start
  src = _source("LLVM", 32, n, k, 256, threads)
  assert _gated_distances(src) == [[6 * k + r * k for r in range(6)]], _gated_distances(src)
  assert re.search(r"= and i32 %ridx\d+, 15\n  %\w+ = icmp eq i32 %\w+, 0\n", src)

def test_row_tile_within_the_panel_budget_renders_as_without_the_rule(monkeypatch):
  # 96 rows of 256: A (96 KiB) within the panel budget, in the L2 after the first panel, as the next tile. (Beyond it, tiles of
  # 6 rows of 256 or 512, 6 or 12 KiB, at most half of any current x86 L1, prefetch: see above)
  with_rule = _source("LLVM", 32, 96, 256, 256)
  monkeypatch.setattr(prefetch, "ROW_TILE_PREFETCH", False)
  assert _source("LLVM", 32, 96, 256, 256) == with_rule

@pytest.mark.parametrize("ren, simd_bytes", [("LLVM", 64), ("C", 32), ("C", 64)], ids=["AVX-512 LLVM", "AVX2 C", "AVX-512 C"])
def test_other_renderers_render_as_without_the_rule(ren, simd_bytes, monkeypatch):
  with_rule = _source(ren, simd_bytes, 96, 2048, 256)
  monkeypatch.setattr(prefetch, "ROW_TILE_PREFETCH", False)
  assert _source(ren, simd_bytes, 96, 2048, 256) == with_rule

@pytest.mark.parametrize("n, k, m", [(96, 2048, 256), (100, 2048, 128), (200, 1536, 64), (200, 512, 128)])
def test_prefetching_matmul_gives_numpys_result(n, k, m):
  # AVX2 code, its prefetch checked, run here (any x86-64 host with AVX2 runs it); 100 and 50 rows pad the last tile
  r = np.random.default_rng(n + k + m)
  a, b = r.standard_normal((n, k), dtype=np.float32), r.standard_normal((k, m), dtype=np.float32)
  got, src = run_rendered(host_like_renderer("LLVM", 32), lambda x, y: x @ y, a, b)
  assert _gated_distances(src) == [[6 * k + i * k for i in range(6)]]
  want = a.astype(np.float64) @ b
  np.testing.assert_allclose(got.reshape(n, m), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
