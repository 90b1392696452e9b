"""Optimizers: three steps of each against numpy implementations of the published update rules."""
from __future__ import annotations
from typing import Callable
import numpy as np
import pytest
from core.tensor.tensor import Tensor
from core.tensor import nn
from core.tensor.nn.optim import SGD, Adam, AdamW, LAMB, Optimizer
from core.helpers import Context, TRAINING

X = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
W0 = np.random.default_rng(1).standard_normal((4, 3)).astype(np.float32)
B0 = np.random.default_rng(2).standard_normal((3,)).astype(np.float32)

@pytest.fixture(autouse=True)
def training():
  with Context(TRAINING=1): yield

def np_grads(w: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """Gradients of loss = sum((X @ w + b)^2): nonlinear in the weights, so every step sees a new gradient."""
  y = X.astype(np.float64) @ w + b
  return 2 * X.T.astype(np.float64) @ y, 2 * y.sum(0)

def run_core(make_opt: Callable[[list[Tensor]], Optimizer], steps: int = 3) -> tuple[np.ndarray, np.ndarray]:
  w, b = Tensor(W0, requires_grad=True), Tensor(B0, requires_grad=True)
  opt = make_opt([w, b])
  for _ in range(steps):
    opt.zero_grad()
    ((Tensor(X) @ w + b) ** 2).sum().backward()
    assert opt.step() is None  # type: ignore[func-returns-value]  # checks the documented contract: step() returns nothing
  return w.numpy(), b.numpy()

def np_sgd(lr, momentum=0.0, wd=0.0, nesterov=False, steps=3):
  ps = [W0.astype(np.float64), B0.astype(np.float64)]
  bufs = [np.zeros_like(p) for p in ps]
  for _ in range(steps):
    gs = np_grads(*ps)
    for i, (p, g) in enumerate(zip(ps, gs)):
      g = g + wd * p
      if momentum:
        bufs[i] = momentum * bufs[i] + g
        g = g + momentum * bufs[i] if nesterov else bufs[i]
      ps[i] = p - lr * g
  return ps

def np_lamb(lr, b1, b2, eps, wd, adam, steps=3):
  ps = [W0.astype(np.float64), B0.astype(np.float64)]
  m, v = [np.zeros_like(p) for p in ps], [np.zeros_like(p) for p in ps]
  for t in range(1, steps + 1):
    gs = np_grads(*ps)
    for i, (p, g) in enumerate(zip(ps, gs)):
      m[i] = b1 * m[i] + (1 - b1) * g
      v[i] = b2 * v[i] + (1 - b2) * g * g
      up = (m[i] / (1 - b1 ** t)) / (np.sqrt(v[i] / (1 - b2 ** t)) + eps) + wd * p
      if not adam:
        pn, un = np.linalg.norm(p), np.linalg.norm(up)
        up = up * (pn / un if pn > 0 and un > 0 else 1.0)
      ps[i] = p - lr * up
  return ps

def check(got: tuple[np.ndarray, np.ndarray], want: list[np.ndarray], rtol: float = 1e-4, atol: float = 1e-5):
  for g, w in zip(got, want): np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
  # the reference moved: a no-op optimizer would fail this test
  assert not np.allclose(want[0], W0, atol=1e-4)

@pytest.mark.parametrize("kw", [dict(), dict(momentum=0.9), dict(momentum=0.9, nesterov=True), dict(weight_decay=0.1),
                                dict(momentum=0.5, weight_decay=0.05, nesterov=True)])
def test_sgd_three_steps_match_numpy(kw):
  got = run_core(lambda ps: SGD(ps, lr=0.01, **kw))
  check(got, np_sgd(0.01, kw.get("momentum", 0.0), kw.get("weight_decay", 0.0), kw.get("nesterov", False)))

def test_adam_three_steps_match_numpy():
  check(run_core(lambda ps: Adam(ps, lr=0.05)), np_lamb(0.05, 0.9, 0.999, 1e-8, 0.0, True))

def test_adamw_three_steps_match_numpy():
  check(run_core(lambda ps: AdamW(ps, lr=0.05, weight_decay=0.1)), np_lamb(0.05, 0.9, 0.999, 1e-8, 0.1, True))

def test_lamb_three_steps_match_numpy():
  check(run_core(lambda ps: LAMB(ps, lr=0.05, b1=0.8, b2=0.99, eps=1e-6, weight_decay=0.01)), np_lamb(0.05, 0.8, 0.99, 1e-6, 0.01, False))

def test_lamb_trust_ratio_is_one_for_zero_weights():
  # p = 0 makes ||p|| zero: the update falls back to plain Adam instead of dividing by zero or freezing
  w = Tensor(np.zeros((2, 2), np.float32), requires_grad=True)
  opt = LAMB([w], lr=0.1)
  (w * Tensor([[1.0, -2.0], [3.0, 0.0]])).sum().backward()
  opt.step()
  # first Adam step: m_hat/sqrt(v_hat) = sign(g) (0 where g = 0)
  np.testing.assert_allclose(w.numpy(), -0.1 * np.array([[1, -1], [1, 0]]), rtol=1e-4, atol=1e-6)

def test_lr_is_a_tensor_and_can_change_between_steps():
  w = Tensor(np.ones(3, np.float32), requires_grad=True)
  opt = SGD([w], lr=0.5)
  assert isinstance(opt.lr, Tensor) and opt.lr.numpy().tolist() == [0.5]
  (w * Tensor([1.0, 2.0, 3.0])).sum().backward()
  opt.step()
  opt.lr.assign(Tensor([0.25])).realize()
  opt.zero_grad()
  (w * Tensor([1.0, 2.0, 3.0])).sum().backward()
  opt.step()
  np.testing.assert_allclose(w.numpy(), 1 - 0.75 * np.array([1, 2, 3]), rtol=1e-6)

def test_zero_grad_clears_grads():
  w = Tensor(np.ones(2, np.float32), requires_grad=True)
  opt = SGD([w], lr=0.1)
  (w * 3).sum().backward()
  assert w.grad is not None
  opt.zero_grad()
  assert w.grad is None

def test_param_without_grad_is_left_alone():
  used, unused = Tensor(np.ones(2, np.float32), requires_grad=True), Tensor(np.full(2, 7.0, np.float32), requires_grad=True)
  opt = Adam([used, unused], lr=0.1)
  (used * 2).sum().backward()
  opt.step()
  np.testing.assert_allclose(used.numpy(), [0.9, 0.9], rtol=1e-5)
  np.testing.assert_array_equal(unused.numpy(), [7.0, 7.0])

def test_params_and_buffers_are_split_by_requires_grad():
  layer, bn = nn.Linear(3, 2), nn.BatchNorm(2)
  ps = nn.state.get_parameters([layer, bn])
  opt = SGD(ps, lr=0.1)
  # tensors created without an explicit requires_grad become parameters; running stats stay buffers
  assert {id(p) for p in opt.params} == {id(layer.weight), id(layer.bias), id(bn.weight), id(bn.bias)}
  assert {id(b) for b in opt.buffers} == {id(bn.running_mean), id(bn.running_var), id(bn.num_batches_tracked)}
  assert all(p.requires_grad for p in opt.params)

def test_step_realizes_batchnorm_running_stats():
  bn = nn.BatchNorm(2)
  opt = SGD(nn.state.get_parameters(bn), lr=0.1)
  x = np.array([[1.0, 2.0], [3.0, 6.0]], np.float32)
  (bn(Tensor(x)) * Tensor([[1.0, 2.0], [3.0, 4.0]])).sum().backward()
  opt.step()
  np.testing.assert_allclose(bn.running_mean.numpy(), 0.1 * x.mean(0), rtol=1e-5)
  np.testing.assert_allclose(bn.running_var.numpy(), 0.9 + 0.1 * x.var(0) * 2, rtol=1e-5)

def test_step_realizes_running_stats_left_out_of_the_optimizer():
  # torch's habit: only the trained parameters go to the optimizer. The running statistics' pending writes read the forward
  # pass of the weights before the step; step() realizes them with the gradients (the next step's assign would otherwise run
  # them later, a second forward pass of the old weights), and they hold the old weights' statistics
  from core.schedule.realize_points import contiguous_buffer
  layer, bn = nn.Linear(4, 3), nn.BatchNorm(3)
  layer.weight, layer.bias = Tensor(W0.T.copy()), Tensor(B0)
  w0, b0 = W0.T.astype(np.float64), B0.astype(np.float64)
  opt = SGD([layer.weight, layer.bias, bn.weight, bn.bias], lr=0.5)
  assert not opt.buffers
  bn(layer(Tensor(X))).square().sum().backward()
  opt.step()
  assert contiguous_buffer(bn.running_mean.uop) is not None and contiguous_buffer(bn.running_var.uop) is not None
  h = X.astype(np.float64) @ w0.T + b0
  assert not np.allclose(layer.weight.numpy(), w0)
  np.testing.assert_allclose(bn.running_mean.numpy(), 0.1 * h.mean(0), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(bn.running_var.numpy(), 0.9 + 0.1 * h.var(0, ddof=1), rtol=1e-5)

def test_optimizer_needs_a_parameter():
  with pytest.raises(ValueError, match="requires grad"): SGD([Tensor([1.0], requires_grad=False)], lr=0.1)
  with pytest.raises(ValueError, match="nesterov"): SGD([Tensor([1.0])], lr=0.1, nesterov=True)

def test_shared_param_is_updated_once():
  w = Tensor(np.ones(2, np.float32), requires_grad=True)
  opt = SGD([w, w], lr=0.5)
  assert len(opt.params) == 1
  (w * Tensor([1.0, 2.0])).sum().backward()
  opt.step()
  np.testing.assert_allclose(w.numpy(), [0.5, 0.0])

def test_jit_captured_step_follows_lr_changes():
  from core import Jit
  w = Tensor(np.zeros(3, np.float32), requires_grad=True)
  opt = SGD([w], lr=0.1)
  @Jit
  def step(x: Tensor) -> Tensor:
    opt.zero_grad()
    loss = (w * x).sum()
    loss.backward()
    opt.step()
    return w
  ref, lr = np.zeros(3), 0.1
  for i in range(5):
    if i == 3:
      opt.lr.assign(Tensor([0.5])).realize()
      lr = 0.5
    x = np.array([1.0, 2.0, 3.0]) * (i + 1)
    step(Tensor(x.astype(np.float32)))
    ref = ref - lr * x
  np.testing.assert_allclose(w.numpy(), ref, rtol=1e-6)

def test_loss_read_after_step_is_the_loss_before_it():
  # like an eager framework: the loss tensor keeps the value of the weights its gradients belong to, even when it is
  # first read after opt.step() overwrote them
  w = Tensor(W0, requires_grad=True)
  opt = SGD([w], lr=0.1)
  loss = (Tensor(X) @ w).square().sum().backward()
  opt.step()
  np.testing.assert_allclose(loss.item(), float(((X.astype(np.float64) @ W0) ** 2).sum()), rtol=1e-4)
  np.testing.assert_allclose(w.numpy(), W0 - 0.1 * 2 * X.T.astype(np.float64) @ (X.astype(np.float64) @ W0), rtol=1e-4, atol=1e-5)

def test_step_outside_training_mode_raises_and_changes_nothing():
  w = Tensor(W0.copy(), requires_grad=True)
  opt = SGD([w], lr=0.1)
  (w * w).sum().backward()
  with Tensor.train(False):
    with pytest.raises(RuntimeError, match=r"step\(\) outside training mode.*Tensor.train\(\)"): opt.step()
  np.testing.assert_array_equal(w.numpy(), W0)
  with Context(TRAINING=1): opt.step()   # Context(TRAINING=1) is the same switch
  np.testing.assert_allclose(w.numpy(), W0 - 0.1 * 2 * W0, rtol=1e-6)

def test_context_training_and_tensor_train_are_one_switch():
  with Tensor.train(False):
    assert not Tensor.training and not TRAINING
    with Context(TRAINING=1): assert Tensor.training
    with Tensor.train():
      assert TRAINING.value == 1
      with Context(TRAINING=0): assert not Tensor.training
      assert Tensor.training
    Tensor.training = True
    assert TRAINING.value == 1
  assert Tensor.training   # the autouse fixture's setting, restored by train(False)'s exit
