"""Tensor API: realize/numpy/tolist/item, dtype/shape properties, assign and __setitem__, clone, device moves,
autograd entry points (backward, gradient, detach, requires_grad propagation), train mode and repr."""
from __future__ import annotations
import numpy as np
import pytest
from core.tensor.tensor import Tensor
from core.tensor.gradient import compute_gradient, pm_gradient
from core.ir.dtype import dtypes
from core.ir.ops import Ops
from core.testing.capabilities import requires_dtype

def test_properties_and_host():
  t = Tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
  assert t.shape == (2, 3) and t.ndim == 2 and t.numel() == 6 and t.dtype is dtypes.float32 and len(t) == 2
  assert t.tolist() == [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
  assert t[1, 2].item() == 6.0 and isinstance(Tensor(3).item(), int)
  assert bytes(t.data())[:4] == np.float32(1.0).tobytes()
  assert t.realize() is t and t.numpy().tolist() == t.tolist()
  with pytest.raises(ValueError, match="item"): t.item()
  r = repr(t)
  assert "shape=(2, 3)" in r and "float32" in r

def test_realize_many_and_contiguous():
  a, b = Tensor([1, 2]) + 1, Tensor([3, 4]) * 2
  Tensor.realize(a, b)
  assert a.tolist() == [2, 3] and b.tolist() == [6, 8]
  c = Tensor([[1, 2], [3, 4]]).T.contiguous()
  assert c.tolist() == [[1, 3], [2, 4]]

def test_assign():
  t = Tensor([1.0, 2.0, 3.0])
  t.assign(Tensor([4.0, 5.0, 6.0]))
  assert t.tolist() == [4.0, 5.0, 6.0]
  t.assign(t * 2).realize()
  assert t.tolist() == [8.0, 10.0, 12.0]
  with pytest.raises(ValueError, match="assign"): t.assign(Tensor([1.0, 2.0]))
  z = Tensor.zeros(3)
  z += 1
  assert z.tolist() == [1.0, 1.0, 1.0]

def test_setitem_basic():
  x = np.arange(20, dtype=np.float32).reshape(4, 5)
  t = Tensor(x.copy())
  t[1] = 0.0
  t[2:, ::2] = Tensor([[-1.0, -2.0, -3.0]])
  t[0, -1] = 99.0
  x[1] = 0.0
  x[2:, ::2] = [[-1.0, -2.0, -3.0]]
  x[0, -1] = 99.0
  np.testing.assert_equal(t.numpy(), x)

def test_setitem_tensor_index():
  x = np.arange(12, dtype=np.int32).reshape(3, 4)
  t = Tensor(x.copy())
  t[Tensor([0, 2]), 1] = 50
  x[[0, 2], 1] = 50
  np.testing.assert_equal(t.numpy(), x)

def test_setitem_lazy_tensor_gets_own_buffer():
  a = Tensor.zeros(3).contiguous()
  a[0] = 5.0
  assert a.tolist() == [5.0, 0.0, 0.0]
  assert Tensor.zeros(3).tolist() == [0.0, 0.0, 0.0]

def test_clone_is_independent():
  a = Tensor([1.0, 2.0])
  b = a.clone()
  b[0] = 7.0
  assert a.tolist() == [1.0, 2.0] and b.tolist() == [7.0, 2.0]

def test_to_same_device_and_casts():
  t = Tensor([1.5, -2.5])
  assert t.to(t.device) is t
  assert t.int().tolist() == [1, -2] and t.half().dtype is dtypes.float16 and t.bool().tolist() == [True, True]

def test_backward_and_grad_accumulation():
  x = Tensor([1.0, 2.0, 3.0], requires_grad=True)
  (x * x).sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), [2.0, 4.0, 6.0])
  (x * 3).sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), [5.0, 7.0, 9.0])
  with pytest.raises(ValueError, match="gradient"): (x * 2).backward()

def test_gradient_function():
  x, y = Tensor([2.0], requires_grad=True), Tensor([3.0], requires_grad=True)
  z = (x * y + x.exp()).sum()
  gx, gy = z.gradient(x, y)
  np.testing.assert_allclose(gx.numpy(), [3.0 + np.exp(2.0)], rtol=1e-6)
  np.testing.assert_allclose(gy.numpy(), [2.0])
  w = Tensor([1.0], requires_grad=True)
  assert z.gradient(w)[0].tolist() == [0.0]   # no gradient reaches w: zeros, as in tinygrad
  with pytest.raises(RuntimeError, match="not part of the graph"): z.gradient(w, materialize_grads=False)

def test_detach_and_requires_grad_propagation():
  x = Tensor([1.0, 2.0], requires_grad=True)
  y = Tensor([3.0, 4.0])
  assert (x + y).requires_grad is True and y.requires_grad is None
  assert (y + Tensor([1.0, 1.0], requires_grad=False)).requires_grad is None
  assert Tensor([1.0], requires_grad=False).add(1).requires_grad is False
  (x * x.detach()).sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), [1.0, 2.0])  # the detached factor is a constant

def test_second_use_of_input_accumulates():
  x = Tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
  (x.sum(0) * x.sum(1)).sum().backward()  # d/dx_ij = colsum_i + rowsum_j
  s0, s1 = np.array([4.0, 6.0]), np.array([3.0, 7.0])
  np.testing.assert_allclose(x.grad.numpy(), s0[:, None] + s1[None, :])

@requires_dtype(dtypes.float16)
def test_contiguous_backward_and_cast_grad():
  x = Tensor([1.0, 2.0], requires_grad=True)
  (x.contiguous_backward().cast(dtypes.float16).cast(dtypes.float32) * 2).sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), [2.0, 2.0])

def test_compute_gradient_on_uops():
  x = Tensor([1.0, 2.0, 3.0]).uop
  y = (x * x).r(Ops.ADD, (0,))
  g = compute_gradient(y, y.const_like(1.0), [x])
  np.testing.assert_allclose(Tensor(g[x]).numpy(), [2.0, 4.0, 6.0])
  assert len(pm_gradient) > 20

def test_train_context():
  assert Tensor.training is False
  with Tensor.train():
    assert Tensor.training is True
    with Tensor.train(False): assert Tensor.training is False
    assert Tensor.training is True
  assert Tensor.training is False

def test_a_tensor_of_another_tensors_uop_adds_to_it():
  a = Tensor([1.0])
  b = Tensor(a.uop)
  assert (a + b).tolist() == [2.0]
