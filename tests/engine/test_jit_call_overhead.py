"""The Jit's per-call shortcuts keep its semantics (issue 24.5: a replay's cost beside its kernels): returned views of captured
buffers are handed back without a graph walk, views of this call's inputs still follow the inputs, `.numpy()` of a replay's
output is the caller's own copy, inputs that are buffers already are bound without a realize (the others as before), and
threads (each with its own Jit, or one shared) still get their own answers."""
import threading
import numpy as np
import pytest
from core import Tensor, Jit
from core.tensor.jit import JitError

def test_returned_views_of_captured_buffers_and_of_inputs():
  @Jit
  def f(x): return (x * 2 + 1).reshape(2, 4), x.reshape(4, 2), (x + 3)[1:5]
  rng = np.random.default_rng(1)
  for _ in range(5):
    x = rng.standard_normal(8).astype(np.float32)
    a, b, c = f(Tensor(x))
    np.testing.assert_allclose(a.numpy(), (x * 2 + 1).reshape(2, 4), rtol=1e-6)
    np.testing.assert_array_equal(b.numpy(), x.reshape(4, 2))   # a view of the input: this call's input, not the captured one
    np.testing.assert_allclose(c.numpy(), (x + 3)[1:5], rtol=1e-6)
  assert f.cnt == 2 and f.ret_rebuild == [False, True, False]

def test_numpy_of_a_replay_output_is_the_callers_copy():
  @Jit
  def f(x): return (x * 2).reshape(2, 2)
  outs = []
  for i in range(4):
    t = f(Tensor(np.full(4, i, dtype=np.float32)))
    a = t.numpy()
    np.testing.assert_array_equal(a, np.full((2, 2), 2 * i, dtype=np.float32))
    if a.flags.writeable:   # replay outputs are rewritten by the next replay, so they come back as copies, not views
      a[0, 0] = -7
      assert t.numpy()[0, 0] == 2 * i
    outs.append(a)
  # earlier results did not change under later replays
  for i, a in enumerate(outs): assert a[1, 1] == 2 * i
  assert outs[-1].flags.writeable and outs[-1].flags.c_contiguous

def test_threads_with_own_and_shared_jits_get_their_own_results():
  def g(x): return (x * 3 - 1).reshape(4, 4)
  shared, reading = Jit(g), threading.Lock()
  errors: list[str] = []
  def work(seed: int) -> None:
    own, rng = Jit(g), np.random.default_rng(seed)
    for _ in range(20):
      x = rng.standard_normal(16).astype(np.float32)
      want = (x * 3 - 1).reshape(4, 4)
      if not np.allclose(own(Tensor(x)).numpy(), want, rtol=1e-5, atol=1e-6): errors.append(f"thread {seed}: own Jit wrong")
      # a Jit's outputs are its own buffers, rewritten by its next call from any thread: a shared one is read before the next
      with reading:
        if not np.allclose(shared(Tensor(x)).numpy(), want, rtol=1e-5, atol=1e-6): errors.append(f"thread {seed}: shared Jit wrong")
  threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
  for t in threads: t.start()
  for t in threads: t.join()
  assert not errors, errors[:3]

def test_replay_binds_buffer_inputs_directly_and_the_rest_through_the_general_path():
  @Jit
  def f(x, y): return (x * 2 + y).reshape(2, 3)
  rng = np.random.default_rng(2)
  y = rng.standard_normal(6).astype(np.float32)
  for _ in range(3): f(Tensor(rng.standard_normal(6).astype(np.float32)), Tensor(y))
  # Tensor(ndarray) is a buffer already: bound without a realize; a lazy graph, a keyword input or a changed dtype is not
  xs = [rng.standard_normal(6).astype(np.float32) for _ in range(4)]
  assert f._fast_inputs((Tensor(xs[0]), Tensor(y))) is not None
  assert f._fast_inputs((Tensor(xs[0]) + 1, Tensor(y))) is None and f._fast_inputs((Tensor(xs[0]),)) is None
  assert f._fast_inputs((Tensor(xs[0].astype(np.float64)), Tensor(y))) is None
  for i, x in enumerate(xs):
    got = [f(Tensor(x), Tensor(y)).numpy(), f(Tensor(x[::-1].copy())[::-1], Tensor(y)).numpy(), f(x=Tensor(x), y=Tensor(y)).numpy(),
           f(Tensor(x * 0 + i), Tensor(y)).numpy()]
    for g, want in zip(got, [x * 2 + y] * 3 + [np.full(6, 2 * i, np.float32) + y]):
      np.testing.assert_allclose(g, want.reshape(2, 3), rtol=1e-6)
  with pytest.raises(JitError, match="inputs changed"): f(Tensor(xs[0].astype(np.float64)), Tensor(y))
  with pytest.raises(JitError, match="inputs changed"): f(Tensor(xs[0].reshape(2, 3)), Tensor(y))

