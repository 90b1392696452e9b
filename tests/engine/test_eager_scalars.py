"""Eager ops with new Python scalars: the schedule is keyed by the graph's structure, its float literals are inputs (kernel
variables bound per call), so a new value plans no new schedule, and every value gives numpy's result."""
import numpy as np
import pytest
from core import Tensor, Variable, dtypes
from core.engine import realize as R
from core.tensor.jit import Jit

@pytest.fixture
def schedules_made(monkeypatch):
  """The number of schedules planned (cache misses) since the fixture was made, from an empty schedule cache (another test
  may have planned the same structure)."""
  R.schedules.clear()
  made = [0]
  real = R.create_schedule
  def counting(roots, *args):
    made[0] += 1
    return real(roots, *args)
  monkeypatch.setattr(R, "create_schedule", counting)
  return made

def test_new_scalar_values_reuse_one_schedule(schedules_made):
  xn = np.linspace(-3, 3, 64, dtype=np.float32)
  x = Tensor(xn).realize()
  values = [2.5, 3.5, -0.25, 1e-3, 123.0, 7.75, -1e6, 0.3]
  for v in values: np.testing.assert_allclose((x * v).numpy(), xn * np.float32(v), rtol=1e-6)
  assert schedules_made[0] == 1
  # two scalars in one graph: still one schedule for all their values (the order of the literals is the graph's)
  for v, w in zip(values, values[1:]): np.testing.assert_allclose((x * v + w).numpy(), xn * np.float32(v) + np.float32(w), rtol=1e-6, atol=1e-6)
  assert schedules_made[0] == 2
  # a new buffer with a new value: the same schedule
  y = Tensor(xn[::-1].copy()).realize()
  np.testing.assert_allclose((y * 9.5).numpy(), xn[::-1] * np.float32(9.5), rtol=1e-6)
  assert schedules_made[0] == 2

def test_equal_scalars_are_one_node_and_a_different_structure():
  # x * v + v holds one literal node, x * v + w two: different keys, and each gives the right values for every pair
  xn = np.arange(16, dtype=np.float32)
  x = Tensor(xn).realize()
  for v, w in [(2.5, 2.5), (2.5, 4.5), (4.5, 4.5), (0.5, 8.5)]:
    np.testing.assert_allclose((x * v + w).numpy(), xn * np.float32(v) + np.float32(w))

def test_the_walk_numbers_literals_instead_of_keying_their_values():
  x = Tensor(np.ones(8, np.float32)).realize()
  w1, w2 = R._walk([(x * 2.5).uop], True), R._walk([(x * 3.5).uop], True)
  assert w1 is not None and w2 is not None
  assert w1[0] == w2[0] and [c.arg for c in w1[4]] == [2.5] and [c.arg for c in w2[4]] == [3.5]
  # literals kept as they are (codegen keeps them in kernels too): 0, 1, -1, inf, nan are structure
  for keep in (1.0, float("inf")):
    w = R._walk([(x * keep).uop], True)
    assert w is not None and w[4] == ()

@pytest.mark.parametrize("v", [2, 3, -7, 0, 1, True, False, 2.5, -0.5, 1e30, float("inf"), float("nan"), -0.0])
def test_scalar_kinds_and_promotion_match_numpy(v):
  fn = np.linspace(-2, 2, 12, dtype=np.float32)
  inn = np.arange(-6, 6, dtype=np.int32)
  f, i = Tensor(fn).realize(), Tensor(inn).realize()
  with np.errstate(all="ignore"):
    # a Python scalar is weak: it takes the tensor's dtype, and a float scalar makes an int tensor's result float32
    exp_f = fn * np.float32(v)
    exp_i = inn * (np.float32(v) if isinstance(v, float) else np.int32(v))
    np.testing.assert_allclose((f * v).numpy(), exp_f, rtol=1e-6)
    got_i = (i * v)
    assert got_i.dtype == (dtypes.float32 if isinstance(v, float) else dtypes.int32)
    np.testing.assert_allclose(got_i.numpy(), exp_i, rtol=1e-6)
    np.testing.assert_array_equal((f < v).numpy(), fn < np.float32(v))
    np.testing.assert_allclose((f + v).numpy(), fn + np.float32(v), rtol=1e-6)

