"""Front-end semantics that don't depend on the device: which tensors backward() reaches, gradients with respect to
intermediate tensors, the exception types of bad arguments (as tinygrad raises them), empty slices and zero-size dims."""
from __future__ import annotations
import math
import numpy as np
import pytest
from core.tensor.tensor import Tensor
from core.ir.dtype import dtypes

# *** backward() and gradient() reach ***

def test_backward_reaches_tensors_that_may_need_grad():
  x = Tensor([1.0, 2.0, 3.0])                   # requires_grad None: "may need a gradient"
  w = Tensor([0.5, -1.0, 2.0], requires_grad=True)
  frozen = Tensor([4.0, 5.0, 6.0], requires_grad=False)
  h = x * w                                      # an intermediate the user still holds
  (h * frozen).sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), [2.0, -5.0, 12.0])
  np.testing.assert_allclose(w.grad.numpy(), [4.0, 10.0, 18.0])
  np.testing.assert_allclose(h.grad.numpy(), [4.0, 5.0, 6.0])
  assert frozen.grad is None

def test_backward_from_random_and_through_comparisons():
  t = Tensor.randn(5)
  (t * (t != 0)).sum().backward()                # the comparison carries no gradient, the product does
  np.testing.assert_allclose(t.grad.numpy(), (t.numpy() != 0).astype(np.float32))

def test_backward_skips_unreached_and_int_tensors():
  a, i = Tensor([1.0, 2.0]), Tensor([1, 2])
  b = Tensor([3.0, 4.0])
  ((a < b).where(a, 0) * i).sum().backward()
  np.testing.assert_allclose(a.grad.numpy(), [1.0, 2.0])
  assert i.grad is None and b.grad is None        # int tensors and tensors behind a comparison get no .grad
  with pytest.raises(RuntimeError): (Tensor([1.0]) < Tensor([2.0])).sum().backward()
  with pytest.raises(RuntimeError): Tensor([1.0], requires_grad=False).sum().backward()

def test_backward_accumulates():
  x = Tensor([1.0, 2.0])
  (x * 3).sum().backward()
  (x * x).sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), [5.0, 7.0])

def test_gradient_wrt_intermediates():
  a = Tensor([1.0, 2.0], requires_grad=True)
  b = a * 3
  c = b.exp()
  loss = (c * b).sum()
  gb, gc, ga = loss.gradient(b, c, a)
  bn = np.array([3.0, 6.0])
  np.testing.assert_allclose(gc.numpy(), bn, rtol=1e-6)
  np.testing.assert_allclose(gb.numpy(), np.exp(bn) * (1 + bn), rtol=1e-5)
  np.testing.assert_allclose(ga.numpy(), 3 * np.exp(bn) * (1 + bn), rtol=1e-5)
  (z,) = loss.gradient(Tensor([1.0, 2.0]))   # not in the graph: zeros, as in tinygrad
  np.testing.assert_equal(z.numpy(), [0.0, 0.0])
  with pytest.raises(RuntimeError): loss.gradient(Tensor([1.0, 2.0]), materialize_grads=False)
  (ge,) = Tensor.ones(0, 3).sum().gradient(e := Tensor.ones(0, 3))   # an empty sum doesn't read its input
  assert ge.shape == e.shape

# *** exception types ***

def test_exception_types():
  t = Tensor.ones(3, 4)
  with pytest.raises(IndexError): t[3]
  with pytest.raises(IndexError): t[0, -5]
  with pytest.raises(IndexError): t[0, 0, 0]
  with pytest.raises(IndexError): t.sum(2)
  with pytest.raises(IndexError): Tensor(1.0).cumsum(1)
  with pytest.raises(IndexError): t.cummax(-3)
  with pytest.raises(IndexError): t.sort(2)
  with pytest.raises(RuntimeError): t.div(2, rounding_mode="typo")
  with pytest.raises(RuntimeError): t.diagonal(dim1=1, dim2=-1)
  with pytest.raises(RuntimeError): t.meshgrid(t, indexing="yx")
  with pytest.raises(RuntimeError): t.unfold(0, 4, 1)
  with pytest.raises(RuntimeError): t.scatter_reduce(0, Tensor([[0]]), Tensor([[1.0]]), "median")
  with pytest.raises(RuntimeError): t.roll((1, 1), 0)
  with pytest.raises(ValueError): t.topk(5)
  with pytest.raises(ValueError): Tensor([1, 2]).one_hot(-1)
  with pytest.raises(ValueError): t.gelu("exact")
  with pytest.raises(TypeError): t.scatter(0, Tensor([[0]]), 1.0, reduce="max")
  with pytest.raises(RuntimeError): t @ Tensor.ones(3, 2)
  with pytest.raises(RuntimeError): Tensor(3.0) @ t
  with pytest.raises(NotImplementedError): t.pad((1, 0), mode="typo")
  with pytest.raises(ValueError): t.pad((1, 0, 2))
  with pytest.raises(RuntimeError): Tensor([-2, 0, 2]) ** -2
  with pytest.raises(ValueError): Tensor.linspace(5, 10, 3, dtype=dtypes.bool)
  with pytest.raises(ValueError): t[::0]
  with pytest.raises(TypeError): t[:Tensor([2]), 1]
  with pytest.raises(IndexError): Tensor(2.0)[:]

