"""UOp: hash-consing, weakref freeing, graph walking, bounds, variables and the printed-Python round trip."""
from __future__ import annotations
import gc, math, random
import pytest
from core.ir.dtype import dtypes
from core.ir.ops import UOp, UOpMeta, Ops, Variable, exec_uop_tree
from core.ir.render import eval_uop

def test_hash_consing_gives_the_same_object():
  x = Variable("x", 0, 10)
  assert (x + 1) is (x + 1) and UOp(Ops.CONST, dtypes.int32, arg=3) is UOp(Ops.CONST, dtypes.int32, arg=3)
  assert UOp(Ops.CONST, dtypes.int32, arg=3) is not UOp(Ops.CONST, dtypes.int64, arg=3)
  # args Python calls equal stay apart: 0.0 / -0.0, 1 / True
  assert UOp(Ops.CONST, dtypes.float32, arg=0.0) is not UOp(Ops.CONST, dtypes.float32, arg=-0.0)
  assert UOp(Ops.NOOP, arg=1) is not UOp(Ops.NOOP, arg=True)
  assert UOp(Ops.CONST, dtypes.float32, arg=math.nan) is UOp(Ops.CONST, dtypes.float32, arg=math.nan)

def test_dropping_a_graph_frees_its_nodes():
  gc.collect()
  before = len(UOpMeta.ucache)
  x = Variable("free_me", 0, 1000)
  g = x
  for i in range(2000): g = g * 3 + i
  assert len(UOpMeta.ucache) >= before + 2000
  del g, x
  gc.collect()
  assert len(UOpMeta.ucache) <= before + 5

def test_a_new_node_is_filled_without_the_guard_and_is_a_uop():
  # UOpMeta and rebuild store a new node's fields as a _UOpFields (no setter guard: plain slot stores), then make it a UOp; the
  # fields are the base's slots, UOp adds none (so the __class__ assignment is allowed) and keeps its guard
  import weakref
  from core.ir.ops import _UOpFields, rebuild
  assert UOp.__slots__ == () and _UOpFields.__setattr__ is object.__setattr__
  x = UOp(Ops.CONST, dtypes.int32, arg=7001)
  u = UOp(Ops.ADD, dtypes.int32, (x, x), tag="t")
  assert type(u) is UOp and (u.op, u.dtype, u.src, u.arg, u.tag) == (Ops.ADD, dtypes.int32, (x, x), None, "t")
  assert u._key == (Ops.ADD, dtypes.int32, (x, x), None, "t") and weakref.ref(u)() is u and u.shape == ()
  with pytest.raises(AttributeError, match="immutable"): u.op = Ops.MUL
  nodes: list[UOp] = [x]
  rebuild(nodes, [(Ops.ADD, dtypes.int32, (0, 0), None, None, "t"), (Ops.MUL, dtypes.int32, (1, 0), None, None, None)])
  assert nodes[1] is u and type(nodes[2]) is UOp and nodes[2] is UOp(Ops.MUL, dtypes.int32, (u, x))
  n = len(UOpMeta.ucache)
  del u, nodes
  gc.collect()
  assert len(UOpMeta.ucache) == n - 2   # the ADD and the MUL: their entries went at their deaths

def test_core_ir_builders_intern_as_uop_does():
  # hot builders (core/ir's, codegen's) call intern_uop (UOpMeta's __call__) directly: the same table, so the same nodes
  from core.ir.ops import intern_uop
  x = UOp(Ops.CONST, dtypes.int32, arg=7004)
  assert UOpMeta.__call__ is intern_uop and intern_uop(UOp, Ops.ADD, dtypes.int32, (x, x)) is UOp(Ops.ADD, dtypes.int32, (x, x)) is x + x
  # args Python calls equal keep their own keys (float, bool, tuple args are keyed by _arg_key)
  assert intern_uop(UOp, Ops.CONST, dtypes.float32, (), -0.0) is not UOp(Ops.CONST, dtypes.float32, (), 0.0)
  assert intern_uop(UOp, Ops.NOOP, arg=(1.0,)) is not UOp(Ops.NOOP, arg=(True,)) and intern_uop(UOp, Ops.NOOP, arg=(1,)) is UOp(Ops.NOOP, arg=(1,))
  assert x.alu(Ops.MUL, x) is UOp(Ops.MUL, dtypes.int32, (x, x)) and x.cast(dtypes.int64) is UOp(Ops.CAST, dtypes.int64, (x,))

