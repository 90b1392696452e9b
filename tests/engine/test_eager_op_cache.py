"""The eager op cache (core.engine.realize.eager_ops): a repeated one-op graph over buffers and scalars runs its eager plan
straight from its node; anything that changes what the plan computes (shape, dtype, device, a view, a scalar, two sources
being one buffer) must miss it and still give the right answer."""
import numpy as np
from core import Tensor
from core.engine import realize as R

def _t(a: np.ndarray, device: str | None = None) -> Tensor: return Tensor(a, device=device).realize()

def _counts() -> tuple[int, int]: return R.eager_ops.hits, R.eager_ops.misses

def _hits_of(fn, n: int = 4) -> tuple[int, Tensor]:
  """How many of n calls of fn().realize() hit the cache, after three warm-up calls (compile, eager plan, cache entry)."""
  for _ in range(3): fn().realize()
  h0, _ = _counts()
  for _ in range(n): out = fn().realize()
  return _counts()[0] - h0, out

def test_a_repeated_op_hits_with_exact_results():
  a = np.arange(64, dtype=np.float32)
  x = _t(a)
  hits, out = _hits_of(lambda: x + 1, n=5)
  assert hits == 5
  np.testing.assert_array_equal(out.numpy(), a + 1)
  # new values in the same buffer shape are read each call
  y = _t(a * 3)
  h0 = _counts()[0]
  np.testing.assert_array_equal((y + 1).realize().numpy(), a * 3 + 1)
  assert _counts()[0] == h0 + 1

def test_a_changed_shape_or_dtype_misses():
  x64 = _t(np.arange(64, dtype=np.float32))
  _hits_of(lambda: x64 + 1)
  h0, m0 = _counts()
  x32 = _t(np.arange(32, dtype=np.float32))
  np.testing.assert_array_equal((x32 + 1).realize().numpy(), np.arange(32) + 1)
  xi = _t(np.arange(64, dtype=np.int32))
  r = (xi + 1).realize()
  assert r.dtype.name == "int32"
  np.testing.assert_array_equal(r.numpy(), np.arange(64) + 1)
  assert _counts() == (h0, m0 + 2)

def test_a_changed_input_dtype_misses_under_the_same_op():
  a = np.arange(-32, 32)
  x32, x16 = _t(a.astype(np.int32)), _t(a.astype(np.int16))
  hits, out = _hits_of(lambda: x32.cast("float32"))
  assert hits == 4
  np.testing.assert_array_equal(out.numpy(), a.astype(np.float32))
  h0, m0 = _counts()
  np.testing.assert_array_equal(x16.cast("float32").realize().numpy(), a.astype(np.float32))
  assert _counts() == (h0, m0 + 1)

def test_a_changed_device_misses():
  a = np.arange(16, dtype=np.float32)
  x = _t(a)
  _hits_of(lambda: -x)   # no scalar: the buffer's device alone tells the two apart
  h0, m0 = _counts()
  xp = _t(a, device="PYTHON")
  r = (-xp).realize()
  assert r.device == "PYTHON" and _counts() == (h0, m0 + 1)
  np.testing.assert_array_equal(r.numpy(), -a)
  np.testing.assert_array_equal((xp * 2).realize().numpy(), a * 2)

def test_views_and_strides_never_take_it():
  a = np.arange(64, dtype=np.float32)
  x = _t(a)
  _hits_of(lambda: x + 1)
  h0 = _counts()[0]
  for _ in range(4):
    np.testing.assert_array_equal((x[::2] + 1).realize().numpy(), a[::2] + 1)
    np.testing.assert_array_equal((x[3:40] + 1).realize().numpy(), a[3:40] + 1)
    np.testing.assert_array_equal((x.reshape(8, 8).permute(1, 0) + 1).realize().numpy(), a.reshape(8, 8).T + 1)
    np.testing.assert_array_equal((x.flip(0) + 1).realize().numpy(), a[::-1] + 1)
  assert _counts()[0] == h0

