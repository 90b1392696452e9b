"""Stress: Jit (several outputs, aliasing outputs, fresh input buffers, an MLP optimizer step) and CPU:1 <-> CPU copies."""
from __future__ import annotations
import numpy as np
from core import Tensor, Jit
from core.tensor.nn import optim

def _arr(shape, seed=0): return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)

def test_jit_two_outputs():
  @Jit
  def f(a, b): return (a + b).contiguous(), (a * b).sum(1)
  for i in range(5):
    x, y = _arr((3, 4), i), _arr((3, 4), 100 + i)
    s, p = f(Tensor(x), Tensor(y))
    np.testing.assert_allclose(s.numpy(), x + y, rtol=1e-6)
    np.testing.assert_allclose(p.numpy(), (x * y).sum(1), rtol=1e-5, atol=1e-6)

def test_jit_outputs_keep_values_between_calls_when_copied():
  @Jit
  def f(a): return a * 2
  outs = []
  for i in range(4):
    x = _arr((5,), i)
    outs.append((f(Tensor(x)).numpy(), x * 2))
  for got, want in outs: np.testing.assert_allclose(got, want)

def test_jit_output_aliases_input():
  @Jit
  def f(a): return a
  for i in range(4):
    x = _arr((6,), i)
    np.testing.assert_equal(f(Tensor(x)).numpy(), x)

def test_jit_output_is_view_of_input():
  @Jit
  def f(a): return a[1:].reshape(2, 2)
  for i in range(4):
    x = _arr((5,), i)
    np.testing.assert_equal(f(Tensor(x)).numpy(), x[1:].reshape(2, 2))

def test_jit_with_realized_view_input():
  @Jit
  def f(a): return a + 1
  base = Tensor(np.arange(20, dtype=np.float32)).realize()
  for i in range(4):
    x = base[i:i + 5]
    np.testing.assert_equal(f(x).numpy(), np.arange(i, i + 5, dtype=np.float32) + 1)

def test_jit_assign_into_input_state():
  state = Tensor(np.zeros(3, np.float32)).realize()
  @Jit
  def step(x):
    state.assign(state + x)
    return state.realize()
  tot = np.zeros(3, np.float32)
  for i in range(5):
    x = _arr((3,), i)
    tot += x
    step(Tensor(x))
    np.testing.assert_allclose(state.numpy(), tot, rtol=1e-5)

def _mlp_params(seed):
  rng = np.random.default_rng(seed)
  return [rng.standard_normal(s).astype(np.float32) * 0.5 for s in [(4, 8), (8,), (8, 3), (3,)]]

def _mlp(ps, x):
  w1, b1, w2, b2 = ps
  return ((x @ w1 + b1).relu() @ w2 + b2)

def test_jit_sgd_step_matches_eager():
  init = _mlp_params(0)
  xs = [_arr((5, 4), 10 + i) for i in range(5)]
  ys = [_arr((5, 3), 20 + i) for i in range(5)]
  def run(use_jit):
    ps = [Tensor(p.copy(), requires_grad=True) for p in init]
    opt = optim.SGD(ps, lr=0.1, momentum=0.9)
    def step(x, y):
      Tensor.training = True
      opt.zero_grad()
      loss = ((_mlp(ps, x) - y) ** 2).mean()
      loss.backward()
      loss.realize()  # before the step: a lazy loss would read the updated parameters
      opt.step()
      return loss
    f = Jit(step) if use_jit else step
    losses = []
    for x, y in zip(xs, ys): losses.append(f(Tensor(x), Tensor(y)).item())
    Tensor.training = False
    return losses, [p.numpy() for p in ps]
  le, pe = run(False)
  lj, pj = run(True)
  np.testing.assert_allclose(lj, le, rtol=1e-5)
  for a, b in zip(pj, pe): np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
  # and eager matches a numpy reference of the first step's loss
  h = np.maximum(xs[0] @ init[0] + init[1], 0) @ init[2] + init[3]
  np.testing.assert_allclose(le[0], ((h - ys[0]) ** 2).mean(), rtol=1e-5)

