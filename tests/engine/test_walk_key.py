"""realize._walk's schedule-cache key: a walk cut short by a RecursionError (a deep graph) and finished by _visit_rest gives the
key, inputs and literals of the whole nested walk."""
import sys
import numpy as np
import pytest
from core.tensor import Tensor
from core.ir.ops import UOp, Ops
import core.engine.realize as R

def _graphs() -> dict[str, list[UOp]]:
  rng = np.random.default_rng(0)
  def t(*s: int) -> Tensor: return Tensor(rng.standard_normal(s).astype(np.float32)).realize()
  x, w, m, v = t(2, 8, 12, 12), t(8, 1, 3, 3), t(64, 256), t(256)
  a = t(16)
  return {
    "conv": [x.conv2d(w, groups=8, padding=1, stride=2).uop],
    "layernorm_affine": [(m.layernorm() * v + 2.5).uop],
    "softmax": [m.softmax().uop],
    "same_input_twice": [(a + a * 3.5).uop],
    "two_roots_sharing": [(a * 2.5).uop, (a * 2.5 + a).uop],
    "many_literals": [sum((a * float(i) + 0.5 * i for i in range(2, 40)), a).uop],
    "constant_subgraph": [(a + Tensor.ones(16) * 3.0).uop],
  }

def _walk_cut_at(roots: list[UOp], lift: bool, extra: int) -> R.Walk | None:
  """_walk_graph with the interpreter's stack limited to `extra` levels above this call's (None for _Computed)."""
  limit = sys.getrecursionlimit()
  low = 1
  while True:   # the lowest limit the interpreter takes here is its current depth (the frame count leaves out C-level calls)
    try: sys.setrecursionlimit(low)
    except RecursionError: low += 1
    else: break
  sys.setrecursionlimit(low + extra)
  try: return R._walk_graph(roots, True, lift)
  except R._Computed: return None
  finally: sys.setrecursionlimit(limit)

@pytest.mark.parametrize("name", list(_graphs()))
def test_walk_cut_anywhere_gives_the_whole_walks_key(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
  # every cut point: in visit's recursion and inside the calls it makes (memo, liftable, marking); the nodes recorded before the
  # cut and those _visit_rest adds must make the whole walk's key
  roots = _graphs()[name]
  rest, visit_rest = [], R._visit_rest
  monkeypatch.setattr(R, "_visit_rest", lambda *a: rest.append(1) or visit_rest(*a))
  for lift in (True, False):
    # each walk on its own: a walk that numbers literals marks constant subgraphs, which a later walk keys as themselves
    monkeypatch.setattr(R, "_plain_epoch", R._plain_epoch + 1)
    whole = R._walk_graph(roots, True, lift)
    for extra in range(1, 60):
      monkeypatch.setattr(R, "_plain_epoch", R._plain_epoch + 1)
      try: cut = _walk_cut_at(roots, lift, extra)
      except RecursionError: continue   # too little stack even for _visit_rest's one level
      assert cut == whole, extra
    # a second walk sees the marks the first made: both key marked subgraphs as themselves
    assert _walk_cut_at(roots, lift, 20) == R._walk_graph(roots, True, lift)
  assert rest   # the cuts took the continuation

def test_many_literals_are_kept_in_the_key() -> None:
  roots = _graphs()["many_literals"]
  w = R._walk(roots, True)
  assert w is not None and w[4] == () and len(w[0]) > R.MAX_LIFTED

def test_deep_graph_walk_goes_on_after_the_recursion_limit() -> None:
  a = Tensor(np.arange(8, dtype=np.float32)).realize()
  y = a
  for i in range(sys.getrecursionlimit() + 200): y = y + float(i % 7 + 2)
  w = R._walk([y.uop], True, lift=False)
  limit = sys.getrecursionlimit()
  sys.setrecursionlimit(4 * limit)   # the walk without a cut: two Python frames a node, none in C
  try: whole = R._walk_graph([y.uop], True, False)
  finally: sys.setrecursionlimit(limit)
  assert w is not None and w == whole and len(w[0]) > sys.getrecursionlimit()

def test_memo_hit_makes_the_walk_substitute() -> None:
  a = Tensor(np.arange(4, dtype=np.float32)).realize()
  b = a * 2.5
  node = b.uop
  b.realize()   # `node` (still alive) now has a memo entry
  c = a * 2.5 + 1   # builds the same node again under its add
  assert c.uop.src[0] is node
  assert R._walk([c.uop], True) is None and all(_walk_cut_at([c.uop], True, extra) is None for extra in range(12, 30))
  np.testing.assert_array_equal(c.numpy(), np.arange(4, dtype=np.float32) * 2.5 + 1)

@pytest.mark.parametrize("name", list(_graphs()))
def test_nested_walk_keeps_no_reference_to_the_graph(name: str) -> None:
  # the engine reads nodes' refcounts (a realized node held elsewhere gets a memo): a walk must leave them as they were, with no
  # reference cycle holding its node table until the cyclic GC runs (a matmul of a.float() then read a.float()'s earlier result)
  import gc
  roots = _graphs()[name]
  nodes = list(UOp(Ops.SINK, src=tuple(roots)).toposort())
  gc.disable()
  try:
    before = [sys.getrefcount(u) for u in nodes]
    R._walk_graph(roots, True, True)
    assert [sys.getrefcount(u) for u in nodes] == before
    _walk_cut_at(roots, True, 12)   # and one finished by _visit_rest
    assert [sys.getrefcount(u) for u in nodes] == before
  finally: gc.enable()
