"""An eager `x + y` / `x * y` of a realized 1-d float tensor and a Python scalar whose plan the eager op cache holds builds no
node (core.tensor.elementwise.PendingOp): realize runs the plan from the key, and anything else that asks for the tensor's uop
gets the node the op always built. Results, graphs and gradients must be the ones the built node gives."""
import numpy as np
import pytest
from core import Tensor
from core.ir import ops as O
from core.ir.ops import Ops, UOp
from core.engine import realize as R

def _t(a: np.ndarray) -> Tensor: return Tensor(a).realize()

def _warm(fn) -> None:
  for _ in range(3): fn().realize()   # compile, eager plan, cache entry

def _alu_nodes_built(fn, monkeypatch) -> int:
  """How many ADD/MUL nodes fn() builds (new ones or hash-consed lookups: every UOp(...) call)."""
  built = [0]
  call = O.UOpMeta.__call__
  def counting(cls, op, *args, **kwargs):
    if op is Ops.ADD or op is Ops.MUL: built[0] += 1
    return call(cls, op, *args, **kwargs)
  monkeypatch.setattr(O.UOpMeta, "__call__", counting)
  try: fn()
  finally: monkeypatch.setattr(O.UOpMeta, "__call__", call)
  return built[0]

@pytest.mark.parametrize("op", ["add", "mul"])
def test_a_repeated_eager_scalar_op_builds_no_node(op, monkeypatch):
  a = np.arange(64, dtype=np.float32)
  x = _t(a)
  fn = (lambda: x + 1.5) if op == "add" else (lambda: x * 1.5)
  _warm(fn)
  h0 = R.eager_ops.hits
  out: list[Tensor] = []
  assert _alu_nodes_built(lambda: out.append(fn().realize()), monkeypatch) == 0
  assert R.eager_ops.hits == h0 + 1
  np.testing.assert_array_equal(out[0].numpy(), a + 1.5 if op == "add" else a * 1.5)

def test_a_pending_op_used_in_a_graph_is_the_node_the_op_builds():
  a = np.arange(64, dtype=np.float32)
  x = _t(a)
  _warm(lambda: x + 2)
  y = x + 2
  assert y.uop is UOp(Ops.ADD, x.dtype, (x.uop, UOp.const(x.dtype, 2, x.device, (64,))))
  np.testing.assert_array_equal((y * 3 - 1).numpy(), (a + 2) * 3 - 1)
  np.testing.assert_array_equal((x + 2).numpy(), a + 2)   # numpy() without realize()

def test_int_and_float_scalars_and_signed_zeros_give_their_own_results():
  a = np.array([-0.0, 0.0, 1.0, -2.5] * 16, dtype=np.float32)
  x = _t(a)
  for fn in (lambda: x + 1, lambda: x + 1.0, lambda: x + 0.0, lambda: x + -0.0, lambda: x * -0.0, lambda: x * 3): _warm(fn)
  for got, want in (((x + 1).realize(), a + 1), ((x + 1.0).realize(), a + 1), ((x + 0.0).realize(), a + np.float32(0.0)),
                    ((x + -0.0).realize(), a + np.float32(-0.0)), ((x * -0.0).realize(), a * np.float32(-0.0)), ((x * 3).realize(), a * 3)):
    np.testing.assert_array_equal(got.numpy(), want)
    assert np.array_equal(np.signbit(got.numpy()), np.signbit(want))

def test_a_scalar_float32_does_not_hold_exactly_still_matches_numpy():
  a = np.arange(64, dtype=np.float32)
  x = _t(a)
  _warm(lambda: x + 0.1)
  np.testing.assert_array_equal((x + 0.1).realize().numpy(), a + np.float32(0.1))

def test_the_new_values_of_the_input_buffer_are_read():
  a = np.arange(64, dtype=np.float32)
  x = _t(a)
  _warm(lambda: x * 2)
  y = x * 2
  x.assign(Tensor(a + 10)).realize()
  np.testing.assert_array_equal(y.realize().numpy(), (a + 10) * 2)

def test_a_pending_result_gets_its_gradient():
  a = np.arange(8, dtype=np.float32)
  x = _t(a)
  w = Tensor(np.full(8, 3.0, dtype=np.float32), requires_grad=True)
  _warm(lambda: x + 1)
  y = x + 1   # requires_grad None: it gets a gradient where one reaches it
  (y * w).sum().backward()
  np.testing.assert_array_equal(y.grad.numpy(), np.full(8, 3.0, dtype=np.float32))
  np.testing.assert_array_equal(w.grad.numpy(), a + 1)

def test_a_tensor_that_requires_grad_builds_its_node():
  x = Tensor(np.arange(8, dtype=np.float32), requires_grad=True).realize()
  _warm(lambda: x + 1)
  y = x + 1
  assert "uop" in y.__dict__
  y.sum().backward()
  np.testing.assert_array_equal(x.grad.numpy(), np.ones(8, dtype=np.float32))

def test_a_missing_attribute_still_raises_attribute_error():
  with pytest.raises(AttributeError, match="no attribute 'not_there'"): _ = Tensor([1.0]).not_there