def test_jit_adam_step_matches_eager():
  init = _mlp_params(1)
  xs = [_arr((5, 4), 30 + i) for i in range(4)]
  def run(use_jit):
    ps = [Tensor(p.copy(), requires_grad=True) for p in init]
    opt = optim.Adam(ps, lr=0.01)
    @Tensor.train()
    def step(x):
      opt.zero_grad()
      loss = _mlp(ps, x).square().sum()
      loss.backward()
      loss.realize()  # before the step: a lazy loss would read the updated parameters
      opt.step()
      return loss
    f = Jit(step) if use_jit else step
    return [f(Tensor(x)).item() for x in xs], [p.numpy() for p in ps]
  le, pe = run(False)
  lj, pj = run(True)
  np.testing.assert_allclose(lj, le, rtol=1e-5)
  for a, b in zip(pj, pe): np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)

def test_to_other_device_compute_back():
  a, b = _arr((4, 5), 0), _arr((5, 3), 1)
  ta = Tensor(a).to("CPU:1")
  tb = Tensor(b).to("CPU:1")
  assert ta.device.endswith(":1")
  r = (ta @ tb).relu().sum(0)
  assert r.device == ta.device
  back = r.to("CPU")
  np.testing.assert_allclose(back.numpy(), np.maximum(a @ b, 0).sum(0), rtol=1e-5, atol=1e-5)

def test_copy_of_view_to_other_device():
  a = np.arange(30, dtype=np.float32).reshape(5, 6)
  v = Tensor(a)[::-2, 1::2].T
  np.testing.assert_equal(v.to("CPU:1").numpy(), a[::-2, 1::2].T)
  np.testing.assert_equal((v.to("CPU:1") * 2).to("CPU").numpy(), a[::-2, 1::2].T * 2)

def test_copy_lazy_graph_roundtrip_and_assign():
  a = _arr((8,), 3)
  t = Tensor(a).to("CPU:1")
  t2 = (t + 1).to("CPU").to("CPU:1").to("CPU")
  np.testing.assert_allclose(t2.numpy(), a + 1, rtol=1e-6)
  d = Tensor(np.zeros(8, np.float32), device="CPU:1").realize()
  d.assign(Tensor(a).to("CPU:1") * 3).realize()
  np.testing.assert_allclose(d.numpy(), a * 3, rtol=1e-6)

def test_mixed_device_op_raises():
  import pytest
  with pytest.raises(ValueError, match="different devices"): Tensor([1.0]) + Tensor([1.0], device="CPU:1")

def test_jit_returns_input_after_assign():
  @Jit
  def k(a):
    a.assign(a * 2)
    return a.realize()
  for i in range(4):
    x = Tensor(np.full(2, i + 1.0, np.float32)).realize()
    out = k(x)
    np.testing.assert_equal(x.numpy(), np.full(2, 2 * (i + 1.0), np.float32))
    np.testing.assert_equal(out.numpy(), np.full(2, 2 * (i + 1.0), np.float32))

def test_jit_same_buffer_for_two_args():
  @Jit
  def f(a, b): return (a * b).contiguous()
  for i in range(4):
    x = Tensor(np.full(3, i + 1, np.float32)).realize()
    np.testing.assert_equal(f(x, x).numpy(), np.full(3, (i + 1) ** 2, np.float32))

import pytest  # noqa: E402

@pytest.mark.parametrize("view", ["step", "flip", "shrink", "permute", "expand"])
def test_copy_lazy_view_to_other_device(view):
  a = np.arange(6, dtype=np.float32)
  t = Tensor(a)
  v, n = {"step": (t[::2], a[::2]), "flip": (t.flip(0), a[::-1]), "shrink": (t[1:4], a[1:4]),
          "permute": (t.reshape(2, 3).T, a.reshape(2, 3).T), "expand": (t[:2].reshape(2, 1).expand(2, 3), np.broadcast_to(a[:2].reshape(2, 1), (2, 3)))}[view]
  np.testing.assert_equal(v.to("CPU:1").numpy(), n)
