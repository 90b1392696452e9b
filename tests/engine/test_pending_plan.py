"""An eager reduction, softmax or layernorm of a realized float tensor whose plan the eager op cache holds builds no node
(core.tensor.plans.PendingPlan): realize and item() run the plan from its op key, and anything else that asks for the tensor's
uop gets the node the plan's replay always built. Results, graphs and gradients must be the ones the built node gives."""
import numpy as np
import pytest
from core import Tensor
from core.helpers import Context
from core.ir.ops import Ops
from core.engine import realize as R
from core.tensor import plans, reduce as RD
from tests.engine.pending_helpers import calls, replays

def _t(a: np.ndarray) -> Tensor: return Tensor(a).realize()

def _warm(fn) -> None:
  for _ in range(3): fn().realize()   # compile, eager plan, cache entry

# (name, op, input shape): whole-tensor and last-axis reductions, unsplit and split (more than SPLIT_REDUCE elements) sums
CASES = [("sum", lambda x: x.sum(), (64,)), ("sum split", lambda x: x.sum(), (1 << 16,)), ("max", lambda x: x.max(), (1 << 16,)),
         ("mean", lambda x: x.mean(), (1 << 16,)), ("sum rows", lambda x: x.sum(-1), (16, 256)),
         ("max rows", lambda x: x.max(-1), (16, 256)), ("mean rows keepdim", lambda x: x.mean(-1, keepdim=True), (16, 256)),
         ("softmax", lambda x: x.softmax(-1), (8, 64)), ("layernorm", lambda x: x.layernorm(-1), (8, 64))]
def _want(name: str, a: np.ndarray) -> np.ndarray:
  if name == "softmax": return np.exp(a - a.max(-1, keepdims=True)) / np.exp(a - a.max(-1, keepdims=True)).sum(-1, keepdims=True)
  if name == "layernorm": return (a - a.mean(-1, keepdims=True)) / np.sqrt(a.var(-1, keepdims=True) + 1e-5)
  fn = {"sum": np.sum, "max": np.max, "mean": np.mean}[name.split()[0]]
  return fn(a, axis=-1 if "rows" in name else None, keepdims="keepdim" in name)

@pytest.mark.parametrize("name,op,shape", CASES, ids=[c[0] for c in CASES])
def test_a_repeated_eager_reduction_builds_no_node(name, op, shape, monkeypatch):
  a = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
  x = _t(a)
  _warm(lambda: op(x))
  h0 = R.eager_ops.hits
  out: list[Tensor] = []
  assert replays(lambda: out.append(op(x).realize()), monkeypatch) == 0
  assert R.eager_ops.hits == h0 + 1
  np.testing.assert_allclose(out[0].numpy(), _want(name, a), rtol=2e-5, atol=2e-6)

def test_item_of_a_pending_sum_builds_no_node_and_leaves_it_pending(monkeypatch):
  a = np.arange(1 << 16, dtype=np.float32) / 1024
  x = _t(a)
  _warm(lambda: x.sum())
  s = x.sum()
  h0 = R.eager_ops.hits
  assert replays(lambda: s.item(), monkeypatch) == 0 and R.eager_ops.hits == h0 + 1
  assert s.item() == float(a.astype(np.float64).sum())   # exact here: every partial sum is a multiple of 1/1024 below 2^24
  assert type(s.__dict__.get("_pending")) is plans.PendingPlan and "uop" not in s.__dict__

def test_a_pending_reduction_used_in_a_graph_is_the_node_the_replay_builds(monkeypatch):
  a = np.arange(1 << 16, dtype=np.float32) / 1024
  x = _t(a)
  _warm(lambda: x.sum())
  y = x.sum()
  monkeypatch.setattr(RD, "pending", lambda key, inputs, build: plans.replayed(key, inputs, build))   # the old path: the replayed node
  assert y.uop is x.sum().uop
  assert y.uop.op is Ops.RESHAPE and y.shape == ()
  np.testing.assert_allclose((y * 2 - 1).numpy(), a.sum() * 2 - 1, rtol=1e-6)

