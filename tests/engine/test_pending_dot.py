"""An eager a @ b of realized float tensors of one dtype and batch dims over distinct buffers is a pending plan over both
(core.tensor.reduce dot), so a repeat realizes as one eager op cache hit with no node built. Results, graphs and gradients
must be the general path's."""
import numpy as np
import pytest
from core import Tensor
from core.engine import realize as R
from core.tensor import plans, reduce
from tests.engine.pending_helpers import assert_pending_hit

def _t(a: np.ndarray, **kw) -> Tensor: return Tensor(a, **kw).realize()

def _rand(shape: tuple, seed: int, dt=np.float32) -> np.ndarray: return np.random.default_rng(seed).standard_normal(shape).astype(dt)

SHAPES = [((16, 24), (24, 8)), ((3, 5, 7), (3, 7, 4)), ((2, 2, 4, 6), (2, 2, 6, 5))]

@pytest.mark.parametrize("sa,sb", SHAPES, ids=[str(s) for s in SHAPES])
def test_a_repeat_builds_no_node(sa, sb, monkeypatch):
  x, y = _rand(sa, 0), _rand(sb, 1)
  a, b = _t(x), _t(y)
  for _ in range(3): (a @ b).realize()
  r = a @ b
  assert_pending_hit(r, monkeypatch)
  np.testing.assert_allclose(r.numpy(), x @ y, rtol=1e-5, atol=1e-5)
  assert r.shape == (x @ y).shape

def test_its_node_is_the_general_paths(monkeypatch):
  a, b = _t(_rand((8, 4), 2)), _t(_rand((4, 6), 3))
  r = a @ b
  assert type(r.__dict__.get("_pending")) is plans.PendingPlan
  monkeypatch.setattr(reduce, "pending", lambda key, inputs, build: build())
  g = a @ b
  assert "uop" in g.__dict__ and r.uop is g.uop

def test_the_values_written_into_the_inputs_are_read():
  x, y = np.arange(16, dtype=np.float32).reshape(4, 4), np.eye(4, dtype=np.float32) * 2
  a, b = _t(x.copy()), _t(y)
  for _ in range(3): (a @ b).realize()
  r = a @ b
  a.assign(Tensor(x + 10)).realize()
  np.testing.assert_array_equal(r.numpy(), (x + 10) @ y)

def test_bias_extends_the_plan():
  x, w, bias = _rand((8, 16), 4), _rand((16, 12), 5), _rand((12,), 6)
  a, b, c = _t(x), _t(w), _t(bias)
  for _ in range(3): (a @ b + c).realize()
  r = a @ b + c
  assert type(r.__dict__.get("_pending")) is plans.PendingPlan
  h0 = R.eager_ops.hits
  r.realize()
  assert R.eager_ops.hits == h0 + 1
  np.testing.assert_allclose(r.numpy(), x @ w + bias, rtol=1e-5, atol=1e-5)

OTHERS = [("same buffer", lambda a, b: a @ a), ("view", lambda a, b: a.T @ b), ("lazy operand", lambda a, b: (a + 1) @ b),
          ("vector", lambda a, b: a[0].contiguous().realize() @ b), ("dtype", lambda a, b: a.dot(b, dtype="float32"))]

@pytest.mark.parametrize("name,op", OTHERS, ids=[c[0] for c in OTHERS])
def test_other_operands_take_the_general_path(name, op):
  x, y = _rand((6, 6), 7), _rand((6, 6), 8)
  a, b = _t(x), _t(y)
  for _ in range(2):
    r = op(a, b)
    assert type(r.__dict__.get("_pending")) is not plans.PendingPlan
    np.testing.assert_allclose(r.numpy(), op(x, y) if name not in ("vector", "dtype") else (x[0] @ y if name == "vector" else x @ y),
                               rtol=1e-5, atol=1e-5)

def test_gradients():
  x, y = _rand((4, 5), 9), _rand((5, 3), 10)
  a, b = _t(x), _t(y)
  w = Tensor(np.full((4, 3), 3.0, dtype=np.float32), requires_grad=True)
  m = a @ b   # requires_grad None: it gets a gradient where one reaches it
  assert type(m.__dict__.get("_pending")) is plans.PendingPlan
  (m * w).sum().backward()
  np.testing.assert_allclose(w.grad.numpy(), x @ y, rtol=1e-5)
  g = _t(x, requires_grad=True)
  r = g @ b
  assert "uop" in r.__dict__
  r.sum().backward()
  np.testing.assert_allclose(g.grad.numpy(), np.ones((4, 3), np.float32) @ y.T, rtol=1e-5)

def test_results_are_fresh_buffers():
  x, y = _rand((8, 8), 11), _rand((8, 8), 12)
  a, b = _t(x), _t(y)
  r1, r2 = (a @ b).realize(), (a @ b).realize()
  assert R.realized_buffer(r1.uop)[0] is not R.realized_buffer(r2.uop)[0]   # two tensors never share storage
  np.testing.assert_allclose(r1.numpy(), r2.numpy())

@pytest.mark.parametrize("bad", [3, [[1.0]], np.ones((2, 2), np.float32)], ids=["int", "list", "ndarray"])
def test_a_non_tensor_operand_raises_matmuls_error(bad):
  a = _t(_rand((2, 2), 13))
  with pytest.raises(TypeError, match=r"matmul: argument 'x' must be a Tensor"): a @ bad
