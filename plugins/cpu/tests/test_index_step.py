"""prefetch.index_step: an index's constant step along a loop, found once per index that differs only in a constant offset
(an unrolled tile's loads: simplifying each of a 3x3 conv's 292 was most of its codegen on AVX-512)."""
from __future__ import annotations
import random
from core.ir.ops import UOp, Ops
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

def _slow_step(idx: UOp, r: UOp) -> int | None:
  return s.arg if (s := (idx.substitute({r: r + 1}) - idx).simplify()).op is Ops.CONST else None

def _term(rnd: random.Random, r: UOp, others: list[UOp]) -> UOp:
  q, k, m = rnd.choice(others), c(rnd.choice([2, 3, 4, 7])), c(rnd.choice([-3, -1, 0, 1, 2, 9, 64, 3136]))
  return rnd.choice([lambda: r, lambda: r * m, lambda: q, lambda: q * m, lambda: q // k, lambda: q % k, lambda: (q // k) * m,
                     lambda: (q * m + rnd.choice(others)) // k, lambda: (q < k).where(q, q * m), lambda: c(rnd.randint(-9, 99)),
                     lambda: r // k, lambda: r % k, lambda: (r + q) * m, lambda: r * q, lambda: (r < k).where(q, c(0))])()

def test_the_shortcut_step_is_what_simplify_finds_on_random_indices():
  # prefetch._linear_step answers without simplify where r is only in r and r*c terms of the sum: exactly the slow answer
  rnd, fast = random.Random(0), 0
  for _ in range(600):
    rs = [rng(rnd.choice([2, 3, 16, 56, 64]), i) for i in range(rnd.randint(2, 4))]
    r = rs[0]
    terms = [_term(rnd, r, rs[1:]) for _ in range(rnd.randint(1, 5))]
    idx = terms[0]
    for t in terms[1:]: idx = idx + t if rnd.random() < 0.7 else t + idx
    for x in (idx, idx.simplify()):
      if (got := prefetch._linear_step(x, r)) is not None:
        assert got == _slow_step(x, r), x
        fast += 1
  assert fast > 300

def test_a_linear_index_steps_without_simplify(monkeypatch):
  r, k, g = rng(64, 4), rng(3, 5), rng(16, 6)
  asked: list[UOp] = []
  simplify = UOp.simplify
  monkeypatch.setattr(UOp, "simplify", lambda u, *a, **kw: asked.append(u) or simplify(u, *a, **kw))
  prefetch._steps.clear()
  assert index_step(r * c(9) + (g // c(4)) * c(576) + k * c(3) + r, r) == 10 and asked == []
  assert index_step(r * c(9) + (r + g) // c(4), r) is None and asked   # r inside another term: simplify decides
