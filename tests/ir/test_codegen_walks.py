"""The walks codegen repeats per kernel: toposort's order, graph_rewrite asking only rules that exist for an op, and one
symbolic memo shared by every simplify of a kernel and kept for the thread's next one (shared_simplify)."""
import threading
from core.ir.dtype import dtypes
from core.ir.ops import UOp, Ops, Variable
from core.ir.pattern import UPat, PatternMatcher, graph_rewrite
from core.ir.symbolic import symbolic, simplify, shared_simplify, mark_simplified

def _counted(monkeypatch, pm: PatternMatcher) -> list[UOp]:
  """The nodes graph_rewrite asks `pm` to rewrite (pm.rewrite shadowed on the instance)."""
  asked: list[UOp] = []
  orig = pm.rewrite
  def rewrite(u, ctx=None, track=None):
    asked.append(u)
    return orig(u, ctx, track)
  monkeypatch.setattr(pm, "rewrite", rewrite, raising=False)
  return asked

def test_toposort_is_depth_first_sources_in_order():
  x, y = UOp(Ops.DEFINE_VAR, dtypes.index, arg=("x", 0, 9)), UOp(Ops.DEFINE_VAR, dtypes.index, arg=("y", 0, 9))
  a = UOp(Ops.ADD, dtypes.index, (x, y))
  b = UOp(Ops.MUL, dtypes.index, (a, a))   # a source twice
  c = UOp(Ops.ADD, dtypes.index, (b, a))   # a reached again after its user
  assert list(c.toposort()) == [x, y, a, b, c]
  # a gate stops the walk below a node but keeps the node
  assert list(c.toposort(gate=lambda u: u is not a)) == [a, b, c]
  assert list(c.toposort(gate=lambda u: False)) == [c]

def test_graph_rewrite_asks_only_ops_with_rules(monkeypatch):
  x = Variable("x", 0, 10)
  w = (x < 5).where(x + 1, x * 2)
  pm = PatternMatcher([(UPat(Ops.WHERE, name="w"), lambda w: w.src[1])])
  asked = _counted(monkeypatch, pm)
  assert graph_rewrite(w.sink(), pm) is (x + 1).sink()
  assert [u.op for u in asked] == [Ops.WHERE]   # not x, the constants, the compare, the add, the mul or the sink

def test_shared_simplify_answers_a_simplified_node_from_its_memo(monkeypatch):
  x, y = Variable("x", 0, 10), Variable("y", 0, 10)
  e = (x * 4 + y * 4 + 8) // 4 + 0
  asked = _counted(monkeypatch, symbolic)
  want = graph_rewrite(e, symbolic)
  assert asked and simplify(e) is want and simplify(e, memo={}) is want
  asked.clear()
  assert simplify(e) is want and asked   # outside a session each call starts over
  with shared_simplify():
    assert simplify(e) is want
    asked.clear()
    assert simplify(e) is want and simplify(e) is want and asked == []   # from the memo: no rule asked again

def test_a_node_marked_simplified_is_answered_from_the_memo(monkeypatch):
  # mark_simplified records a node the caller built as simplify returns it: later calls in the session stop there
  x, y = Variable("x", 0, 10), Variable("y", 0, 10)
  u = graph_rewrite((x + 1) * 4 + y, symbolic)
  assert graph_rewrite(u, symbolic) is u
  asked = _counted(monkeypatch, symbolic)
  with shared_simplify():
    assert mark_simplified(u) is u
    assert simplify(u) is u and asked == []
  mine: dict[UOp, UOp] = {}
  assert mark_simplified(u, mine) is u and mine == {u: u}   # outside a session: the caller's memo
  assert simplify(u, memo=mine) is u and asked == []
  assert mark_simplified(u) is u and simplify(u) is u and asked   # no session, no memo: nothing recorded

def test_shared_simplify_nests_into_the_outer_memo_and_stays_in_its_thread():
  import core.ir.symbolic as S
  x = Variable("x", 0, 10)
  seen: list = []
  with shared_simplify():
    memo = S._memo.done
    with shared_simplify(): assert S._memo.done is memo
    assert S._memo.done is memo
    simplify(x + 0)
    assert memo.get(x + 0) is x
    t = threading.Thread(target=lambda: seen.append(getattr(S._memo, "done", None)))
    t.start()
    t.join()
  assert seen == [None] and S._memo.done is None

def test_a_kernels_codegen_simplifies_with_one_memo(monkeypatch):
  # program._program opens shared_simplify around the whole codegen: every simplify of one kernel (trial opts, rebuilds, the
  # expander's unrolled copies) passes graph_rewrite the same memo, and none is left open after it
  import numpy as np
  import core.ir.symbolic as S
  from core import Tensor
  from core.device.registry import Device
  from core.codegen.program import get_program
  from core.schedule.kernelize import create_schedule
  memos: list[int | None] = []
  orig = S.graph_rewrite
  def spy(u, pm, *a, memo=None, **kw):
    memos.append(None if memo is None else id(memo))
    return orig(u, pm, *a, memo=memo, **kw)
  monkeypatch.setattr(S, "graph_rewrite", spy)
  x = Tensor(np.arange(24, dtype=np.float32).reshape(4, 6)).realize()
  items, _, _ = create_schedule([(x * 2 + 1).sum(axis=1).uop])
  get_program(items[-1].ast, Device[Device.DEFAULT].renderer)
  assert memos and None not in memos and len(set(memos)) == 1, memos
  assert getattr(S._memo, "done", None) is None

