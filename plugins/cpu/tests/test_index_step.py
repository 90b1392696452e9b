"""prefetch.index_step: an index's constant step along a loop, found once per index that differs only in a constant offset
(an unrolled tile's loads: simplifying each of a 3x3 conv's 292 was most of its codegen on AVX-512)."""
from __future__ import annotations
from cpu_kernels import c, rng
from plugin_cpu import prefetch
from plugin_cpu.prefetch import index_step

def test_steps_of_offset_indices_are_their_base_steps():
  r, k = rng(64, 0), rng(3, 1)
  base = r * c(9) + k * c(3)
  assert [index_step(base + c(o), r) for o in (0, 1, 576, -55)] == [9] * 4
  assert index_step(base + c(7), k) == 3
  assert index_step((r + c(5)) // c(2), r) is None   # not a constant step

def test_offset_indices_share_one_simplify():
  r, k = rng(64, 2), rng(3, 3)
  base = r * c(288) + k * c(96)
  prefetch._steps.clear()
  misses = prefetch._steps.misses
  assert {index_step(base + c(o), r) for o in range(1, 200)} == {288}
  assert prefetch._steps.misses - misses == 1 and (base, r) in prefetch._steps   # a cache DEBUG=2 lists (core.helpers.LRUCache)
