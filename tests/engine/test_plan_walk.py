"""An eager realize keys a plan's output (core.tensor.plans: softmax, layernorm, reductions, conv2d over realized inputs) by
the plan's key and its inputs instead of walking the plan's nodes, in the walk and in the eager op cache; the results are
those of the whole graph."""
import numpy as np
import pytest
import core.engine.realize as R
from core.tensor import Tensor, plans
from core.ir.ops import Ops

def _rand(shape: tuple, seed: int) -> np.ndarray: return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)

def _softmax(x: np.ndarray) -> np.ndarray:
  e = np.exp(x.astype(np.float64) - x.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)

def _layernorm(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
  x = x.astype(np.float64)
  y = x - x.mean(-1, keepdims=True)
  return y / np.sqrt((y * y).mean(-1, keepdims=True) + 1e-5) * w + b

def _plan_entries(key: tuple) -> list[tuple]: return [e for e in key if e[0] == R._PLAN]

@pytest.mark.parametrize("note", [True, False])
def test_a_plans_output_is_one_key_entry(monkeypatch: pytest.MonkeyPatch, note: bool) -> None:
  monkeypatch.setattr(plans, "NOTE_PLANS", note)
  x, w, b = Tensor(_rand((16, 32), 0)).realize(), Tensor(_rand((32,), 1)).realize(), Tensor(_rand((32,), 2)).realize()
  y = x.layernorm(-1) * w + b
  walk = R._walk([y.uop], True)
  assert walk is not None
  key, inputs = walk[0], walk[1]
  # the layernorm's ~15 nodes are one entry over x: key entries for x (reshape, buffer), the plan, w and b's broadcasts, ADD, MUL
  assert len(_plan_entries(key)) == (1 if note else 0)
  if note: assert len(key) < 14
  assert len(inputs) == 3
  np.testing.assert_allclose(y.numpy(), _layernorm(x.numpy(), w.numpy(), b.numpy()), rtol=1e-4, atol=1e-5)

def test_plan_keys_serve_other_inputs() -> None:
  # one schedule per key, run on other buffers of the same shapes: each call's values are its inputs'
  for seed in range(3):
    xs, ws, bs = _rand((64, 100), seed), _rand((100,), seed + 10), _rand((100,), seed + 20)
    x, w, b = Tensor(xs).realize(), Tensor(ws).realize(), Tensor(bs).realize()
    np.testing.assert_allclose(x.softmax(-1).realize().numpy(), _softmax(xs), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose((x.layernorm(-1) * w + b).realize().numpy(), _layernorm(xs, ws, bs), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(x.sum(0).realize().numpy(), xs.astype(np.float64).sum(0), rtol=1e-5, atol=1e-5)
    xc, wc = Tensor(xs.reshape(4, 16, 10, 10)).realize(), Tensor(_rand((8, 16, 3, 3), seed)).realize()
    ref = np.einsum("nchwij,ocij->nohw", np.lib.stride_tricks.sliding_window_view(
      np.pad(xs.reshape(4, 16, 10, 10).astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1))), (3, 3), axis=(2, 3)), wc.numpy())
    np.testing.assert_allclose(xc.conv2d(wc, padding=1).realize().numpy(), ref, rtol=1e-4, atol=1e-4)

def test_a_plan_over_an_assigned_input_reads_its_new_values() -> None:
  xs, ys = _rand((8, 40), 3), _rand((8, 40), 4)
  x = Tensor(xs).realize()
  first = x.softmax(-1).realize()
  x.assign(Tensor(ys)).realize()
  np.testing.assert_allclose(x.softmax(-1).realize().numpy(), _softmax(ys), rtol=1e-4, atol=1e-6)
  np.testing.assert_allclose(first.numpy(), _softmax(xs), rtol=1e-4, atol=1e-6)

def test_a_plan_whose_inner_node_is_computed() -> None:
  # softmax's inner row max (one node: x's max over -1 kept, without NaN propagation, MAX_NO_NAN): computed and held, it has a
  # memo the walk no longer looks for below the plan's output; the softmax is computed whole from x, with the same values
  xs = _rand((8, 40), 5)
  x = Tensor(xs).realize()
  m = x._reduce(Ops.MAX, -1, True, no_nan=True)
  inner = m.uop
  m.realize()
  s = x.softmax(-1)
  assert any(u is inner for u in s.uop.toposort())
  np.testing.assert_allclose(s.realize().numpy(), _softmax(xs), rtol=1e-4, atol=1e-6)
  np.testing.assert_allclose(m.numpy(), xs.max(-1, keepdims=True))

def test_a_held_plan_output_is_computed_once() -> None:
  # the output computed while its node is held: a graph over it (the same node, replayed) reads its buffer (the memo)
  xs = _rand((8, 40), 6)
  x = Tensor(xs).realize()
  s = x.softmax(-1)
  node = s.uop
  s.realize()
  y = x.softmax(-1) * 2.0
  assert any(u is node for u in y.uop.toposort())
  assert R._walk([y.uop], True) is None   # the walk found the memo: substituted first
  np.testing.assert_allclose(y.realize().numpy(), 2 * _softmax(xs), rtol=1e-4, atol=1e-6)

def test_a_plans_output_is_run_from_the_eager_op_cache() -> None:
  # from its plan's third call on (the eager plan is made on the second) a softmax or sum skips the walk: an op cache hit,
  # on whichever buffers of its signature it reads
  xs = [_rand((24, 40), 7 + i) for i in range(4)]
  ts = [Tensor(x).realize() for x in xs]
  for t in ts[:3]: t.softmax(-1).realize()
  hits = R.eager_ops.hits
  for x, t in zip(xs, ts):
    np.testing.assert_allclose(t.softmax(-1).realize().numpy(), _softmax(x), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(t.sum(1).realize().numpy(), x.astype(np.float64).sum(1), rtol=1e-5, atol=1e-5)
  assert R.eager_ops.hits >= hits + 4

def test_an_op_cache_hit_reads_an_assigned_input() -> None:
  xs, ys = _rand((8, 40), 11), _rand((8, 40), 12)
  x = Tensor(xs).realize()
  for _ in range(3): x.softmax(-1).realize()
  hits = R.eager_ops.hits
  x.assign(Tensor(ys)).realize()
  np.testing.assert_allclose(x.softmax(-1).realize().numpy(), _softmax(ys), rtol=1e-4, atol=1e-6)
  assert R.eager_ops.hits == hits + 1

def _hit_calls(mk, want, n: int = 4) -> int:
  """The op cache hits over n calls of mk() after three, each checked against want()."""
  for _ in range(3): mk().realize()
  hits = R.eager_ops.hits
  for _ in range(n): np.testing.assert_allclose(mk().realize().numpy(), want(), rtol=1e-4, atol=1e-5)
  return R.eager_ops.hits - hits

def test_ops_over_a_plan_and_broadcast_buffers_hit_the_op_cache() -> None:
  # layernorm * w + b: two ALU ops over the plan and EXPAND(RESHAPE()) of w and b, keyed by their structure
  ts = [(Tensor(_rand((16, 32), 20 + i)).realize(), Tensor(_rand((32,), 30 + i)).realize(), Tensor(_rand((32,), 40 + i)).realize())
        for i in range(3)]
  for x, w, b in ts:
    assert _hit_calls(lambda: x.layernorm(-1) * w + b, lambda: _layernorm(x.numpy(), w.numpy(), b.numpy())) == 4
  x, w, b = ts[0]
  # a bias add of realized tensors, one of them read twice, and a weight of another shape: keys of their own
  assert _hit_calls(lambda: x * w + b, lambda: x.numpy() * w.numpy() + b.numpy()) == 4
  assert _hit_calls(lambda: x * w + x, lambda: x.numpy() * w.numpy() + x.numpy()) == 4
  w2 = Tensor(w.numpy().reshape(1, 32) + 1).realize()
  assert _hit_calls(lambda: x * w2 + x, lambda: x.numpy() * (w.numpy() + 1) + x.numpy()) == 4

def test_a_long_chain_or_a_view_is_not_keyed() -> None:
  x, w = Tensor(_rand((16, 32), 50)).realize(), Tensor(_rand((32,), 51)).realize()
  def chain() -> Tensor:
    y = x
    for _ in range(R.OP_KEY_NODES + 2): y = y * w
    return y + 1.5
  assert _hit_calls(chain, lambda: x.numpy() * w.numpy() ** (R.OP_KEY_NODES + 2) + 1.5) == 0
  assert _hit_calls(lambda: x.permute(1, 0) * 2.0 + w.reshape(32, 1), lambda: x.numpy().T * 2 + w.numpy().reshape(32, 1)) == 0

def test_a_computed_inner_node_is_read_not_computed_again() -> None:
  # x * w computed and held: x * w + b reads its buffer on the general path (the walk substitutes it) instead of an op cache
  # hit that would compute the product again
  x, w, b = Tensor(_rand((16, 32), 60)).realize(), Tensor(_rand((32,), 61)).realize(), Tensor(_rand((32,), 62)).realize()
  want = lambda: x.numpy() * w.numpy() + b.numpy()   # noqa: E731
  assert _hit_calls(lambda: x * w + b, want) == 4
  m = x * w
  inner = m.uop
  m.realize()
  y = x * w + b
  assert any(u is inner for u in y.uop.toposort())
  hits = R.eager_ops.hits
  np.testing.assert_allclose(y.realize().numpy(), want(), rtol=1e-6, atol=1e-6)
  assert R.eager_ops.hits == hits