def test_tinygrad_exception_types():
  t = Tensor.ones(3, 4, 5)
  with pytest.raises(RuntimeError): t.permute(0, 2)
  with pytest.raises(RuntimeError): t.flip((0, 0))
  with pytest.raises(RuntimeError): t.reshape(-1, -1, 5)
  with pytest.raises(RuntimeError): Tensor.einsum("ij,jk->ik", Tensor.ones(2, 3), Tensor.ones(4, 5))
  with pytest.raises(RuntimeError): Tensor.einsum("...ik...,...jk->", t, t)
  with pytest.raises(RuntimeError): Tensor.einsum("ij->i", t)
  with pytest.raises(RuntimeError): t.gather(0, Tensor([1]))
  with pytest.raises(RuntimeError): Tensor.ones(1, 1, 6, 7).conv2d(Tensor.ones(6, 1, 3, 3), dilation=3)
  with pytest.raises(RuntimeError): t.clip(None, None)
  with pytest.raises(IndexError): Tensor(1.0).squeeze(1)
  with pytest.raises(IndexError): t[[True, False]]
  with pytest.raises(IndexError): t[[1.5]]
  with pytest.raises(ValueError): Tensor.stack((Tensor([1, 2]), Tensor([3, 4])), Tensor([5, 6]))
  np.testing.assert_equal(Tensor.stack([Tensor([1, 2]), Tensor([3, 4])], dim=1).numpy(), [[1, 3], [2, 4]])
  np.testing.assert_equal(Tensor.cat((Tensor([1]), Tensor([2, 3]))).numpy(), [1, 2, 3])
  assert Tensor(2.0).squeeze(0).shape == () and Tensor(2.0).squeeze(-1).shape == ()

def test_arange_int_range():
  for args, dt in [((2**33,), dtypes.int32), ((129,), dtypes.int8), ((-129, 128), dtypes.int8), ((128, 0, -1), dtypes.int8), ((127, -130, -1), dtypes.int8)]:
    with pytest.raises(OverflowError): Tensor.arange(*args, dtype=dt)
  np.testing.assert_equal(Tensor.arange(127, -129, -1, dtype=dtypes.int8).numpy(), np.arange(127, -129, -1, dtype=np.int8))
  big = Tensor.arange(2**31, 2**31 + 3)   # beyond default_int: int64, like tinygrad
  assert big.dtype is dtypes.int64
  np.testing.assert_equal(big.numpy(), np.arange(2**31, 2**31 + 3))

def test_arange_graph_built_once_per_size():
  # arange's index graph (a running sum of ones) is built once per (n, device): later calls reuse it, and realizing one
  # result leaves the others and the cached graph intact
  from core.tensor import creation
  first = Tensor.arange(300)
  hits = creation._iotas.hits
  again = Tensor.arange(5, 305)
  assert creation._iotas.hits > hits
  np.testing.assert_equal(first.realize().numpy(), np.arange(300))
  np.testing.assert_equal(again.numpy(), np.arange(5, 305))
  np.testing.assert_equal(Tensor.arange(0, 600, 2).numpy(), np.arange(0, 600, 2))
  np.testing.assert_equal(Tensor.ones(4, 4).tril().numpy(), np.tril(np.ones((4, 4), np.float32)))