def test_numpy_array_arguments_are_inputs_not_constants():
  # an array argument was baked into the capture as it was on the capturing call: every replay returned that call's result
  @Jit
  def f(a, b): return (Tensor(a) * 2 + b).reshape(2, 3)
  rng = np.random.default_rng(3)
  for _ in range(6):
    a, b = rng.standard_normal(6).astype(np.float32), rng.standard_normal(6).astype(np.float32)
    np.testing.assert_allclose(f(a, Tensor(b)).numpy(), (a * 2 + b).reshape(2, 3), rtol=1e-6)
  assert f.cnt == 2 and list(f.staging) == [0]   # the replays copied the array into the Jit's own buffer of input 0
  # Tensors and arrays mix from call to call; an array the staging path does not take (strided, another dtype) goes the general way
  a, b = rng.standard_normal(6).astype(np.float32), rng.standard_normal(6).astype(np.float32)
  np.testing.assert_allclose(f(Tensor(a), Tensor(b)).numpy(), (a * 2 + b).reshape(2, 3), rtol=1e-6)
  s = rng.standard_normal(12).astype(np.float32)[::2]
  np.testing.assert_allclose(f(s, Tensor(b)).numpy(), (s * 2 + b).reshape(2, 3), rtol=1e-6)
  with pytest.raises(JitError, match="inputs changed"): f(a.astype(np.float64), Tensor(b))

def test_array_inputs_of_a_jit_returning_input_views_keep_earlier_results():
  # a returned view of an input follows that call's input: a staging buffer rewritten by the next call would change it
  @Jit
  def f(a): return Tensor(a).reshape(3, 2), (Tensor(a) + 1).reshape(2, 3)
  got = [f(np.full(6, i, dtype=np.float32))[0].numpy() for i in range(5)]   # views of the input's memory where they can be
  for i, a in enumerate(got): np.testing.assert_array_equal(a, np.full((3, 2), i, np.float32))
  assert f.cnt == 2 and not f.staging

def test_hcq_replay_repatches_after_another_run_of_its_submission():
  # two Jits of the same kernels share one cached submission: each replay must patch its own buffers back in, not only its inputs
  def g(a, b): return (a + b).reshape(2, 2)
  f1, f2 = Jit(g), Jit(g)
  rng = np.random.default_rng(4)
  for _ in range(5):
    xs = [rng.standard_normal(4).astype(np.float32) for _ in range(4)]
    r1, r2 = f1(Tensor(xs[0]), Tensor(xs[1])), f2(Tensor(xs[2]), Tensor(xs[3]))
    np.testing.assert_allclose(r1.numpy(), (xs[0] + xs[1]).reshape(2, 2), rtol=1e-6)
    np.testing.assert_allclose(r2.numpy(), (xs[2] + xs[3]).reshape(2, 2), rtol=1e-6)
    # back to back on one Jit: the fast path (only the inputs looked at)
    for _ in range(2): np.testing.assert_allclose(f1(xs[1], xs[2]).numpy(), (xs[1] + xs[2]).reshape(2, 2), rtol=1e-6)

def test_array_inputs_of_other_layouts_and_dtypes():
  # the staging copy takes C-ordered arrays of the captured shape (a bool one too); a Fortran-ordered array of the same shape
  # and an empty one go the general way (an empty array's copy raised TypeError: no byte view of a shape with a 0): each
  # replay's result is that call's
  @Jit
  def f(a, m, e): return Tensor(m).where(Tensor(a) * 2, Tensor(a)).contiguous(), (Tensor(e) + 1).contiguous()
  rng = np.random.default_rng(5)
  for k in range(6):
    a = rng.standard_normal((3, 4)).astype(np.float32)
    a = np.asfortranarray(a) if k == 5 else a
    m = rng.integers(0, 2, (3, 4)).astype(np.bool_)
    got, empty = f(a, m, np.zeros((0, 2), np.float32))
    np.testing.assert_array_equal(got.numpy(), np.where(m, a * 2, a))
    assert empty.numpy().shape == (0, 2)
  assert f.cnt == 2 and sorted(f.staging) == [0, 1]
