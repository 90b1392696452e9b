"""Jit through the Tensor API on the device under test: capture on the second call, replay on new inputs with the same
results as eager execution, random numbers that continue the stream, and a clear error on changed shapes."""
from __future__ import annotations
import numpy as np
import pytest
from core.tensor.tensor import Tensor
from core.tensor.jit import Jit, JitError
from core.testing.helpers import rng, scaled

def test_replay_matches_numpy_on_new_inputs():
  @Jit
  def f(a: Tensor, b: Tensor) -> Tensor: return ((a @ b).relu() + a.sum(1, keepdim=True)).realize()
  n = scaled(24, 3) + 1
  r = rng(11)
  for _ in range(5):
    x, y = r.standard_normal((n, 5)).astype(np.float32), r.standard_normal((5, 7)).astype(np.float32)
    np.testing.assert_allclose(f(Tensor(x), Tensor(y)).numpy(), np.maximum(x @ y, 0) + x.sum(1, keepdims=True), rtol=1e-5, atol=1e-5)
  assert f.cnt == 2 and len(f.items) >= 1, "the Jit never captured"

def test_several_outputs_and_int_inputs():
  @Jit
  def f(a: Tensor) -> tuple[Tensor, Tensor]: return (a * 3).realize(), (a.max() - a.min()).realize()
  for i in range(4):
    x = np.arange(10, dtype=np.int32) * (i + 1) - 7
    m, span = f(Tensor(x))
    np.testing.assert_equal(m.numpy(), x * 3)
    assert span.item() == x.max() - x.min()

def test_random_in_jit_continues_eager_stream():
  @Jit
  def f(a: Tensor) -> Tensor: return (a + Tensor.rand(6)).realize()
  Tensor.manual_seed(3)
  got = [f(Tensor.zeros(6).contiguous()).numpy().copy() for _ in range(4)]
  Tensor.manual_seed(3)
  want = [Tensor.rand(6).numpy() for _ in range(4)]
  for g, w in zip(got, want): np.testing.assert_array_equal(g, w)

def test_training_step_in_jit():
  w = Tensor([[0.5, -1.0], [2.0, 0.25]], requires_grad=True).contiguous().realize()
  @Jit
  def step(x: Tensor) -> Tensor:
    loss = ((x @ w) ** 2).sum()
    g, = loss.gradient(w)
    w.assign(w - g * 0.01)
    # the update must be realized inside the step too, or the captured kernels would leave it out
    return loss.realize(w)
  wn = np.array([[0.5, -1.0], [2.0, 0.25]])
  for i in range(4):
    xn = np.array([[1.0, 2.0 + i]])
    np.testing.assert_allclose(step(Tensor(xn.astype(np.float32))).item(), ((xn @ wn) ** 2).sum(), rtol=1e-5)
    wn = wn - 0.01 * 2 * xn.T @ (xn @ wn)
    np.testing.assert_allclose(w.numpy(), wn, rtol=1e-5)

def test_changed_shape_raises_naming_both():
  @Jit
  def f(a: Tensor) -> Tensor: return (a * 2).realize()
  for _ in range(3): f(Tensor.ones(4))
  with pytest.raises(JitError, match=r"inputs changed.*\(4,\).*\(5,\)"): f(Tensor.ones(5))
