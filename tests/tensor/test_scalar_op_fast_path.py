"""x + c and x * c with a Python scalar on a float tensor build their graph directly (elementwise._scalar_op): the same UOp,
dtype and requires_grad as the general path (Tensor.add / Tensor.mul through _operands), which every other case still takes."""
import numpy as np
import pytest
from core import Tensor
from core.ir.ops import Ops

CASES = [("float32", 1), ("float32", 2.5), ("float32", -0.0), ("float16", 70000), ("float16", 1e-8), ("float64", 3), ("bfloat16", 1.5),
         ("int32", 1), ("int32", 2.5), ("int8", 300), ("bool", 1), ("bool", True), ("float32", True), ("uint8", -1)]

@pytest.mark.parametrize("dtype,c", CASES)
@pytest.mark.parametrize("op", ["add", "mul"])
def test_same_graph_as_the_general_path(dtype, c, op):
  x = Tensor(np.arange(12).reshape(3, 4) % 3).cast(dtype).realize()
  fast = x + c if op == "add" else x * c
  general = getattr(x, op)(c)
  assert fast.uop is general.uop and fast.dtype == general.dtype and fast.requires_grad == general.requires_grad

def test_values_and_gradients():
  a = np.arange(12, dtype=np.float32).reshape(3, 4)
  x = Tensor(a, requires_grad=True)
  y = (x * 3 + 1.5) * x
  assert y.requires_grad is True
  y.sum().backward()
  np.testing.assert_array_equal(y.numpy(), (a * 3 + 1.5) * a)
  np.testing.assert_array_equal(x.grad.numpy(), 6 * a + 1.5)
  z = Tensor(a)
  assert (z + 1).requires_grad is None and Tensor(a, requires_grad=False).__add__(1).requires_grad is False

def test_other_operands_take_the_general_path():
  x = Tensor(np.arange(4, dtype=np.float32))
  with pytest.raises(TypeError): x + np.float32(2)   # a numpy scalar is no Python scalar: the general path's answer, as before
  np.testing.assert_array_equal((x + x).numpy(), np.arange(4) * 2)
  with pytest.raises(TypeError): x + "a"
  r = x + 1
  assert r.uop.op is Ops.ADD and r.uop.src[0] is x.uop

def test_the_result_tensor_is_made_without_keyword_arguments(monkeypatch):
  # every eager x + c makes its result here: a keyword argument would cost a dict per op in the class call
  calls = []
  init = Tensor.__init__
  def spy(self, *args, **kwargs):
    calls.append((args[1:], kwargs))
    init(self, *args, **kwargs)
  x = Tensor(np.arange(4, dtype=np.float32)).realize()
  g = Tensor(np.arange(4, dtype=np.float32), requires_grad=True)
  monkeypatch.setattr(Tensor, "__init__", spy)
  r, s = x + 1, g * 2.5
  assert calls == [((None, None, None), {}), ((None, None, True), {})] and s.requires_grad is True and r.requires_grad is None
  monkeypatch.undo()
  np.testing.assert_array_equal(r.numpy(), np.arange(4) + 1)
