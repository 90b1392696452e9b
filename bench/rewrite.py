"""Benchmark graph_rewrite: rewrites and node visits per second on 10k-node graphs (and tinygrad's, when installed)."""
from __future__ import annotations
import os, random, sys, time
from typing import Any, Callable
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # run from a checkout without installing

def random_index_expr(UOp: Any, variable: Callable, n: int, seed: int = 0) -> Any:
  """A SINK over random index-sized expressions with about n distinct nodes in all, some subexpressions shared."""
  rng = random.Random(seed)
  vs = [variable(f"v{i}", 0, rng.choice([3, 7, 15, 31])) for i in range(6)]
  pool: list[Any] = []
  def gen(depth: int) -> Any:
    if depth == 0 or rng.random() < 0.2: return rng.choice(pool) if pool and rng.random() < 0.2 else rng.choice(vs)
    a = gen(depth - 1)
    k = rng.randrange(6)
    if k == 0: return a + gen(depth - 1)
    if k == 1: return a * rng.randint(1, 8)
    if k == 2: return a + rng.randint(0, 16)
    if k == 3: return a // rng.choice([2, 3, 4, 8])
    if k == 4: return a % rng.choice([2, 3, 4, 8])
    return a.maximum(gen(depth - 1))
  seen: set[Any] = set()
  while len(seen) < n:
    e = gen(5)
    pool.append(e)
    seen.update(e.toposort())
  return pool[0].sink(*pool[1:])

def timeit(fn: Callable[[], Any], reps: int = 3) -> tuple[float, Any]:
  best, out = float("inf"), None
  for _ in range(reps):
    t = time.perf_counter()
    out = fn()
    best = min(best, time.perf_counter() - t)
  return best, out

def bench_core(n: int) -> dict[str, float]:
  from core.ir.ops import UOp, Variable
  from core.ir.pattern import UPat, PatternMatcher, graph_rewrite, rewrite_stats
  from core.ir.symbolic import symbolic
  from core.helpers import Context
  res: dict[str, float] = {}
  # 1. an n-long chain of x+0 under a one-rule matcher: pure engine overhead
  x = Variable("x", 0, 100)
  chain = x
  for i in range(n): chain = (chain + 0) * 1 if i % 2 else chain + 0
  pm = PatternMatcher([(UPat.var("x") + 0, lambda x: x), (UPat.var("x") * 1, lambda x: x)])
  nodes = len(chain.toposort())
  dt, out = timeit(lambda: graph_rewrite(chain, pm, name="bench x+0"))
  assert out is x
  res["x+0 chain: nodes/s"] = nodes / dt
  # 2. the same chain through the full symbolic matcher
  dt, out = timeit(lambda: graph_rewrite(chain, symbolic, name="bench chain symbolic"))
  assert out is x
  res["x+0 chain (symbolic): nodes/s"] = nodes / dt
  # 3. a random index expression: every node is fresh, so this measures matching and the rules themselves
  def run_random() -> tuple[int, Any]:
    e = random_index_expr(UOp, Variable, n, seed=1)  # rebuilt each time: cached bounds would flatter the result
    size = len(e.toposort())
    rewrite_stats.clear()
    with Context(TRACK_REWRITES=1):
      t = time.perf_counter()
      graph_rewrite(e, symbolic, name="bench random")
      dt = time.perf_counter() - t
    return size, (dt, sum(rewrite_stats["bench random"].values()))
  size, (dt, fired) = min((run_random() for _ in range(3)), key=lambda r: r[1][0])
  res["random index expr: nodes/s"] = size / dt
  res["random index expr: rewrites/s"] = fired / dt
  return res

def bench_tinygrad(n: int) -> dict[str, float] | None:
  try:
    from tinygrad.uop.ops import UOp, graph_rewrite, PatternMatcher, UPat  # type: ignore
    from tinygrad.uop.symbolic import symbolic  # type: ignore
    from tinygrad.dtype import dtypes  # type: ignore
  except Exception: return None
  x = UOp.variable("x", 0, 100)
  chain = x
  for i in range(n): chain = (chain + 0) * 1 if i % 2 else chain + 0
  pm = PatternMatcher([(UPat.var("x") + 0, lambda x: x), (UPat.var("x") * 1, lambda x: x)])
  nodes = len(chain.toposort())
  dt, _ = timeit(lambda: graph_rewrite(chain, pm))
  res = {"x+0 chain: nodes/s": nodes / dt}
  dt, _ = timeit(lambda: graph_rewrite(chain, symbolic))
  res["x+0 chain (symbolic): nodes/s"] = nodes / dt
  e = random_index_expr(UOp, lambda name, lo, hi: UOp.variable(name, lo, hi, dtypes.index), n, seed=1)
  size = len(e.toposort())
  dt, _ = timeit(lambda: graph_rewrite(e, symbolic), reps=1)  # (cached bounds after the first run would flatter it)
  res["random index expr: nodes/s"] = size / dt
  return res

if __name__ == "__main__":
  n = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
  sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * n))  # tinygrad's rewrite recurses; ours does not
  ours = bench_core(n)
  peer = bench_tinygrad(n)
  print(f"graph_rewrite benchmark, {n} nodes")
  for k, v in ours.items():
    ratio = f"  ({v / peer[k]:.2f}x tinygrad)" if peer and k in peer else ""
    print(f"  {k:36s} {v:12,.0f}{ratio}")
  if peer is None: print("  (tinygrad not installed: no peer to compare with)")
