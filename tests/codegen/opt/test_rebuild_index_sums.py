"""kernel.rebuild builds a split or renamed range's index sums as simplify gives them where the sum is one simplify leaves
as is (a sum of ranges in its order, kernel.canonical_range_sum): every rebuild after the first called simplify on every
load's and store's index again (~0.2 ms a sum; ResNet-18 b8 inference: 1034 calls, a third of the optimizer's time, issue 23.8)."""
from __future__ import annotations
import random
import numpy as np
import pytest
import core.ir.symbolic as symbolic
import core.codegen.opt.kernel as kernel
from core.ir.ops import UOp, Ops, AxisType
from core.ir.dtype import dtypes
from core.codegen.opt import Kernel, Opt, OptOps
from tests.codegen.opt.opt_helpers import matmul_item, product_item

def _conv_ast(rng: np.random.Generator) -> UOp:
  x, w = rng.standard_normal((2, 8, 10, 10)).astype(np.float32), rng.standard_normal((16, 8, 3, 3)).astype(np.float32)
  return product_item(lambda a, b: a.conv2d(b, padding=1), x, w).ast

def _index_sources(ast: UOp) -> list[UOp]:
  return [s for u in ast.toposort() if u.op is Ops.INDEX for s in u.src[1:] if s.dtype is dtypes.index]

OPTS = {"matmul": [Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.UNROLL, 2, 4), Opt(OptOps.TILE, 0, 4), Opt(OptOps.SWAP, 0, 1)],
        "conv": [Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UPCAST, 3, 2), Opt(OptOps.UNROLL, 6, 0), Opt(OptOps.SWAP, 0, 1), Opt(OptOps.TILE, 2, 2)]}

@pytest.mark.parametrize("which", list(OPTS))
def test_every_apply_builds_the_kernel_simplify_gives(which, monkeypatch):
  rng = np.random.default_rng(0)
  ast = matmul_item(rng, 16, 32, 64)[0].ast if which == "matmul" else _conv_ast(rng)
  built, resplit = [], kernel._resplit
  monkeypatch.setattr(kernel, "_resplit", lambda *a: built.append(r := resplit(*a)) or r)
  fast = [k := Kernel(ast)] + [k := k.apply(o) for o in OPTS[which]]
  monkeypatch.setattr(kernel, "canonical_range_sum", lambda s: None)
  slow = [k := Kernel(ast)] + [k := k.apply(o) for o in OPTS[which]]
  assert all(a.ast is b.ast for a, b in zip(fast, slow))
  assert len(built) >= 8 and all(u is not None for u in built)

@pytest.mark.parametrize("which", list(OPTS))
def test_the_built_sums_are_marked_simplified_and_simplify_agrees(which, monkeypatch):
  # rebuild marks each sum it builds in the shared memo (the expander's simplify calls then stop there): the promise holds,
  # each equals simplify's answer with a fresh memo
  rng = np.random.default_rng(0)
  ast = matmul_item(rng, 16, 32, 64)[0].ast if which == "matmul" else _conv_ast(rng)
  marked: list[UOp] = []
  mark = symbolic.mark_simplified
  monkeypatch.setattr(symbolic, "mark_simplified", lambda u, memo=None: marked.append(u) or mark(u, memo))
  with symbolic.shared_simplify():
    k = Kernel(ast)
    for o in OPTS[which]: k = k.apply(o)
    memo = symbolic._memo.done
  assert len(marked) >= 8 and all(memo.get(u) is u for u in marked)
  assert all(symbolic.simplify(u, memo={}) is u for u in marked)

def test_a_split_after_the_first_simplifies_no_index_sum(monkeypatch):
  k = Kernel(matmul_item(np.random.default_rng(1), 16, 32, 64)[0].ast).apply(Opt(OptOps.UPCAST, 1, 4))
  assert all(kernel.canonical_range_sum(s) is not None for s in _index_sources(k.ast))
  asked: list[UOp] = []
  simplify = symbolic.simplify
  monkeypatch.setattr(symbolic, "simplify", lambda u, *a, **kw: asked.append(u) or simplify(u, *a, **kw))
  k.apply(Opt(OptOps.UPCAST, 0, 2)).apply(Opt(OptOps.UNROLL, 2, 4))
  assert asked == []

def _ranges(rnd: random.Random, n: int) -> list[UOp]:
  return [UOp.range(rnd.choice([2, 3, 4, 6, 8, 12, 16, 56]), i, rnd.choice([AxisType.LOOP, AxisType.REDUCE, AxisType.UPCAST]))
          for i in range(n)]

def test_resplit_is_simplify_on_random_sums():
  rnd, checked = random.Random(0), 0
  for _ in range(300):
    rs = _ranges(rnd, rnd.randint(1, 6))
    total = UOp.const(dtypes.index, rnd.choice([0, 0, 3, -5, 112]))
    for r in rnd.sample(rs, len(rs)): total = total + (r * rnd.choice([1, 1, 2, 7, 64, 3136]) if rnd.random() < 0.8 else r)
    s = symbolic.simplify(total)
    if (parts := kernel.canonical_range_sum(s)) is None: continue
    assert symbolic.simplify(s) is s
    old = rnd.choice([t for t, _ in parts[0]])
    n, new_id = old.src[0].arg, 99
    amt = rnd.choice([a for a in range(2, n + 1) if n % a == 0])
    keep, new = UOp.range(n // amt, old.arg[0], old.arg[1]), UOp.range(amt, new_id, AxisType.UPCAST)
    for val in ([(keep, amt), (new, 1)], [(new, n // amt), (keep, 1)]) if amt < n else ([(new, 1)],):
      got = kernel._resplit(s, *parts, old, (val, 0))
      assert got is symbolic.simplify(s.substitute({old: symbolic._build_sum(old, val, 0)})), (s, old, amt)
      checked += 1
  assert checked > 200

def test_sums_simplify_would_change_are_not_canonical():
  a, b = UOp.range(4, 0, AxisType.LOOP), UOp.range(8, 1, AxisType.LOOP)
  lo, hi = sorted((a, b), key=symbolic._order)
  assert kernel.canonical_range_sum(lo * 2 + hi + 3) is not None
  for s in (hi + lo * 2, lo + lo, lo * 1 + hi, lo + hi + 0, UOp.range(1, 2, AxisType.LOOP) + lo, (lo + hi) * 2, lo * -1 + hi):
    assert kernel.canonical_range_sum(s) is None, s