def test_shared_simplify_keeps_the_memo_for_the_threads_next_kernel(monkeypatch):
  # kernels of one shape ask for the same index math: the next session answers it from the memo, asking no rule (a new memo
  # per session asked them all again); past SIMPLIFY_MEMO_ENTRIES the next session starts a new one; another thread has its own
  import core.ir.symbolic as S
  x, y = Variable("x", 0, 10), Variable("y", 0, 10)
  e = (x * 4 + y * 4 + 8) // 4 + 0
  want = graph_rewrite(e, symbolic)
  with shared_simplify():
    assert simplify(e) is want
    memo = S._memo.done
  asked = _counted(monkeypatch, symbolic)
  with shared_simplify():
    assert S._memo.done is memo and simplify(e) is want and asked == []
  theirs: list = []
  def other() -> None:
    with shared_simplify(): theirs.append(S._memo.done)
  t = threading.Thread(target=other)
  t.start()
  t.join()
  assert theirs and theirs[0] is not memo and theirs[0] is not None
  monkeypatch.setattr(S, "SIMPLIFY_MEMO_ENTRIES", len(memo) - 1)
  with shared_simplify():
    assert S._memo.done is not memo and S._memo.done == {}
    assert simplify(e) is want and asked
  assert S._memo.done is None

def test_a_sink_is_walked_once_and_each_caller_gets_its_own_order(monkeypatch):
  x, y = Variable("x", 0, 9), Variable("y", 0, 9)
  e = (x + y) * 2
  s = e.sink(x)
  walks: list[UOp] = []
  walk = UOp._walk
  monkeypatch.setattr(UOp, "_walk", lambda u, gate: walks.append(u) or walk(u, gate))
  first = s.toposort()
  assert list(first) == [x, y, x + y, UOp.const(dtypes.index, 2), e, s] and walks == [s]
  first.clear()   # a caller's copy: changing it changes no later answer
  assert list(s.toposort()) == [x, y, x + y, UOp.const(dtypes.index, 2), e, s] and walks == [s]
  # other nodes, and gated walks of a sink, walk each time (a membership test on every subexpression would keep a walk each)
  e.toposort(); e.toposort(); s.toposort(gate=lambda u: True)
  assert walks == [s, e, e, s]

def _ref_toposort(root: UOp, gate=None) -> list[UOp]:
  """toposort by recursion: each node after its sources, sources in order, not below a node the gate refuses."""
  out: dict[UOp, None] = {}
  def visit(u: UOp, top: bool) -> None:
    if u in out: return
    if top or gate is None or gate(u):
      for s in u.src: visit(s, False)
    out[u] = None
  if gate is not None and not gate(root): return [root]
  visit(root, True)
  return list(out)

def _ref_substitute(root: UOp, mapping: dict[UOp, UOp]) -> UOp:
  memo: dict[UOp, UOp] = {}
  def go(u: UOp) -> UOp:
    if u in mapping: return mapping[u]
    if u not in memo: memo[u] = u.replace(src=tuple(go(s) for s in u.src))
    return memo[u]
  return go(root)

def _random_dag(rng, n: int) -> list[UOp]:
  nodes = [Variable(f"v{i}", 0, 9) for i in range(3)]
  for _ in range(n):
    a, b = rng.choice(nodes), rng.choice(nodes[-6:])   # recent nodes often: deep, shared subgraphs
    nodes.append(UOp(rng.choice([Ops.ADD, Ops.MUL, Ops.MAX]), dtypes.index, (a, b) if rng.random() < 0.8 else (a, b, a)))
  return nodes

def test_walks_and_substitute_match_recursive_references():
  # toposort's and substitute's iterative walks (no seen set: a graph has no cycle; a stop set in place of a gate) against plain
  # recursion, on random DAGs with shared subgraphs, sources repeated, gates and replacements anywhere (the root, a node below
  # another replaced one)
  import random
  rng = random.Random(0)
  for trial in range(60):
    nodes = _random_dag(rng, rng.randrange(5, 80))
    root = nodes[-1]
    assert list(root.toposort()) == _ref_toposort(root)
    stop = set(rng.sample(nodes, 3))
    gate = lambda u: u not in stop   # noqa: E731
    assert list(root.toposort(gate=gate)) == _ref_toposort(root, gate)
    assert list(root.toposort(stop=stop)) == _ref_toposort(root, gate)
    sub = {u: Variable(f"w{trial}_{i}", 0, 9) for i, u in enumerate(rng.sample(nodes, rng.randrange(1, 4)))}
    assert root.substitute(sub) is _ref_substitute(root, sub)
  assert root.substitute({root: nodes[0]}) is nodes[0] and list(root.toposort(stop={root})) == [root]

def test_substitute_is_iterative():
  x, y = Variable("x", 0, 10), Variable("y", 0, 10)
  deep = x
  for _ in range(50_000): deep = deep + 1
  assert deep.substitute({x: y}).toposort().keys() >= {y} and x not in deep.substitute({x: y}).toposort()
