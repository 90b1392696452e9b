"""An eager a @ b of realized float tensors of one dtype and batch dims over distinct buffers is a pending plan over both
(core.tensor.reduce dot), so a repeat realizes as one eager op cache hit with no node built. Results, graphs and gradients
must be the general path's."""
import numpy as np
import pytest
from core import Tensor
from core.ir.dtype import dtypes, to_dtype
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

# (the operands' dtype, dot's dtype argument): products in the operands' dtype, summed in sum_acc_dtype (float32 for the
# 16-bit floats), cast to the result's dtype (the argument, else the operands')
DTYPES = [(dtypes.float32, None), (dtypes.bfloat16, "float32"), (dtypes.float16, None), (dtypes.float16, "float32"),
          (dtypes.float32, "float16"), (dtypes.float64, None)]

def _typed(a: np.ndarray, dt) -> Tensor: return Tensor(a).cast(dt).realize()

@pytest.mark.parametrize("dt,arg", DTYPES, ids=[f"{d.name}-{a}" for d, a in DTYPES])
def test_its_node_is_the_general_paths(dt, arg, monkeypatch):
  a, b = _typed(_rand((8, 4), 2), dt), _typed(_rand((4, 6), 3), dt)
  r = a.dot(b, dtype=arg)
  assert type(r.__dict__.get("_pending")) is plans.PendingPlan
  monkeypatch.setattr(reduce, "_float_acc", lambda dt, default_float: None)   # the general path (Tensor ops) for every dtype
  g = a.dot(b, dtype=arg)
  assert "uop" in g.__dict__ and r.uop is g.uop

@pytest.mark.parametrize("dt,arg", DTYPES[1:], ids=[f"{d.name}-{a}" for d, a in DTYPES[1:]])
def test_other_dtypes_repeat_without_a_node(dt, arg, monkeypatch):
  a, b = _typed(_rand((12, 16), 20), dt), _typed(_rand((16, 10), 21), dt)
  for _ in range(3): a.matmul(b, dtype=arg).realize()
  r = a.matmul(b, dtype=arg)
  assert_pending_hit(r, monkeypatch)
  assert r.dtype is (dt if arg is None else to_dtype(arg))
  # exact on the operands' values (bf16 and half are exact in float64); the tolerance allows rounded products and the result
  want = a.cast(dtypes.float64).numpy() @ b.cast(dtypes.float64).numpy()
  np.testing.assert_allclose(r.cast(dtypes.float64).numpy(), want, rtol=2e-2, atol=2e-2)

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
          ("vector", lambda a, b: a[0].contiguous().realize() @ b)]

@pytest.mark.parametrize("name,op", OTHERS, ids=[c[0] for c in OTHERS])
def test_other_operands_take_the_general_path(name, op):
  x, y = _rand((6, 6), 7), _rand((6, 6), 8)
  a, b = _t(x), _t(y)
  for _ in range(2):
    r = op(a, b)
    assert type(r.__dict__.get("_pending")) is not plans.PendingPlan
    np.testing.assert_allclose(r.numpy(), op(x, y) if name != "vector" else x[0] @ y, rtol=1e-5, atol=1e-5)

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

@pytest.mark.parametrize("dt,arg", DTYPES[2:5], ids=[f"{d.name}-{a}" for d, a in DTYPES[2:5]])
def test_gradients_with_a_dtype_are_the_general_paths(dt, arg, monkeypatch):
  x, y = _rand((5, 7), 22), _rand((7, 3), 23)
  def grads():
    a, b = _typed(x, dt), _typed(y, dt)
    a.requires_grad, b.requires_grad = True, True
    r = a.dot(b, dtype=arg)
    (r.cast(dtypes.float32) * 2).sum().backward()
    return [t.cast(dtypes.float32).numpy() for t in (r, a.grad, b.grad)], (r.dtype, a.grad.dtype)
  got, dts = grads()
  monkeypatch.setattr(reduce, "_float_acc", lambda dt, default_float: None)
  want, want_dts = grads()
  assert dts == want_dts
  for g, w in zip(got, want): np.testing.assert_array_equal(g, w)
  np.testing.assert_allclose(got[1], np.full((5, 3), 2.0) @ y.astype(dt.name if dt is not dtypes.bfloat16 else np.float32).T,
                             rtol=2e-2, atol=2e-2)
