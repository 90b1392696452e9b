"""Jit: capture on the second call, replay kernels on new input buffers, refuse changed shapes."""
import numpy as np
import pytest
from core import Tensor, Jit, TinyJit, GlobalCounters
from core.tensor.jit import JitError

def test_replays_with_new_inputs():
  @Jit
  def f(a, b): return (a * b + 1).sum(axis=1)
  rng = np.random.default_rng(0)
  for i in range(5):
    x, y = rng.standard_normal((4, 8), dtype=np.float32), rng.standard_normal((4, 8), dtype=np.float32)
    out = f(Tensor(x), Tensor(y)).numpy()
    np.testing.assert_allclose(out, (x * y + 1).sum(axis=1), rtol=1e-5, atol=1e-5)
  assert f.cnt == 2 and len(f.items) >= 1

def test_replay_returns_tuples_views_of_inputs_and_keyword_inputs():
  # a tuple of a computed tensor and a reshape of the input (rebuilt over each call's input), one input passed by keyword
  @Jit
  def f(a, *, b): return (a * b).sum(axis=0), a.reshape(-1)
  rng = np.random.default_rng(1)
  for _ in range(5):
    x, y = rng.standard_normal((2, 4, 4), dtype=np.float32)
    s, v = f(Tensor(x), b=Tensor(y))
    np.testing.assert_allclose(s.numpy(), (x * y).sum(axis=0), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(v.numpy(), x.reshape(-1))
  with pytest.raises(JitError, match="inputs changed"): f(Tensor(x), b=Tensor(y[:2]))
  f.reset()
  for _ in range(3):   # after reset the Jit captures again, for the new shapes
    s, _ = f(Tensor(x[:2]), b=Tensor(y[:2]))
    np.testing.assert_allclose(s.numpy(), (x[:2] * y[:2]).sum(axis=0), rtol=1e-5, atol=1e-6)

def test_replay_runs_only_captured_kernels():
  @Jit
  def f(a): return (a + 1).exp()
  for _ in range(2): f(Tensor.ones(16).contiguous())
  x = Tensor.ones(16).contiguous().realize()
  GlobalCounters.reset()
  f(x)
  assert GlobalCounters.kernel_count == len(f.items)

def test_changed_shape_raises_clear_error():
  @Jit
  def f(a): return a * 2
  for _ in range(3): f(Tensor.ones(4))
  with pytest.raises(JitError, match="inputs changed"): f(Tensor.ones(5))

def test_changed_dtype_raises_clear_error():
  @Jit
  def f(a): return a * 2
  for _ in range(3): f(Tensor.ones(4, dtype="float32"))
  with pytest.raises(JitError, match="inputs changed"): f(Tensor.ones(4, dtype="int32"))

def test_tinyjit_is_jit():
  assert TinyJit is Jit

def test_jit_training_step_updates_parameters():
  w = Tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True).contiguous().realize()
  @Jit
  def step(x):
    loss = (x @ w).sum()
    grad, = loss.gradient(w)
    w.assign(w - grad * 0.1)
    return loss.realize(), w.realize()
  x_np = np.array([[1.0, 1.0]], dtype=np.float32)
  w_np = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32)
  for _ in range(4):
    loss, _ = step(Tensor(x_np))
    np.testing.assert_allclose(loss.numpy(), (x_np @ w_np).sum(), rtol=1e-6)
    w_np = w_np - 0.1 * x_np.T @ np.ones((1, 2), dtype=np.float32)
    np.testing.assert_allclose(w.numpy(), w_np, rtol=1e-6)

def test_random_numbers_differ_between_replays_and_match_eager():
  @Jit
  def f(a): return (a + Tensor.rand(8)).realize()
  Tensor.manual_seed(7)
  got = [f(Tensor.zeros(8).contiguous()).numpy().copy() for _ in range(4)]
  Tensor.manual_seed(7)
  want = [(Tensor.zeros(8) + Tensor.rand(8)).numpy() for _ in range(4)]
  for g, w in zip(got, want): np.testing.assert_array_equal(g, w)
  assert len({g.tobytes() for g in got}) == 4, "every call draws new numbers"

def test_symbolic_variable_bound_per_call():
  from core import Variable
  @Jit
  def f(a, b): return (a * b + 1).sum(axis=1).realize()
  rng = np.random.default_rng(1)
  compiled = None
  for i in [3, 5, 2, 7, 4]:
    v = Variable("i", 1, 10).bind(i)
    x, y = rng.standard_normal((3, i), dtype=np.float32), rng.standard_normal((3, i), dtype=np.float32)
    out = f(Tensor(x).reshape(3, v), Tensor(y).reshape(3, v))
    np.testing.assert_allclose(out.numpy(), (x * y + 1).sum(axis=1), rtol=1e-5, atol=1e-5)
    if f.cnt == 2: compiled = compiled or len(f.items)
  assert f.cnt == 2 and compiled == len(f.items)

def test_symbolic_shape_out_of_range_is_refused():
  from core import Variable
  with pytest.raises(ValueError, match="outside its range"): Variable("i", 1, 10).bind(11)

def test_first_call_compiles_what_the_capture_replays(monkeypatch):
  # eager float literals are kernel arguments, but a Jit's kernels keep them: its first (eager) call must compile those same
  # kernels, or every Jit'd function with a float literal compiles its kernels twice
  from core.codegen import program
  names: list[str] = []
  orig = program._get_program
  def counting(ast, *args, **kwargs):
    names.append(ast.arg)
    return orig(ast, *args, **kwargs)
  monkeypatch.setattr(program, "_get_program", counting)
  @Jit
  def f(a): return (a * 2.75 - 0.5).exp2().sum(axis=1).realize()
  x = np.random.default_rng(7).standard_normal((5, 9), dtype=np.float32)
  np.testing.assert_allclose(f(Tensor(x)).numpy(), np.exp2(x * 2.75 - 0.5).sum(axis=1), rtol=1e-5)
  first = len(names)
  assert first >= 1
  for i in range(3): np.testing.assert_allclose(f(Tensor(x + i)).numpy(), np.exp2((x + i) * 2.75 - 0.5).sum(axis=1), rtol=1e-5)
  assert names[first:] == [], f"the capture compiled kernels of its own: {names[first:]}"
  # outside a Jit the literal is an argument again: a new value compiles nothing
  (Tensor(x) * 2.75).realize()
  n = len(names)
  np.testing.assert_allclose((Tensor(x) * 3.25).numpy(), x * 3.25)
  assert len(names) == n