def test_a_value_that_changes_the_dtype_is_a_new_schedule(schedules_made):
  inn = np.arange(10, dtype=np.int32)
  i = Tensor(inn).realize()
  np.testing.assert_array_equal((i * 3).numpy(), inn * 3)
  r = i * 2.5
  assert r.dtype == dtypes.float32
  np.testing.assert_allclose(r.numpy(), inn * np.float32(2.5))
  np.testing.assert_allclose((i * 4.5).numpy(), inn * np.float32(4.5))
  assert schedules_made[0] == 2   # int * int, then int -> float * float (both float values one schedule)

def test_half_tensors_keep_their_literals():
  hn = np.linspace(-1, 1, 32).astype(np.float16)
  h = Tensor(hn).realize()
  for v in (2.5, 0.125, 3.3):
    out = (h * v)
    assert out.dtype == dtypes.float16
    np.testing.assert_allclose(out.numpy().astype(np.float32), (hn * np.float16(v)).astype(np.float32), rtol=1e-3)

def test_many_literals_in_one_graph_are_values_of_the_key():
  # more literals than a kernel takes as arguments: the schedule is keyed with their values, and results stay right
  xn = np.linspace(0.1, 1, 20, dtype=np.float32)
  x = Tensor(xn).realize()
  for base in (0.5, 0.75):
    coef = [base + k * 0.1 for k in range(11)]
    out, exp = x * 0, np.zeros_like(xn)
    for c in coef: out, exp = out * x + c, exp * xn + np.float32(c)
    w = R._walk([out.uop], True)
    assert w is not None and w[4] == ()
    np.testing.assert_allclose(out.numpy(), exp, rtol=1e-5)

def test_assign_with_new_scalars_in_a_loop(schedules_made):
  wn = np.linspace(-1, 1, 32, dtype=np.float32)
  w = Tensor(wn.copy()).realize()
  expect = wn.copy()
  for k in range(12):
    s = 0.5 + k * 0.37
    w.assign(w * s + 0.3 * k if k else w * s)
    w.realize()
    expect = expect * np.float32(s) + (np.float32(0.3 * k) if k else np.float32(0))
    np.testing.assert_allclose(w.numpy(), expect, rtol=1e-5)
  assert schedules_made[0] == 2   # w * s (k = 0), then w * s + t for every later k
  # in-place operators: a new literal every step
  x = Tensor(np.zeros(8, np.float32)).realize()
  total = np.zeros(8, np.float32)
  for k in range(10):
    x += 0.1 * (k + 1)
    total += np.float32(0.1 * (k + 1))
  np.testing.assert_allclose(x.numpy(), total, rtol=1e-6)

def test_a_reduction_and_a_constant_only_subgraph_with_scalars():
  xn = np.arange(24, dtype=np.float32).reshape(4, 6)
  x = Tensor(xn).realize()
  for v in (2.5, 3.25):
    np.testing.assert_allclose((x * v).sum(axis=1).numpy(), (xn * np.float32(v)).sum(axis=1), rtol=1e-6)
    # a constant-only realize point next to a buffer: its device still comes from the literal's
    np.testing.assert_allclose((Tensor.full((4, 6), v).contiguous() + x).numpy(), xn + np.float32(v))
    np.testing.assert_allclose(Tensor.full((3,), v).numpy(), np.full(3, v, np.float32))

def test_jit_capture_keeps_its_scalars():
  # a capture's scalars are part of the captured kernels: the replay gives the captured value, not a stale variable
  @Jit
  def f(a: Tensor) -> Tensor: return (a * 2.5 + 0.5).realize()
  for k in range(4):
    an = np.full(8, k, np.float32)
    np.testing.assert_allclose(f(Tensor(an).realize()).numpy(), an * 2.5 + 0.5)