def test_a_dying_node_leaves_another_live_nodes_entry():
  # a dying node takes its key's entry out only while that entry is dead: as if an equal node had been built after the dying
  # node's weak reference was cleared (a collection of a cycle)
  import weakref
  x, y = UOp(Ops.CONST, dtypes.int32, arg=7002), UOp(Ops.CONST, dtypes.int32, arg=7003)
  key = x._key
  UOpMeta.ucache[key] = weakref.ref(y)
  del x
  gc.collect()
  assert UOpMeta.ucache[key]() is y
  del UOpMeta.ucache[key]
  z = UOp(Ops.CONST, dtypes.int32, arg=7002)
  assert z._key == key and UOpMeta.ucache[key]() is z and UOpMeta.ucache[y._key]() is y
  n = len(UOpMeta.ucache)
  del z
  assert len(UOpMeta.ucache) == n - 1 and key not in UOpMeta.ucache

def test_a_dropped_duplicate_never_hides_the_live_node_from_another_thread():
  # a duplicate that lost its key's entry (rebuild's, or two threads building one node) dies unstored: its death must leave
  # the live node's entry in place at every moment, or a thread looking the node up meanwhile builds a second, equal node
  import sys, threading
  from core.ir.ops import rebuild
  live = UOp(Ops.CONST, dtypes.int32, arg=7005)
  done, other = threading.Event(), []
  def drop_duplicates() -> None:
    for _ in range(100_000): rebuild([], [(Ops.CONST, dtypes.int32, (), 7005, 7005, None)])   # equal to live: made, then dropped
    done.set()
  def look_up() -> None:
    while not done.is_set(): other.extend(u for u in [UOp(Ops.CONST, dtypes.int32, arg=7005) for _ in range(100)] if u is not live)
  interval = sys.getswitchinterval()
  sys.setswitchinterval(1e-6)   # switch threads often, inside a death too
  try:
    threads = [threading.Thread(target=drop_duplicates), threading.Thread(target=look_up)]
    for t in threads: t.start()
    for t in threads: t.join()
  finally: sys.setswitchinterval(interval)
  assert not other and UOpMeta.ucache[live._key]() is live

class _HashHook:
  """A node's arg whose hash runs `hook` at the `at`-th hash from arming: every step of a lookup, a build or a death hashes
  the node's key, so this is another thread taking over at that step, made deterministic."""
  def __init__(self, n: int): self.n, self.at, self.hook = n, 0, None
  def arm(self, at: int, hook) -> None: self.at, self.hook = at, hook
  def __hash__(self) -> int:
    if self.hook is not None:
      self.at -= 1
      if self.at == 0:
        hook, self.hook = self.hook, None
        hook()
    return hash(self.n)

@pytest.mark.parametrize("at", [1, 2, 3, 4])
@pytest.mark.parametrize("route", ["refcount", "cycle"])
def test_a_node_built_while_an_equal_node_dies_is_the_one_the_table_holds(route, at):
  # a build at any step of an equal node's death gets a node that stays the table's: with UOp.__del__ the dying node's weak
  # reference was still live while __del__ ran, so a lookup then revived it without an entry (refcount, at 1 and 2); in a
  # collection the weak reference is cleared first, and __del__'s look-then-delete took out the entry of a node built between
  # the two (cycle, at 2). Either way a later build made a second, equal node
  import weakref
  arg, built = _HashHook(8000 + at), []
  x = UOp(Ops.SINK, dtypes.void, (), arg)
  wx = weakref.ref(x)
  if route == "cycle": x.toposort()   # a SINK keeps its walk, itself in it: a cycle, so x dies in a collection
  arg.arm(at, lambda: built.append(UOp(Ops.SINK, dtypes.void, (), arg)))
  del x
  if route == "cycle":
    assert wx() is not None
    gc.collect()
  assert wx() is None or (built and wx() is built[0])
  if not built: built.append(UOp(Ops.SINK, dtypes.void, (), arg))   # the death hashed fewer times
  y = built[0]
  assert UOp(Ops.SINK, dtypes.void, (), arg) is y and UOpMeta.ucache[y._key]() is y

