"""UPat matching and PatternMatcher / graph_rewrite behaviour."""
from __future__ import annotations
import io
from core.helpers import Context
from core.ir.dtype import dtypes
from core.ir.ops import UOp, Ops, Variable
from core.ir.pattern import UPat, PatternMatcher, graph_rewrite, graph_rewrite_map, print_rewrite_stats, rewrite_stats

x, y = Variable("x", 0, 10), Variable("y", 0, 10)
one = UOp.const(dtypes.index, 1)

def test_commutative_patterns_match_either_order():
  pat = UPat.var("a") + UPat.cvar("c")
  assert pat.match(x + 1, {}) == [{"a": x, "c": one}]
  assert pat.match(one + x, {}) == [{"a": x, "c": one}]
  assert pat.match(x * 1, {}) == []
  both = UPat(Ops.ADD, src=[UPat.var("a"), UPat.var("b")])
  assert both.match(x + y, {}) == [{"a": x, "b": y}, {"a": y, "b": x}]

def test_fixed_order_and_allow_any_len():
  pat = UPat(Ops.SINK, src=(UPat.var("a"),))
  assert pat.match(x.sink(), {}) == [{"a": x}]
  assert pat.match(x.sink(y), {}) == []
  loose = UPat(Ops.SINK, src=(UPat.var("a"),), allow_any_len=True)
  assert loose.match(x.sink(y, one), {}) == [{"a": x}]
  every = UPat(Ops.SINK, src=UPat(Ops.DEFINE_VAR, name="v"))
  assert every.match(x.sink(x), {}) == [{"v": x}] and every.match(x.sink(y), {}) == [] and every.match(x.sink(one), {}) == []

def test_named_captures_must_agree():
  pat = UPat.var("a") + UPat.var("a")
  assert pat.match(x + x, {}) == [{"a": x}]
  assert pat.match(x + y, {}) == []
  assert (UPat.var("a") + UPat.var("b")).match(x + y, {"a": y}) == [{"a": y, "b": x}]

def test_arg_dtype_tag_custom():
  assert UPat(Ops.CONST, arg=1).match(one, {}) and not UPat(Ops.CONST, arg=2).match(one, {})
  assert not UPat(Ops.CONST, arg=True).match(one, {})  # 1 is not True
  assert not UPat(Ops.CONST, arg=-0.0).match(UOp.const(dtypes.float32, 0.0), {})  # 0.0 is not -0.0
  assert UPat(dtype=dtypes.index).match(x, {})
  assert not UPat(dtype=dtypes.int32).match(x, {})
  assert UPat(dtype=dtypes.float32).match(UOp.const(dtypes.float32.vec(4), 1.0), {})  # vectors match their scalar
  tagged = UOp(Ops.NOOP, tag="t")
  assert UPat(Ops.NOOP, tag="t").match(tagged, {}) and not UPat(Ops.NOOP, tag="u").match(tagged, {})
  assert UPat(custom=lambda u: u.op is Ops.DEFINE_VAR).match(x, {}) and not UPat(custom=lambda u: False).match(x, {})

def test_upat_any():
  pat = UPat.any(UPat(Ops.MUL, name="m"), UPat(Ops.ADD, name="a"))
  assert pat.match(x + 1, {}) == [{"a": x + 1}] and pat.match(x * 2, {}) == [{"m": x * 2}] and pat.match(x, {}) == []
  pm = PatternMatcher([(pat, lambda **kw: UOp.const(dtypes.index, 7))])
  assert pm.rewrite(x * 2) is UOp.const(dtypes.index, 7) and pm.rewrite(x) is None

def test_first_rule_returning_a_uop_wins_and_none_falls_through():
  pm = PatternMatcher([(UPat(Ops.ADD, name="r"), lambda r: None), (UPat.var("a") + 1, lambda a: a), (UPat(Ops.ADD), lambda: one)])
  assert pm.rewrite(x + 1) is x and pm.rewrite(x + 2) is one and pm.rewrite(x * 2) is None

def test_add_and_ctx():
  pm1 = PatternMatcher([(UPat.var("a") + 0, lambda a: a)])
  pm2 = PatternMatcher([(UPat(Ops.DEFINE_VAR, name="v"), lambda ctx, v: ctx.get(v))])
  both = pm1 + pm2
  assert len(both) == 2
  assert graph_rewrite(x + 0 + y, both, ctx={x: one, y: one}) is one + one
  seen: list[UOp] = []
  graph_rewrite(x + y, PatternMatcher([(UPat(Ops.DEFINE_VAR, name="v"), lambda ctx, v: ctx.append(v))]), ctx=seen)
  assert seen == [x, y]

def test_bottom_up_vs_top_down():
  # (x+0)*1 with a rule on MUL that only fires while its source is still an ADD: the order decides the outcome
  e = (x + 0) * 1
  pm = PatternMatcher([(UPat(Ops.MUL, src=(UPat(Ops.ADD, name="a"), UPat.cvar("c"))), lambda a, c: UOp.const(dtypes.index, 99)),
                       (UPat.var("a") + 0, lambda a: a)])
  assert graph_rewrite(e, pm, bottom_up=True) is UOp.const(dtypes.index, 99)  # the MUL is tried before its source
  assert graph_rewrite(e, pm) is x * 1  # sources first: the ADD is gone before the MUL is tried