def test_the_one_level_walk_of_scalar_ops_matches_the_general_walk(monkeypatch):
  x = Tensor(np.arange(6, dtype=np.float32)).realize()
  y = Tensor(np.ones(6, np.float32)).realize()
  graphs = [x * 2.5, 2.5 * x, x + 0.3, x.maximum(4.5), (x > 2).where(2.5, x), (x > 2).where(2.5, 3.5), x * y, x.reshape(2, 3) * 1.5]
  for t in graphs:
    fast = R._walk([t.uop], True)
    with monkeypatch.context() as m:
      m.setattr(R, "_walk_one", lambda u: R._NO_FAST)
      slow = R._walk([t.uop], True)
    assert fast == slow
  n = sum(len(w[4]) for w in [R._walk([t.uop], True) for t in graphs] if w is not None)
  assert n == 10   # 2.5; 2.5; 0.3; 4.5; 2.0 (x > 2 on floats) and 2.5; 2.0, 2.5 and 3.5; none; 1.5
  for t, want in zip(graphs, [np.arange(6) * 2.5, np.arange(6) * 2.5, np.arange(6) + np.float32(0.3), np.maximum(np.arange(6), 4.5)]):
    np.testing.assert_allclose(t.numpy(), want.astype(np.float32), rtol=1e-6)

def test_one_scalar_in_several_kernels_gets_each_new_value(schedules_made):
  # the literal's variable is patched into both kernels' arguments on every run (HCQ), not only the first kernel's
  an = np.arange(12, dtype=np.float32)
  a = Tensor(an).realize()
  for v in (2.5, 3.5, 4.25, 3.5):
    x, y = (a + v).reshape(3, 4), (a * v).reshape(4, 3)
    Tensor.realize(x, y)
    np.testing.assert_allclose(x.numpy(), (an + np.float32(v)).reshape(3, 4))
    np.testing.assert_allclose(y.numpy(), (an * np.float32(v)).reshape(4, 3))
  assert schedules_made[0] == 1

def test_scalars_across_devices_and_with_symbolic_shapes(schedules_made):
  xn = np.arange(12, dtype=np.float32)
  x = Tensor(xn).realize()
  for v in (2.5, 3.5, 0.75):
    # a copy to a second device, then the literal on that device; and the literal before the copy
    np.testing.assert_allclose((x.to("CPU:1") * v + 0.5).numpy(), xn * np.float32(v) + np.float32(0.5))
    np.testing.assert_allclose(((x * v).to("CPU:1") + 1.5).numpy(), xn * np.float32(v) + np.float32(1.5))
  assert schedules_made[0] == 2
  # a bound shape variable next to the literals' variables: each call binds both
  tn = np.arange(40, dtype=np.float32).reshape(4, 10)
  t = Tensor(tn).realize()
  for n, v in [(3, 2.5), (5, 3.5), (7, 0.25)]:
    s = t.shrink(((0, 4), (0, Variable("i", 1, 10).bind(n))))
    np.testing.assert_allclose((s * v).sum(axis=1).numpy(), (tn[:, :n] * np.float32(v)).sum(axis=1), rtol=1e-6)

def test_kept_literals_schedule_per_value_and_lifted_ones_share(schedules_made):
  # keeping_literals (a Jit's first call) makes each value structure; outside it one schedule serves every value
  from core.engine.capture import keeping_literals
  xn = np.linspace(-2, 2, 32, dtype=np.float32)
  x = Tensor(xn).realize()
  with keeping_literals():
    for v in (2.5, 3.5): np.testing.assert_allclose((x * v).numpy(), xn * np.float32(v))
  assert schedules_made[0] == 2
  for v in (4.5, 5.5, 2.5): np.testing.assert_allclose((x * v).numpy(), xn * np.float32(v))
  assert schedules_made[0] == 3