@pytest.mark.parametrize("at", [1, 2, 3, 4, 5])
def test_two_builds_over_a_dead_entry_give_one_node(at):
  # a build that finds its key's entry dead (a node whose weak reference a collection cleared, its death not yet run) stores its
  # own: overwriting it unconditionally let another build's entry, stored in between, be overwritten (at 3): two equal live nodes
  import weakref
  class Gone: pass
  arg, built = _HashHook(8100 + at), []
  key = (Ops.NOOP, dtypes.void, (), arg, None)
  gone = Gone()
  UOpMeta.ucache[key] = weakref.ref(gone)
  del gone
  arg.arm(at, lambda: built.append(UOp(Ops.NOOP, dtypes.void, (), arg)))
  y = UOp(Ops.NOOP, dtypes.void, (), arg)
  assert all(b is y for b in built) and UOpMeta.ucache[key]() is y and UOp(Ops.NOOP, dtypes.void, (), arg) is y

def test_threads_building_and_dropping_one_node_share_it():
  # two threads build, check and drop the same node over and over (switching every microsecond): equal live nodes are one
  # node and it is the table's. With UOp.__del__ a build inside another thread's death revived the dying node without an entry
  import sys, threading
  bad: list[int] = []
  def churn() -> None:
    for i in range(150_000):
      a, b = UOp(Ops.CONST, dtypes.int32, arg=8200), UOp(Ops.CONST, dtypes.int32, arg=8200)
      if a is not b or (r := UOpMeta.ucache.get(a._key)) is None or r() is not a: bad.append(i)
      del a, b
  interval = sys.getswitchinterval()
  sys.setswitchinterval(1e-6)
  try:
    threads = [threading.Thread(target=churn) for _ in range(2)]
    for t in threads: t.start()
    for t in threads: t.join()
  finally: sys.setswitchinterval(interval)
  assert not bad

def test_toposort_orders_sources_first_and_handles_depth():
  x = Variable("x", 0, 10)
  a, b = x + 1, x * 2
  c = a + b
  order = list(c.toposort())
  assert order.index(x) < order.index(a) < order.index(c) and order.index(b) < order.index(c) and order[-1] is c
  assert len(order) == len(set(order)) == 6  # x, 1, a, 2, b, c
  deep = x
  for _ in range(50_000): deep = deep + 1
  assert len(deep.toposort()) == 50_002

def test_substitute_and_replace():
  x, y = Variable("x", 0, 10), Variable("y", 0, 5)
  e = (x + 1) * (x + 2)
  assert e.substitute({x: y}) is (y + 1) * (y + 2)
  assert e.substitute({}) is e
  assert e.replace(op=Ops.ADD) is (x + 1) + (x + 2)
  assert e.replace() is e
  with pytest.raises(TypeError): e.replace(bogus=1)
  with pytest.raises(AttributeError): e.arg = 3  # type: ignore[misc]

