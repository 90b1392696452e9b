"""Softmax, layernorm and reductions replayed from their plans (plans.replayed) make the nodes their builders make (the same
objects), for the input that recorded the plan and for other inputs of its signature, with the same values."""
import numpy as np
import pytest
import core.tensor.reduce as R
from core.ir.ops import Ops, UOp
from core.ir.dtype import dtypes
from core.tensor import Tensor, plans

def _rand(shape: tuple, seed: int, dtype=np.float32) -> Tensor:
  return Tensor(np.random.default_rng(seed).standard_normal(shape).astype(dtype))

BUILDS = [
  ("softmax", (64, 100), lambda t: t.softmax(-1)),
  ("softmax axis 0", (33, 7), lambda t: t.softmax(0)),
  ("layernorm", (64, 128), lambda t: t.layernorm(-1)),
  ("layernorm eps 0", (8, 50), lambda t: t.layernorm(-1, eps=0.0)),
  ("layernorm eps -0", (8, 50), lambda t: t.layernorm(-1, eps=-0.0)),
  ("layernorm eps 1", (8, 50), lambda t: t.layernorm(-1, eps=1)),
  ("sum all, split", (1 << 16,), lambda t: t.sum()),
  ("sum axis", (6, 40, 5), lambda t: t.sum(1)),
  ("sum keepdim", (6, 40, 5), lambda t: t.sum((0, 2), keepdim=True)),
  ("max", (6, 40), lambda t: t.max(-1)),
  ("sum of ones, keepdim", (6, 1), lambda t: t.sum(1, keepdim=True)),   # the input itself
  ("mean", (300, 70), lambda t: t.mean()),
  ("int sum", (6, 40), lambda t: t.sum(0)),
]

@pytest.mark.parametrize("name, shape, f", BUILDS, ids=[b[0] for b in BUILDS])
def test_replayed_builds_are_the_builders_nodes(monkeypatch: pytest.MonkeyPatch, name: str, shape: tuple, f) -> None:
  def built(t: Tensor) -> Tensor:
    with monkeypatch.context() as m:
      m.setattr(R, "replayed", lambda key, inputs, build: build())
      return f(t)
  plans._plans.clear()
  dt = np.int32 if name.startswith("int") else np.float32
  x, y = _rand(shape, 0, dt), _rand(shape, 1, dt)
  first, again, other = f(x), f(x), f(y)   # recorded, then replayed twice
  assert first.uop is built(x).uop and again.uop is first.uop and other.uop is built(y).uop
  assert plans._plans
  np.testing.assert_allclose(other.numpy(), built(y).numpy())

def test_plans_tell_eps_apart() -> None:
  plans._plans.clear()
  x = _rand((4, 30), 0)
  a, b, c = x.layernorm(-1, eps=0.0), x.layernorm(-1, eps=-0.0), x.layernorm(-1, eps=0.5)
  assert len({a.uop, b.uop, c.uop}) == 3
  xn = x.numpy().astype(np.float64)
  ref = (xn - xn.mean(-1, keepdims=True)) / np.sqrt(xn.var(-1, keepdims=True) + 0.5)
  np.testing.assert_allclose(c.numpy(), ref, rtol=1e-5, atol=1e-5)

def test_a_plan_may_return_an_input() -> None:
  """A builder's identity move returns one of its inputs: its replay returns that input of the next call, not the last one."""
  plans._plans.clear()
  for seed in (0, 2):
    a, b = _rand((3,), seed).uop, _rand((3,), seed + 1).uop
    assert plans.replayed(("first of two",), (a, b), lambda: a) is a

def test_a_builder_that_names_a_buffer_is_never_replayed() -> None:
  """A node naming a buffer (the input's own BUFFER under its reshape, reached by the builder) would be the recording call's
  buffer in every replay: such a builder is built each time, and each call reads its own input."""
  plans._plans.clear()
  outs = []
  for seed in (0, 1):
    u = _rand((4, 5), seed).realize().uop
    buf = u if u.op is Ops.BUFFER else u.src[0]
    view = buf.reshape((4, 5))   # the input: a view of the buffer, as a realized tensor's node is
    out = plans.replayed(("below the input",), (view,), lambda: buf.reshape((2, 10)))
    assert out.src[0] is buf
    outs.append(out)
  assert plans._plans[("below the input",)] is None and outs[0] is not outs[1]

