"""t * y and t + y where t is a pending plan's output (a layernorm, softmax or reduction: core.tensor.plans.PendingPlan) and y a
realized tensor of t's float dtype that broadcasts to t's shape extend the plan (core.tensor.elementwise._plan_op): an eager
`x.layernorm(-1) * w + b` realizes as one eager op cache hit with no node built. Results, graphs, gradients and every other
operand (promotion, a y that widens t, one buffer twice, a y that requires grad) must be the general path's."""
import numpy as np
import pytest
from core import Tensor
from core.ir.dtype import dtypes
from core.engine import realize as R
from core.tensor import elementwise as E, plans
from tests.engine.pending_helpers import replays

def _t(a: np.ndarray) -> Tensor: return Tensor(a).realize()

def _ln(a: np.ndarray) -> np.ndarray:
  a = a.astype(np.float64)
  y = a - a.mean(-1, keepdims=True)
  return y / np.sqrt((y * y).mean(-1, keepdims=True) + 1e-5)

RNG = np.random.default_rng(3)
A, W, B = (RNG.standard_normal(s).astype(np.float32) for s in ((8, 64), (64,), (64,)))

# (name, the op over x, w, b, the numpy answer)
CASES = [("layernorm * w + b", lambda x, w, b: x.layernorm(-1) * w + b, lambda: _ln(A) * W + B),
         ("layernorm + b", lambda x, w, b: x.layernorm(-1) + b, lambda: _ln(A) + B),
         ("softmax * w", lambda x, w, b: x.softmax(-1) * w, lambda: np.exp(A - A.max(-1, keepdims=True)) /
          np.exp(A - A.max(-1, keepdims=True)).sum(-1, keepdims=True) * W),
         ("column sum * w + b", lambda x, w, b: x.sum(0) * w + b, lambda: A.astype(np.float64).sum(0) * W + B),
         ("row mean keepdim * (8, 1)", lambda x, w, b: x.mean(-1, keepdim=True) * _t(A[:, :1].copy()),
          lambda: A.astype(np.float64).mean(-1, keepdims=True) * A[:, :1])]

@pytest.mark.parametrize("name,op,want", CASES, ids=[c[0] for c in CASES])
def test_an_op_on_a_pending_plan_extends_it_and_builds_no_node(name, op, want, monkeypatch):
  x, w, b = _t(A), _t(W), _t(B)
  for _ in range(3): np.testing.assert_allclose(op(x, w, b).realize().numpy(), want(), rtol=2e-5, atol=2e-5)
  h0 = R.eager_ops.hits
  out: list[Tensor] = []
  assert replays(lambda: out.append(op(x, w, b).realize()), monkeypatch) == 0
  assert R.eager_ops.hits == h0 + 1
  np.testing.assert_allclose(out[0].numpy(), want(), rtol=2e-5, atol=2e-5)

def test_the_extended_plans_node_is_the_general_paths(monkeypatch):
  x, w, b = _t(A), _t(W), _t(B)
  for _ in range(3): (x.layernorm(-1) * w + b).realize()
  y = x.layernorm(-1) * w + b
  assert type(y.__dict__.get("_pending")) is plans.PendingPlan
  monkeypatch.setattr(E, "_plan_op", lambda t, op, v: None)
  assert y.uop is (x.layernorm(-1) * w + b).uop   # hash-consed: the same graph
  np.testing.assert_allclose((y * 2 - 1).numpy(), (_ln(A) * W + B) * 2 - 1, rtol=2e-5, atol=2e-5)

def test_the_new_values_of_the_weight_are_read():
  x, w, b = _t(A), _t(W.copy()), _t(B)
  for _ in range(3): (x.layernorm(-1) * w + b).realize()
  y = x.layernorm(-1) * w + b
  w.assign(Tensor(W + 1)).realize()
  np.testing.assert_allclose(y.numpy(), _ln(A) * (W + 1) + B, rtol=2e-5, atol=2e-5)

def test_a_pending_result_gets_its_gradient():
  x, w, b = _t(A), _t(W), _t(B)
  v = Tensor(RNG.standard_normal((8, 64)).astype(np.float32), requires_grad=True)
  for _ in range(3): (x.layernorm(-1) * w + b).realize()
  y = x.layernorm(-1) * w + b   # requires_grad None: it gets a gradient where one reaches it
  assert type(y.__dict__.get("_pending")) is plans.PendingPlan
  (y * v).sum().backward()
  np.testing.assert_allclose(y.grad.numpy(), v.numpy())
  np.testing.assert_allclose(v.grad.numpy(), _ln(A) * W + B, rtol=2e-5, atol=2e-5)