def test_the_new_values_of_the_input_buffer_are_read():
  a = np.arange(64, dtype=np.float32)
  x = _t(a.copy())
  _warm(lambda: x.max())
  y, z = x.max(), x.max()
  x.assign(Tensor(a + 100)).realize()
  assert y.realize().item() == 163.0
  np.testing.assert_array_equal(z.numpy(), np.float32(163.0))   # built after the assign: still the buffer it read

def test_a_pending_reduction_gets_its_gradient():
  a = np.arange(8, dtype=np.float32)
  x = _t(a)
  w = Tensor(np.full(8, 3.0, dtype=np.float32), requires_grad=True)
  _warm(lambda: x.sum())
  y = x.sum()   # requires_grad None: it gets a gradient where one reaches it
  assert type(y.__dict__.get("_pending")) is plans.PendingPlan
  (y * w).sum().backward()
  assert y.grad.item() == 24.0
  np.testing.assert_array_equal(w.grad.numpy(), np.full(8, a.sum(), dtype=np.float32))

def test_a_tensor_that_requires_grad_builds_its_node():
  x = Tensor(np.arange(8, dtype=np.float32), requires_grad=True).realize()
  _warm(lambda: x.mean())
  y = x.mean()
  assert "uop" in y.__dict__
  y.backward()
  np.testing.assert_array_equal(x.grad.numpy(), np.full(8, 1 / 8, dtype=np.float32))

def test_timing_and_jit_captures_take_the_general_path():
  from core import Jit
  a = np.arange(1 << 16, dtype=np.float32) / 1024
  x = _t(a)
  _warm(lambda: x.sum())
  with Context(DEBUG=2):
    h0 = R.eager_ops.hits
    assert x.sum().item() == float(a.astype(np.float64).sum()) and R.eager_ops.hits == h0
  @Jit
  def f(t: Tensor) -> Tensor: return t.sum().realize()
  for i in range(4): assert f(_t(a + i)).item() == float((a + i).astype(np.float64).sum())

@pytest.mark.parametrize("dt", [np.float32, np.float64, np.float16, np.int32, np.int64, np.uint8, np.bool_])
def test_item_gives_numpys_value_and_type(dt):
  for v in (np.array([5], dtype=dt), np.array([[2.5]]).astype(dt), np.array(True).astype(dt)):
    got, want = _t(v).item(), v.reshape(()).item()
    assert type(got) is type(want) and got == want
  got = Tensor(np.array([1, 2, 3], dtype=dt)).max().item()
  assert type(got) is type(np.array(3, dtype=dt).item()) and got == np.array([1, 2, 3], dtype=dt).max().item()

def test_item_of_more_than_one_element_raises():
  x = _t(np.arange(64, dtype=np.float32))
  with pytest.raises(ValueError, match=r"item\(\) needs a tensor with one element, this one has shape \(64,\)"): x.item()
  _warm(lambda: x.reshape(8, 8).sum(-1))
  with pytest.raises(ValueError, match=r"this one has shape \(8,\)"): x.reshape(8, 8).sum(-1).item()

@pytest.mark.parametrize("name,op,shape", CASES[:3], ids=[c[0] for c in CASES[:3]])
def test_a_missed_eager_reduction_makes_its_op_key_once(name, op, shape, monkeypatch):
  # a miss (the cache cleared): plans.pending makes the output's op key and notes it beside the plan; the realize that follows
  # (its cache lookup, the new entry) reads it instead of making it again
  a = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
  x = _t(a)
  _warm(lambda: op(x))
  R.eager_ops.clear()
  x.__dict__.pop("_again", None)   # the pending result x keeps (plans.again) makes none: the miss of a new call is meant
  out: list[Tensor] = []
  assert calls(R, "_sources_key", lambda: out.append(op(x).realize()), monkeypatch) == 1
  h0 = R.eager_ops.hits
  np.testing.assert_allclose(op(x).realize().numpy(), out[0].numpy())   # the entry the miss made serves the next call
  assert R.eager_ops.hits == h0 + 1
  np.testing.assert_allclose(out[0].numpy(), _want(name, a), rtol=2e-5, atol=2e-6)
