"""Tensor.realize checks its own arguments (validate.checks_own_arguments): validate.check_tensor's message, without the generated wrapper."""
import numpy as np
import pytest
from core import Tensor

def test_realize_of_several_tensors():
  a, b = Tensor(np.arange(4, dtype=np.float32)) + 1, Tensor(np.ones(3, dtype=np.float32)) * 2
  assert a.realize(b) is a
  np.testing.assert_array_equal(a.numpy(), np.arange(4) + 1)
  np.testing.assert_array_equal(b.numpy(), [2, 2, 2])

@pytest.mark.parametrize("bad,got", [(5, "int 5"), (None, "None None"), (np.ones(2), "ndarray array([1., 1.])")])
def test_realize_names_a_bad_argument(bad, got):
  t = Tensor(np.arange(4, dtype=np.float32))
  with pytest.raises(TypeError) as e: t.realize(t + 1, bad)
  assert str(e.value) == f"Tensor.realize: argument '*lst' must be a Tensor, got {got}"

def test_realize_is_not_wrapped():
  Tensor(np.ones(2, dtype=np.float32)).realize()   # past a first call, when validate's stubs put their checked versions in place
  assert not hasattr(Tensor.realize, "__wrapped__")