def test_vmin_vmax():
  x, y = Variable("x", 2, 10), Variable("y", -3, 4)
  assert ((x + y).vmin, (x + y).vmax) == (-1, 14)
  assert ((x * y).vmin, (x * y).vmax) == (-30, 40)
  assert ((x // 3).vmin, (x // 3).vmax) == (0, 3)
  assert ((y % 3).vmin, (y % 3).vmax) == (-2, 2)
  assert ((x - y).vmin, (x - y).vmax) == (-2, 13)
  assert ((x < 2).vmin, (x < 2).vmax) == (False, False) and ((x < 11).vmin, (x < 11).vmax) == (True, True)
  assert (x.maximum(y).vmin, x.maximum(y).vmax) == (2, 10)
  i8 = Variable("z", 100, 120, dtypes.int8)
  assert ((i8 + 10).vmin, (i8 + 10).vmax) == (110, 127) or ((i8 + 10).vmin, (i8 + 10).vmax) == (-128, 127)
  assert ((i8 + 20).vmin, (i8 + 20).vmax) == (-128, 127)  # may wrap: no narrower bound is safe
  assert (UOp.range(16, 0).vmin, UOp.range(16, 0).vmax) == (0, 15)
  f = Variable("f", 0, 1, dtypes.int32).cast(dtypes.float32)
  assert ((f * 0.0 < 1.0).vmin, (f * 0.0 < 1.0).vmax) == (False, True)  # float bounds can hide NaN: never decide them

def test_shift_bounds_respect_masked_counts():
  x = Variable("x", 0, 2**31 - 1, dtypes.int32)
  s = x >> 40  # int32 masks the count to 8
  vals = [exec_uop_tree(s, {x: v}) for v in (0, 255, 2**31 - 1)]
  assert all(s.vmin <= v <= s.vmax for v in vals) and max(vals) == (2**31 - 1) >> 8

def test_variable_and_bind():
  v = Variable("n", 1, 32)
  assert v.op is Ops.DEFINE_VAR and v.expr == "n" and (v.vmin, v.vmax) == (1, 32)
  b = v.bind(7)
  assert b.unbind() == (v, 7) and b.vmin == 1
  with pytest.raises(ValueError): v.bind(33)
  with pytest.raises(ValueError): Variable("bad", 3, 2)
  assert (v * 2 + Variable("m", 0, 3)).variables() == [Variable("m", 0, 3), v]

def test_exec_uop_tree_uses_c_semantics():
  x = Variable("x", -10, 10, dtypes.int32)
  assert exec_uop_tree(x // 3, {x: -7}) == -2 and exec_uop_tree(x % 3, {x: -7}) == -1
  y = Variable("y", 0, 255, dtypes.uint8)
  assert exec_uop_tree(y + 10, {y: 250}) == 4

def _random_graph(rng: random.Random) -> UOp:
  vs = [Variable(n, 0, rng.randint(1, 9)) for n in "abc"]
  fconst = [0.0, -0.0, math.inf, -math.inf, math.nan, 1.5, -2.25]
  nodes: list[UOp] = list(vs)   # index-valued nodes
  others: list[UOp] = []        # float, void and structural nodes
  for _ in range(rng.randint(1, 25)):
    k = rng.randrange(7)
    a, b = rng.choice(nodes), rng.choice(nodes)  # picking earlier nodes again makes shared subgraphs
    if k == 0: nodes.append(a + b)
    elif k == 1: nodes.append(a * rng.randint(-5, 5))
    elif k == 2: nodes.append((a < b).where(a, b))
    elif k == 3: others.append(a.cast(dtypes.float32) + UOp.const(dtypes.float32, rng.choice(fconst)))
    elif k == 4: others.append(UOp(Ops.SINK, src=(a, b, a)))
    elif k == 5: others.append(UOp(Ops.NOOP, dtypes.void, (a,) + tuple(others[-1:]), arg=(1, "s", (2.5, -0.0)), tag=rng.choice([None, "t", 3])))
    else: nodes.append(UOp.range(a, rng.randint(0, 3)))
  nodes += others
  return UOp(Ops.SINK, src=tuple(nodes[-3:]))

def test_repr_round_trip_on_random_graphs():
  rng = random.Random(0)
  for _ in range(500):
    g = _random_graph(rng)
    assert eval_uop(repr(g)) is g

def test_repr_round_trip_float_specials():
  for v in (math.nan, math.inf, -math.inf, -0.0, 0.0, 1e-300):
    c = UOp.const(dtypes.float64, v)
    assert eval_uop(repr(c)) is c
  p = UOp.param(0, dtypes.float32.ptr(16))
  assert eval_uop(repr(p.index(UOp.const(dtypes.index, 3)).load())) is p.index(UOp.const(dtypes.index, 3)).load()

# *** Ops reads as a plain namespace and still behaves as its enum ***

def test_ops_members_behave_as_the_enum():
  import enum
  from core.ir.ops import Ops, AxisType
  members = list(Ops)
  assert len(members) == len(Ops) and members[0] is Ops[members[0].name] and Ops(int(Ops.ADD)) is Ops.ADD
  assert isinstance(Ops.ADD, Ops) and isinstance(Ops.ADD, enum.IntEnum) and not isinstance(1, Ops)
  assert Ops.ADD in Ops and repr(Ops.ADD) == "Ops.ADD" and Ops.ADD.name == "ADD"
  assert sorted([Ops.MUL, Ops.ADD]) == sorted([Ops.ADD, Ops.MUL]) and AxisType.LOOP in set(AxisType)
  for bad in (lambda: Ops["NOT_AN_OP"], lambda: Ops(10**6)):
    try: bad()
    except (KeyError, ValueError): pass
    else: raise AssertionError("a bad name or value must raise")

def test_fast_members_keeps_the_members():
  import enum
  from core.helpers import fast_members
  class Color(enum.Enum):
    RED = 1
    BLUE = 2
  fast = fast_members(Color)
  assert fast.RED is Color.RED and list(fast) == [Color.RED, Color.BLUE] and fast(2) is Color.BLUE and fast["RED"] is Color.RED