@pytest.mark.parametrize("sa,sb", [((3, 4), (4, 5)), ((2, 3, 4), (2, 4, 5)), ((1, 3, 6, 5), (1, 3, 5, 7)), ((2, 2, 300), (2, 300, 3))], ids=str)
def test_batched_matmul_graph_and_values(sa, sb):
  # same-batch float matmuls take the UOp-level path: the graph must be the general path's, values and gradients numpy's
  rng = np.random.default_rng(0)
  an, bn = rng.standard_normal(sa, dtype=np.float32), rng.standard_normal(sb, dtype=np.float32)
  a, b = Tensor(an, requires_grad=True), Tensor(bn, requires_grad=True)
  out = a @ b
  assert out.uop is a.dot(b, dtype=dtypes.float32).uop
  np.testing.assert_allclose(out.numpy(), an @ bn, rtol=1e-5, atol=1e-4)
  out.sum().backward()
  np.testing.assert_allclose(a.grad.numpy(), np.ones(out.shape, np.float32) @ bn.swapaxes(-1, -2), rtol=1e-5, atol=1e-4)
  np.testing.assert_allclose(b.grad.numpy(), an.swapaxes(-1, -2) @ np.ones(out.shape, np.float32), rtol=1e-5, atol=1e-4)

def test_broadcast_graph_and_grads():
  # binary ops broadcast on UOps directly: the graph must be what reshape + expand make, gradients sum over broadcast dims
  an, bn = np.arange(12, dtype=np.float32).reshape(3, 1, 4), np.arange(5, dtype=np.float32).reshape(5, 1) - 2
  a, b = Tensor(an, requires_grad=True), Tensor(bn, requires_grad=True)
  assert a._broadcast_to((2, 3, 5, 4)).uop is a.reshape(1, 3, 1, 4).expand(2, 3, 5, 4).uop
  out = a * b
  np.testing.assert_equal(out.numpy(), an * bn)
  out.sum().backward()
  np.testing.assert_equal(a.grad.numpy(), np.broadcast_to(bn.sum(), (3, 1, 4)))
  np.testing.assert_equal(b.grad.numpy(), np.broadcast_to(an.sum() * 1, (5, 1)))

# *** empty slices and zero-size dims ***

@pytest.mark.parametrize("idx", [slice(3, 1), slice(5, 2, 2), slice(1, 3, -1), slice(-1, -3), slice(10, 20), slice(-10, -8)], ids=str)
def test_slices_with_start_after_end_are_empty(idx):
  x = np.arange(5.0, dtype=np.float32)
  got = Tensor(x)[idx]
  assert got.shape == x[idx].shape == (0,)
  np.testing.assert_equal(Tensor(x.reshape(1, 5))[:, idx].numpy(), x.reshape(1, 5)[:, idx])

def test_zero_size_dims():
  e = Tensor.ones(0, 3)
  np.testing.assert_equal(e.sum(0).numpy(), np.zeros(3))
  np.testing.assert_equal(e.prod(0).numpy(), np.ones(3))
  assert np.isnan(e.mean(0).numpy()).all() and np.isnan(e.var(0).numpy()).all() and np.isnan(e.std().item())
  assert np.isnan(Tensor.ones(1).var().item())                       # one element, correction 1: 0/0
  assert e.sum(1).shape == (0,) and e.max(1).shape == (0,)
  for f in (lambda t: t.cumsum(0), lambda t: t.cumprod(0), lambda t: t.cummax(0)[0], lambda t: t.logcumsumexp(0),
            lambda t: t.sort(0)[0], lambda t: t.softmax(0), lambda t: t.flip(0), lambda t: t.roll(1, 0), lambda t: t.tril()):
    assert f(e).shape == (0, 3)
  assert e.masked_select(e > 0).shape == (0,) and e.nonzero().shape == (0, 2)
  assert (e @ Tensor.ones(3, 2)).shape == (0, 2)
  np.testing.assert_equal((Tensor.ones(2, 0) @ Tensor.ones(0, 3)).numpy(), np.zeros((2, 3)))
  assert Tensor.ones(2, 0).cat(Tensor.ones(2, 0), dim=1).shape == (2, 0)
  assert math.isinf(Tensor.ones(0).max().item())

def test_small_int_composites_dont_wrap():
  x = np.array([200, 250, 100], np.uint8)
  assert Tensor(x).logsumexp().item() == pytest.approx(float(np.logaddexp.reduce(x.astype(np.float64))), rel=1e-6)
  assert Tensor(x).mean().item() == pytest.approx(x.astype(np.float64).mean())
  assert Tensor(x).sum().item() == 550 and Tensor(x).sum().dtype is dtypes.uint32
  np.testing.assert_equal((Tensor(np.array([-8, 5], np.int32)) >> 1).numpy(), [-4, 2])   # arithmetic shift keeps the sign
  np.testing.assert_equal((Tensor(np.array([-8, 5], np.int8)) << 2).numpy(), np.array([-32, 20], np.int8))