def test_a_weight_that_requires_grad_takes_the_general_path():
  x, b = _t(A), _t(B)
  w = Tensor(W.copy(), requires_grad=True)
  for _ in range(4):
    w.grad = None
    y = x.layernorm(-1) * w + b
    assert "uop" in y.__dict__ and y.requires_grad
    y.sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), _ln(A).sum(0), rtol=1e-4, atol=1e-4)

@pytest.mark.parametrize("case", ["float16 weight", "wider operand", "same buffer", "int operand"])
def test_other_operands_take_the_general_path(case):
  x = _t(A)
  for _ in range(4):
    t = x.layernorm(-1)
    if case == "float16 weight":
      got, want = t * _t(W.astype(np.float16)), _ln(A) * W.astype(np.float16)
    elif case == "wider operand":   # a (8, 1) plan output times an (8, 64) tensor: the result is the operand's shape
      t = x.sum(-1, keepdim=True)
      got, want = t * x, A.astype(np.float64).sum(-1, keepdims=True) * A
    elif case == "same buffer":   # x read twice: the plan's inputs must be distinct buffers
      got, want = t + x, _ln(A) + A
    else:
      got, want = t * _t(np.arange(64, dtype=np.int32)), _ln(A) * np.arange(64)
    assert "uop" in got.__dict__ and got.dtype is dtypes.float32
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-3 if case == "float16 weight" else 2e-5, atol=1e-3)

def test_a_chain_stops_extending_at_the_input_bound():
  x = _t(A)
  ws = [_t(W + i) for i in range(E.PLAN_OP_INPUTS + 2)]
  for _ in range(3):
    t, want = x.sum(0), A.astype(np.float64).sum(0)
    for i, w in enumerate(ws):
      t, want = t * w, want * (W + i)
      assert ("uop" not in t.__dict__) == (i + 2 <= E.PLAN_OP_INPUTS)   # the sum's input and i + 1 weights
    np.testing.assert_allclose(t.numpy(), want, rtol=1e-4)

def test_the_extended_plans_op_key_is_the_one_plan_op_key_makes():
  x, w, b = _t(A), _t(W), _t(B.reshape(1, 64).copy())   # b: a RESHAPE of its buffer, keyed with its shape
  for _ in range(3): (x.layernorm(-1) * w + b).realize()
  p = (x.layernorm(-1) * w + b).__dict__["_pending"]
  ok = R.plan_op_key(p[2], p[3])
  assert (p[0], p[1], p[6]) == ok and p[1] == [x.uop.src[0], w.uop, b.uop.src[0]]

def test_a_replayed_result_carries_its_shape():
  x, w2 = _t(A), _t(A[:, :1].copy())
  for _ in range(3): (x.sum(-1, keepdim=True) * w2 + x).realize()
  t = x.sum(-1, keepdim=True) * w2
  assert type(t.__dict__.get("_pending")) is plans.PendingPlan
  u = t.uop   # replayed: no node of this graph is alive, so every one is new
  assert u.__dict__.get("shape") == (8, 1) == type(u).shape.fn(u)   # recorded with the plan, as computed from the node
  np.testing.assert_allclose((t + x).numpy(), A.astype(np.float64).sum(-1, keepdims=True) * A[:, :1] + A, rtol=1e-5, atol=1e-4)

# (t's op, y's shape, whether it extends the plan): a y with 1s broadcasts per dim; one wider than t takes the general path
BROADCASTS = [("layernorm", (1, 64), True), ("layernorm", (8, 1), True), ("layernorm", (64,), True),
              ("mean keepdim", (1, 64), False), ("mean keepdim", (64,), False), ("mean keepdim", (8, 1), True)]

@pytest.mark.parametrize("op,ys,extends", BROADCASTS, ids=[f"{o} {s}" for o, s, _ in BROADCASTS])
def test_an_operand_extends_the_plan_only_where_it_broadcasts_to_its_shape(op, ys, extends):
  x, v = _t(A), RNG.standard_normal(ys).astype(np.float32)
  y = _t(v)
  f, want = (lambda: x.layernorm(-1), _ln(A)) if op == "layernorm" else (lambda: x.mean(-1, keepdim=True), A.astype(np.float64).mean(-1, keepdims=True))
  for _ in range(3):
    got = f() * y
    assert ("uop" not in got.__dict__) == extends
    np.testing.assert_allclose(got.numpy(), want * v, rtol=2e-5, atol=2e-5)
