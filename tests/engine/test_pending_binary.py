"""An eager a * b or a + b of realized float tensors of one dtype and shape over distinct buffers is a pending plan over both
(core.tensor.elementwise._binary_plan), and a Python scalar op on it (`a * b + 1`) extends that plan (_plan_scalar): a repeat
realizes as one eager op cache hit with no node built. Results, graphs and gradients must be the general path's."""
import numpy as np
import pytest
from core import Tensor
from core.engine import realize as R
from core.tensor import plans
from core.tensor import elementwise as E
from tests.engine.pending_helpers import assert_pending_hit

def _t(a: np.ndarray, **kw) -> Tensor: return Tensor(a, **kw).realize()

def _rand(n: int, seed: int, dt=np.float32) -> np.ndarray: return np.random.default_rng(seed).standard_normal(n).astype(dt)

CASES = [("a*b+1", lambda a, b: a * b + 1), ("a+b", lambda a, b: a + b), ("a*b*2.5", lambda a, b: a * b * 2.5),
         ("(a+b)*-3", lambda a, b: (a + b) * -3)]

@pytest.mark.parametrize("name,op", CASES, ids=[c[0] for c in CASES])
def test_a_repeat_builds_no_node(name, op, monkeypatch):
  x, y = _rand(1000, 0), _rand(1000, 1)
  a, b = _t(x), _t(y)
  for _ in range(3): op(a, b).realize()
  r = op(a, b)
  assert_pending_hit(r, monkeypatch)
  np.testing.assert_allclose(r.numpy(), op(x, y), rtol=1e-6)

def test_its_node_is_the_general_paths(monkeypatch):
  a, b = _t(_rand(64, 2)), _t(_rand(64, 3))
  r = a * b + 1
  monkeypatch.setattr(E, "_binary_plan", lambda t, op, y: None)
  g = a * b + 1
  assert r.uop is g.uop

def test_the_values_written_into_the_inputs_are_read():
  x, y = np.arange(16, dtype=np.float32), np.full(16, 2, dtype=np.float32)
  a, b = _t(x.copy()), _t(y)
  for _ in range(3): (a * b + 1).realize()
  r = a * b + 1
  a.assign(Tensor(x + 10)).realize()
  np.testing.assert_array_equal(r.numpy(), (x + 10) * 2 + 1)
  b[:4].assign(Tensor(np.zeros(4, dtype=np.float32))).realize()
  np.testing.assert_array_equal((a * b + 1).numpy(), (x + 10) * np.r_[np.zeros(4), np.full(12, 2)] + 1)

OTHERS = [("same buffer", lambda a, b: a * a), ("views", lambda a, b: a[1:] * b[1:]), ("broadcast", lambda a, b: a.reshape(4, 4) * b[:4]),
          ("lazy operand", lambda a, b: (a + 1) * b), ("zero scalar", lambda a, b: a * b + 0.0), ("nan scalar", lambda a, b: a * b + float("nan"))]

@pytest.mark.parametrize("name,op", OTHERS, ids=[c[0] for c in OTHERS])
def test_other_operands_take_the_general_path(name, op):
  x, y = _rand(16, 4), _rand(16, 5)
  a, b = _t(x), _t(y)
  for _ in range(2):
    r = op(a, b)
    assert type(r.__dict__.get("_pending")) is not plans.PendingPlan or name in ("lazy operand",)
    np.testing.assert_allclose(r.numpy(), op(x, y), rtol=1e-6)
  assert type((a * b * 0.0).__dict__.get("_pending")) is not plans.PendingPlan   # a * b pending, its * 0.0 built

@pytest.mark.parametrize("dt", [np.float16, np.float64, np.int32, np.uint8])
def test_dtypes(dt):
  x, y = (np.arange(16) % 5).astype(dt), (np.arange(16) % 3).astype(dt)
  a, b = _t(x), _t(y)
  for _ in range(3):
    r = a * b + 1
    assert (type(r.__dict__.get("_pending")) is plans.PendingPlan) == (np.dtype(dt).kind == "f")
    np.testing.assert_array_equal(r.numpy(), x * y + dt(1))
    assert r.dtype == Tensor(x).dtype
  c = _t(y.astype(np.float32))
  np.testing.assert_allclose((a * c).numpy(), x.astype(np.float32) * y)   # mixed dtypes: the general path

def test_gradients():
  x, y = _rand(8, 6), _rand(8, 7)
  a, b = _t(x), _t(y)
  w = Tensor(np.full(8, 3.0, dtype=np.float32), requires_grad=True)
  m = a * b + 1   # requires_grad None: it gets a gradient where one reaches it
  assert type(m.__dict__.get("_pending")) is plans.PendingPlan
  (m * w).sum().backward()
  np.testing.assert_allclose(w.grad.numpy(), x * y + 1, rtol=1e-6)
  g = _t(x, requires_grad=True)
  r = g * b
  assert "uop" in r.__dict__
  r.sum().backward()
  np.testing.assert_allclose(g.grad.numpy(), y)

def test_a_held_products_node_is_run_again_not_shared():
  x, y = _rand(16, 8), _rand(16, 9)
  a, b = _t(x), _t(y)
  m = a * b
  node = m.uop
  m.realize()
  r1, r2 = (a * b).realize(), (a * b).realize()
  assert R.realized_buffer(r1.uop)[0] is not R.realized_buffer(r2.uop)[0]   # two tensors never share storage
  assert any(u is node for u in (a * b).uop.toposort())
  np.testing.assert_allclose(r2.numpy(), x * y)
