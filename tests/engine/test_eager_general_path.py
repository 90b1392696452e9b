"""Tensor.realize on the general path (a graph the eager op cache does not take: an op over a view of a buffer): the eager op
cache's fill rejects a root whose walk read buffers under its sources from that walk's inputs, without searching the sources
(_pure) or walking again; the root's memo is made only when its node outlives the call (as on an op cache hit)."""
from __future__ import annotations
import numpy as np
import pytest
import core.engine.realize as R
from core import Tensor

def _t(a: np.ndarray) -> Tensor: return Tensor(a).realize()

def _no_pure(monkeypatch: pytest.MonkeyPatch) -> None:
  def fail(x: object) -> bool: raise AssertionError("_pure searched a source")
  monkeypatch.setattr(R, "_pure", fail)

@pytest.mark.parametrize("name", ["sum", "softmax", "layernorm", "permuted"])
def test_fill_rejects_buffers_under_sources_from_the_walk(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
  rng = np.random.default_rng(1)
  a, wn, bn = rng.standard_normal((8, 16)).astype(np.float32), rng.standard_normal(16).astype(np.float32), rng.standard_normal(16).astype(np.float32)
  x, w, b = _t(a), _t(wn), _t(bn)
  a64 = a.astype(np.float64)
  e = np.exp(a64 - a64.max(-1, keepdims=True))
  mu, var = a64.mean(-1, keepdims=True), a64.var(-1, keepdims=True)
  cases = {"sum": (lambda: x.sum(), a64.sum()), "softmax": (lambda: x.softmax(), e / e.sum(-1, keepdims=True)),
           "layernorm": (lambda: x.layernorm() * w + b, (a64 - mu) / np.sqrt(var + 1e-5) * wn + bn),
           "permuted": (lambda: x.permute(1, 0).exp(), np.exp(a64.T))}
  mk, want = cases[name]
  _no_pure(monkeypatch)
  n = len(R.eager_ops)
  for _ in range(3): np.testing.assert_allclose(mk().realize().numpy(), want, rtol=1e-5, atol=1e-5)
  # a sum's or softmax's node is a plan's output, keyed over the plan's inputs (core.tensor.plans), and a layernorm * w + b
  # is keyed by its ALU ops over the plan and the broadcasts of w and b: filled, with no node held as itself to search. The
  # permute under exp is held as itself: its buffer is not among the key's, which the walk's tell before any search
  assert len(R.eager_ops) == n + (name != "permuted")

def test_fill_still_takes_an_op_over_a_pure_source() -> None:
  # x * 2.5's scalar is a source the key holds as itself (no buffer under it): still an op cache entry, hits from then on
  a = np.arange(12, dtype=np.float32).reshape(3, 4)
  x = _t(a)
  for _ in range(3): (x * 2.5).realize()
  hits = R.eager_ops.hits
  np.testing.assert_array_equal((x * 2.5).realize().numpy(), a * 2.5)
  assert R.eager_ops.hits == hits + 1

def test_fill_after_a_memo_substitution_takes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
  a = np.arange(16, dtype=np.float32)
  x = _t(a)
  t = x.exp()
  u = t + 1   # a graph over t, which is then realized: u's walk meets t's memo
  t.realize()
  _no_pure(monkeypatch)
  n = len(R.eager_ops)
  np.testing.assert_allclose(u.realize().numpy(), np.exp(a) + 1, rtol=1e-6)
  assert len(R.eager_ops) == n

def test_no_memo_for_a_root_nothing_else_holds(monkeypatch: pytest.MonkeyPatch) -> None:
  x = _t(np.arange(64, dtype=np.float32))
  made: list[object] = []
  real = R._memoize
  def memoize(roots: tuple, res: list) -> None:
    made.append(roots)
    real(roots, res)
  monkeypatch.setattr(R, "_memoize", memoize)
  for _ in range(3): assert float(x.sum().realize().numpy()) == 2016.0
  assert made == []

def test_memo_for_a_root_a_graph_still_reads() -> None:
  a = np.arange(64, dtype=np.float32)
  x = _t(a)
  t = x.sum()
  u = t + 1
  t.realize()
  assert R._memo_of(R.facts.get(u.uop.src[0])) is not None   # u's graph reads t's result now
  assert float(u.realize().numpy()) == 2017.0
  s = x.softmax()
  keep = s.uop
  s.realize()
  assert R._memo_of(R.facts.get(keep)) is not None   # held by `keep`: memoized
  e = np.exp(a - a.max())
  np.testing.assert_allclose(s.numpy(), e / e.sum(), rtol=1e-5, atol=1e-7)