def test_plans_tell_devices_apart() -> None:
  """The same shapes on two devices are two plans: a replay never builds one device's nodes from the other's plan."""
  plans._plans.clear()
  a, b = Tensor(np.arange(12, dtype=np.float32)).realize(), Tensor(np.arange(12, dtype=np.float32), device="PYTHON").realize()
  sa, sb = a.sum(), b.sum()
  assert sa.device != sb.device and len(plans._plans) == 2
  assert sa.item() == sb.item() == 66.0

def test_a_plan_keeps_its_constant_nodes(monkeypatch: pytest.MonkeyPatch) -> None:
  """The nodes no input is below (softmax's 1/ln 2, its device and broadcast; layernorm's 1/n and eps) are kept by the plan
  and handed out as they are: a replay makes only the nodes over its input, each a step with an input or step below it."""
  x, y = _rand((4, 30), 0).realize(), _rand((4, 30), 1).realize()
  def softmax(a: np.ndarray) -> np.ndarray:
    e = np.exp(a - a.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)
  def layernorm(a: np.ndarray) -> np.ndarray: return (a - a.mean(-1, keepdims=True)) / np.sqrt(a.var(-1, keepdims=True) + 1e-5)
  for f, ref in ((lambda t: t.softmax(-1), softmax), (lambda t: t.layernorm(-1), layernorm)):
    plans._plans.clear()
    first = f(x)
    (plan,) = plans._plans.values()
    assert plan is not None
    n, consts = 1, plan[2]
    assert consts and all(u in first.uop.toposort() for u in consts)
    assert all(any(i < n or i >= n + len(consts) for i in srcs) for _, _, srcs, _, _, _ in plan[0])
    again = f(y)
    old = {*first.uop.toposort(), *y.uop.toposort()}
    assert len([u for u in again.uop.toposort() if u not in old]) == len(plan[0])
    np.testing.assert_allclose(again.numpy(), ref(y.numpy().astype(np.float64)), rtol=1e-5, atol=1e-6)

def test_a_constant_output_is_not_noted() -> None:
  """A builder whose output reads no input: replayed as the same node, never noted as made from the inputs (the engine would
  key it over them)."""
  from core.engine.state import facts
  plans._plans.clear()
  for seed in (0, 1):
    u = _rand((3,), seed).realize().uop
    out = plans.replayed(("constant",), (u,), lambda: UOp.const(dtypes.float32, 2.5, u.device, (3,)))
    assert out.op is Ops.EXPAND and ((f := facts.get(out)) is None or f.plan is None)

REPLAYS = [("softmax", (64, 100), lambda t, *_: t.softmax(-1)), ("layernorm eps -0", (8, 50), lambda t, *_: t.layernorm(-1, eps=-0.0)),
           ("causal sdpa, split", (1, 12, 256, 64), lambda q, k, v: q.scaled_dot_product_attention(k, v, is_causal=True, scale=0.125))]

@pytest.mark.parametrize("name, shape, f", REPLAYS, ids=[r[0] for r in REPLAYS])
def test_a_replay_makes_its_nodes_without_the_node_constructor(monkeypatch: pytest.MonkeyPatch, name: str, shape: tuple, f) -> None:
  """A replay makes each node from its recorded key parts (ops.rebuild), not through UOpMeta (which computes each arg's hash
  key again: ~40% of a hot split sdpa's 137-node replay): no constructor call, and the nodes a fresh build makes (the same
  objects while both live), with the builder's values."""
  import core.tensor.nnops as N
  from core.ir.ops import UOpMeta
  from core.tensor.nnops import SPLIT_HOT_CALLS
  plans._plans.clear()
  N._calls.clear()
  xs = [_rand(shape, s).realize() for s in range(3)]
  for _ in range(SPLIT_HOT_CALLS + 1): f(*xs).realize()   # recorded; sdpa's signature hot, its split recorded
  ys = [_rand(shape, s).realize() for s in range(3, 6)]
  made = []
  meta_call = UOpMeta.__call__
  with monkeypatch.context() as m:
    m.setattr(UOpMeta, "__call__", lambda cls, *a, **kw: made.append(a) or meta_call(cls, *a, **kw))
    again = f(*ys)
  assert made == []
  with monkeypatch.context() as m:
    for mod in (R, N): m.setattr(mod, "replayed", lambda key, inputs, build: build())
    m.setattr(N, "pending", lambda key, inputs, build: build())   # a hot causal sdpa's is pending (plans.pending)
    built = f(*ys)
  assert again.uop is built.uop and len(again.uop.toposort()) > 10
  np.testing.assert_array_equal(again.numpy(), built.numpy())