def test_tensors_of_more_dimensions_hit_per_shape():
  a = np.arange(64, dtype=np.float32)
  x88, x416 = _t(a.reshape(8, 8)), _t(a.reshape(4, 16))   # RESHAPE(BUFFER) nodes over buffers of one size
  hits, out = _hits_of(lambda: x88 + 1)
  assert hits == 4
  np.testing.assert_array_equal(out.numpy(), a.reshape(8, 8) + 1)
  h0, m0 = _counts()
  r = (x416 + 1).realize()
  assert r.shape == (4, 16) and _counts() == (h0, m0 + 1)
  np.testing.assert_array_equal(r.numpy(), a.reshape(4, 16) + 1)
  hits, out = _hits_of(lambda: x88 * x88)
  assert hits == 4
  np.testing.assert_array_equal(out.numpy(), a.reshape(8, 8) ** 2)
  _hits_of(lambda: -x88)
  h0, m0 = _counts()
  r = (-x416).realize()   # one source, no scalar: the shape in the key alone tells it from -x88
  assert r.shape == (4, 16) and _counts() == (h0, m0 + 1)
  np.testing.assert_array_equal(r.numpy(), -a.reshape(4, 16))
  y = _t(a.reshape(8, 8) * 2)
  hits, out = _hits_of(lambda: x88 - y)
  np.testing.assert_array_equal(out.numpy(), -a.reshape(8, 8))
  h0 = _counts()[0]
  np.testing.assert_array_equal((x88.permute(1, 0) + 1).realize().numpy(), a.reshape(8, 8).T + 1)
  np.testing.assert_array_equal((x88[2:5] + 1).realize().numpy(), a.reshape(8, 8)[2:5] + 1)
  assert _counts()[0] == h0

def test_one_buffer_twice_is_not_two_buffers():
  a, b = np.arange(64, dtype=np.float32), np.full(64, 100, dtype=np.float32)
  x, y = _t(a), _t(b)
  hits, out = _hits_of(lambda: x + y)
  assert hits == 4
  np.testing.assert_array_equal(out.numpy(), a + b)
  hits, out = _hits_of(lambda: x + x)
  assert hits == 4
  np.testing.assert_array_equal(out.numpy(), a + a)
  np.testing.assert_array_equal((y + x).realize().numpy(), b + a)
  np.testing.assert_array_equal((y * y).realize().numpy(), b * b)

def test_each_scalar_gets_its_own_value():
  a = np.arange(64, dtype=np.float32)
  x = _t(a)
  for _ in range(3):
    for c in (1.0, 2.5, -3.0, 1e30):
      np.testing.assert_array_equal((x + c).realize().numpy(), a + np.float32(c))
      np.testing.assert_array_equal((x * c).realize().numpy(), a * np.float32(c))
  np.testing.assert_array_equal((x - 1).realize().numpy(), a - 1)

def test_an_assign_into_the_input_is_read():
  a = np.arange(64, dtype=np.float32)
  x = _t(a.copy())
  _hits_of(lambda: x + 1)
  x.assign(Tensor(a * 5)).realize()
  h0 = _counts()[0]
  np.testing.assert_array_equal((x + 1).realize().numpy(), a * 5 + 1)
  assert _counts()[0] == h0 + 1

def test_results_are_memoized_for_graphs_built_over_them():
  a = np.arange(64, dtype=np.float32)
  x = _t(a)
  _hits_of(lambda: x + 1)
  t = x + 1
  u = t * 2
  h0 = _counts()[0]
  t.realize()
  assert _counts()[0] == h0 + 1
  assert R._memo_of(R.facts.get(u.uop.src[0])) is not None   # u's graph reads t's result now
  np.testing.assert_array_equal(u.realize().numpy(), (a + 1) * 2)

def test_no_hits_inside_a_jit_capture():
  from core import Jit
  a = np.arange(64, dtype=np.float32)
  x = _t(a)
  _hits_of(lambda: x + 1)
  @Jit
  def f(t: Tensor) -> Tensor: return (t + 1).realize()
  for i in range(4):
    h0 = _counts()[0]
    np.testing.assert_array_equal(f(_t(a + i)).numpy(), a + i + 1)
    if i < 2: assert _counts()[0] == h0   # the eager first call keeps its literals, the capture records its schedule

def test_eager_plan_call_makes_no_function_per_call():
  # a comprehension is a function made and called on every run under Python 3.11 (1.6k of x + 1's 77k instructions);
  # the eager plan's call is every cache hit's path, so it keeps to loops (its one dict comprehension builds a result over
  # placeholders, which no buffer-result plan reaches)
  import types
  assert [c.co_name for c in R.EagerPlan.__call__.__code__.co_consts if isinstance(c, types.CodeType)] in ([], ["<dictcomp>"])

def test_eager_plan_reads_each_input_buffer_on_a_hit():
  # the plan's inputs in order, each from its own buffer (x + y, y + x, x + x), results against numpy on every hit
  a, b = np.arange(64, dtype=np.float32), np.arange(64, dtype=np.float32)[::-1].copy()
  x, y = _t(a), _t(b)
  for fn, want in ((lambda: x + y, a + b), (lambda: y - x, b - a), (lambda: x * x, a * a), (lambda: y * 0.5, b * 0.5)):
    hits, out = _hits_of(fn, n=3)
    assert hits == 3
    np.testing.assert_array_equal(out.numpy(), want)