def test_rewrite_reaches_fixed_point_and_is_iterative():
  pm = PatternMatcher([(UPat.var("a") + 0, lambda a: a), (UPat.var("a") * 1, lambda a: a)])
  e = x
  for i in range(100_000): e = (e + 0) if i % 2 else (e * 1)
  assert graph_rewrite(e, pm) is x
  assert graph_rewrite(e, pm, bottom_up=True) is x
  counter = PatternMatcher([(UPat(Ops.CONST, arg=5, name="c"), lambda c: UOp.const(dtypes.index, 4)),
                            (UPat(Ops.CONST, arg=4, name="c"), lambda c: UOp.const(dtypes.index, 3))])
  assert graph_rewrite(x + 5, counter) is x + 3

def test_graph_rewrite_map():
  pm = PatternMatcher([(UPat.var("a") + 0, lambda a: a)])
  assert graph_rewrite_map(UOp.sink(x + 0, y), pm) == {x + 0: x, y: y}

def test_track_rewrites_counts_per_pass():
  rewrite_stats.clear()
  pm = PatternMatcher([(UPat.var("a") + 0, lambda a: a), (UPat.var("a") * 1, lambda a: a)])
  with Context(TRACK_REWRITES=1):
    graph_rewrite((x + 0) * 1 + (y * 1), pm, name="my pass")
  assert sum(rewrite_stats["my pass"].values()) == 3 and rewrite_stats["my pass"][1] == 2
  out = io.StringIO()
  print_rewrite_stats(file=out)
  assert "pass my pass: 3 rewrites" in out.getvalue()
  rewrite_stats.clear()
  graph_rewrite(x + 0, pm, name="untracked")
  assert "untracked" not in rewrite_stats

def test_graph_rewrite_memo_rewrites_shared_nodes_once():
  # two graphs sharing a subgraph: with one memo, the shared x+0 is rewritten in the first call only
  calls = []
  def fold(x):
    calls.append(x)
    return x
  pm = PatternMatcher([(UPat(Ops.ADD, src=(UPat.var("x"), UPat.cvar("c", vec=False))), lambda x, c: fold(x) if c.arg == 0 else None)])
  a = UOp(Ops.DEFINE_VAR, dtypes.int32, arg=("a", 0, 10))
  shared = (a + 0) * 3
  memo: dict = {}
  r1 = graph_rewrite(shared + 1, pm, memo=memo)
  r2 = graph_rewrite(shared + 2, pm, memo=memo)
  assert r1 is (a * 3) + 1 and r2 is (a * 3) + 2
  assert len(calls) == 1
  assert graph_rewrite(shared + 2, pm) is r2 and len(calls) == 2   # without the memo it is rewritten again

def test_node_only_rules_skip_the_matcher_and_keep_its_answers():
  # a rule whose pattern tests the node alone is called directly (no matcher, no capture dict): its compiled matcher never runs
  import functools
  class Ctx:
    def rule(self, x): return one if x.arg[0] == "x" else None
  def by_kw(x, ctx): return ctx.get(x)                         # parameters not in (ctx, name) order: passed by keyword
  rules = [(UPat(Ops.DEFINE_VAR, name="x", custom=lambda u: u.arg[0] == "q"), lambda x: x),   # returns its node: falls through
           (UPat(Ops.DEFINE_VAR, name="x", arg=("y", 0, 10)), by_kw),
           (UPat(Ops.DEFINE_VAR, name="x"), Ctx().rule),
           (UPat(Ops.CONST, dtype=dtypes.float32), lambda: False),                               # a non-UOp answer is an answer
           (UPat(Ops.CONST, name="c", arg=1), functools.partial(lambda k, c: UOp.const(c.dtype, c.arg + k), 1))]
  def no_matcher(*a: object) -> None: raise AssertionError("the matcher ran")
  for pat, _ in rules: pat._fn = no_matcher
  pm = PatternMatcher(rules)
  q = Variable("q", 0, 10)
  assert pm.rewrite(x) is one and pm.rewrite(y, ctx={y: x}) is x and pm.rewrite(q) is None
  assert pm.rewrite(UOp.const(dtypes.float32, 2.0)) is False and pm.rewrite(one) is UOp.const(dtypes.index, 2)
  two = UOp.const(dtypes.index, 2)
  assert graph_rewrite(x + y, pm, ctx={y: x}) is two + two

def test_top_down_rewrite_calls_rules_in_the_depth_first_order_of_the_memo_walk():
  # without a memo graph_rewrite walks the graph in toposort order, with one it walks depth first from the root: the rules (and
  # a ctx they change) see the same nodes in the same order, rewrites of rewrites included
  import random
  rng = random.Random(0)
  vs = [Variable(f"v{i}", 0, 10) for i in range(6)]
  nodes = list(vs)
  for _ in range(200): nodes.append(rng.choice(nodes) + rng.choice(nodes) if rng.random() < 0.5 else rng.choice(nodes) * rng.randint(0, 3))
  sink = UOp.sink(*rng.sample(nodes[100:], 12))
  def rules(seen: list) -> PatternMatcher:
    return PatternMatcher([(UPat(Ops.MUL, src=(UPat.var("a"), UPat.cvar("c"))), lambda ctx, a, c: seen.append(("mul", a, c)) or (a + a if c.arg == 2 else None)),
                           (UPat(Ops.ADD, name="r"), lambda ctx, r: seen.append(("add", r)) or None)])
  first: list = []
  second: list = []
  out = graph_rewrite(sink, rules(first), ctx=0)
  assert graph_rewrite(sink, rules(second), ctx=0, memo={}) is out and first == second and len(first) > 50
