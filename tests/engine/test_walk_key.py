"""realize._walk's schedule-cache key: the nested walk and the stack walk (deep graphs) give the same key, inputs and literals."""
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

@pytest.mark.parametrize("name", list(_graphs()))
def test_nested_walk_equals_stack_walk(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
  roots = _graphs()[name]
  for lift in (True, False):
    # each form on its own: a walk that numbers literals marks constant subgraphs, which a later walk keys as themselves
    monkeypatch.setattr(R, "_plain_epoch", R._plain_epoch + 1)
    nested = R._walk_nested(roots, True, lift)
    monkeypatch.setattr(R, "_plain_epoch", R._plain_epoch + 1)
    assert nested == R._walk_deep(roots, True, lift)
    # a second walk sees the marks the first made: both forms key marked subgraphs as themselves
    assert R._walk_nested(roots, True, lift) == R._walk_deep(roots, True, lift)

def test_many_literals_are_kept_in_the_key() -> None:
  roots = _graphs()["many_literals"]
  w = R._walk(roots, True)
  assert w is not None and w[4] == () and len(w[0]) > R.MAX_LIFTED

def test_deep_graph_takes_the_stack_walk() -> None:
  a = Tensor(np.arange(8, dtype=np.float32)).realize()
  y = a
  for i in range(sys.getrecursionlimit() + 200): y = y + float(i % 7 + 2)
  with pytest.raises(RecursionError): R._walk_nested([y.uop], True, False)
  w = R._walk([y.uop], True, lift=False)
  assert w is not None and w == R._walk_deep([y.uop], True, False) and len(w[0]) > sys.getrecursionlimit()

def test_memo_hit_makes_the_walk_substitute() -> None:
  a = Tensor(np.arange(4, dtype=np.float32)).realize()
  b = a * 2.5
  node = b.uop
  b.realize()   # `node` (still alive) now has a memo entry
  c = a * 2.5 + 1   # builds the same node again under its add
  assert c.uop.src[0] is node
  assert R._walk([c.uop], True) is None and R._walk_deep([c.uop], True, True) is None
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
    R._walk_nested(roots, True, True)
    assert [sys.getrefcount(u) for u in nodes] == before
  finally: gc.enable()
