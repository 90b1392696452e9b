"""Copies between instances of the device under test (DEV:1) and to and from the PYTHON reference device: equal values in
every supported dtype, computing on the second instance, non-contiguous and empty sources, gradients across the move."""
from __future__ import annotations
import numpy as np
import pytest
from core.tensor.tensor import Tensor
from core.ir.dtype import DType, dtypes, to_np
from core.testing.capabilities import device_name, dtype_params
from core.testing.helpers import rng, scaled

def second() -> str: return f"{device_name()}:1"

def sample(dt: DType, shape: tuple[int, ...]) -> np.ndarray:
  r = rng(5)
  if dt is dtypes.bool: return r.integers(0, 2, shape).astype(bool)
  if dtypes.is_float(dt): return r.standard_normal(shape).astype(to_np(dt))
  return r.integers(0, 100, shape).astype(to_np(dt))

@pytest.mark.parametrize("dt", dtype_params([d for d in dtypes.all if d.fmt is not None]))
def test_round_trip_second_instance(dt):
  x = sample(dt, (3, scaled(101, 5)))
  t = Tensor(x)
  on1 = t.to(second())
  assert on1.device == second() and on1.dtype is dt
  back = on1.to(t.device)
  assert back.device == t.device
  np.testing.assert_array_equal(on1.numpy(), x)
  np.testing.assert_array_equal(back.numpy(), x)

def test_compute_on_second_instance_and_back():
  x = rng(1).standard_normal((scaled(64, 4), 9)).astype(np.float32)
  y = (Tensor(x).to(second()) * 2 + 1).sum(1)
  assert y.device == second()
  got = y.to(device_name()) - Tensor(x).sum(1) * 2   # combined with a tensor that never left the first instance
  np.testing.assert_allclose(got.numpy(), np.full(x.shape[0], x.shape[1], np.float32), rtol=1e-5, atol=1e-4)

def test_copy_of_views_and_empty():
  x = np.arange(scaled(60, 6) * 5, dtype=np.float32).reshape(-1, 5)
  np.testing.assert_array_equal(Tensor(x).T[1:, ::2].to(second()).numpy(), x.T[1:, ::2])
  np.testing.assert_array_equal(Tensor(x).flip(0).to(second()).to(device_name()).numpy(), x[::-1])
  assert Tensor.zeros(0, 4).to(second()).numpy().shape == (0, 4)
  assert Tensor(3.5).to(second()).item() == 3.5

def test_to_python_and_back():
  x = rng(2).integers(-1000, 1000, (7, 11)).astype(np.int32)
  p = Tensor(x).to("PYTHON")
  assert p.device == "PYTHON"
  np.testing.assert_array_equal((p + 1).to(device_name()).numpy(), x + 1)
  np.testing.assert_array_equal(Tensor(x, device="PYTHON").to(second()).numpy(), x)

def test_gradient_flows_across_move():
  x = Tensor([1.0, 2.0, 3.0], requires_grad=True)
  (x.to(second()) * Tensor([4.0, 5.0, 6.0], device=second())).sum().backward()
  assert x.grad is not None and x.grad.device == x.device
  np.testing.assert_allclose(x.grad.numpy(), [4.0, 5.0, 6.0])

def test_instances_have_separate_buffers():
  a = Tensor([1.0, 2.0]).contiguous().realize()
  b = a.to(second()).realize()
  a.assign(Tensor([7.0, 8.0]))
  assert a.tolist() == [7.0, 8.0] and b.tolist() == [1.0, 2.0]
