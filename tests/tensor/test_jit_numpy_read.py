"""`.numpy()` of a Jit's output (a buffer its replays rewrite) checks the buffer, shape and dtype once per buffer and node shape,
not on every read: the read plan kept with the Buffer gives each call's values, follows the node it is read through, and reads
the buffer's current memory (a reallocated buffer's new memory)."""
import numpy as np
import core.tensor.interop as interop
from core import Jit, Tensor
from core.engine.realize import realized_buffer

def _count_plans(monkeypatch) -> list[int]:
  calls: list[int] = []
  real = interop.to_np
  def counting(dt):
    calls.append(1)
    return real(dt)
  monkeypatch.setattr(interop, "to_np", counting)
  return calls

def test_replay_reads_check_the_output_once(monkeypatch):
  @Jit
  def f(x): return (x * 2 + 1).reshape(3, 4)
  for i in range(3): f(Tensor(np.full(12, i, np.float32)))
  calls = _count_plans(monkeypatch)
  got = [f(Tensor(np.arange(12, dtype=np.float32) + i)).numpy() for i in range(6)]
  for i, a in enumerate(got):   # each read is that call's values, in the caller's own writable array
    np.testing.assert_array_equal(a, (np.arange(12, dtype=np.float32) + i).reshape(3, 4) * 2 + 1)
    assert a.flags.writeable and a.flags.c_contiguous and a.dtype == np.float32
  assert len(calls) == 1   # the first read made the plan; every read checked shape and dtype before

def test_plan_follows_the_node_and_the_memory():
  t = Tensor(np.arange(6, dtype=np.int32)).realize()
  buf, _ = realized_buffer(t.uop)
  buf.rewritten = True   # as a Jit's captured buffers are: numpy() copies them
  flat = t.numpy()
  np.testing.assert_array_equal(flat, np.arange(6, dtype=np.int32))
  # the same buffer through nodes of other shapes: each read has its node's shape
  np.testing.assert_array_equal(t.reshape(2, 3).numpy(), np.arange(6, dtype=np.int32).reshape(2, 3))
  np.testing.assert_array_equal(t.reshape(3, 2).numpy(), np.arange(6, dtype=np.int32).reshape(3, 2))
  np.testing.assert_array_equal(t.numpy(), np.arange(6, dtype=np.int32))
  flat[0] = 99   # the caller's copy, not the buffer
  assert t.numpy()[0] == 0
  # new memory under the same Buffer: read from it, not from the memory the plan was made for
  buf.deallocate()
  buf.allocate().copyin(memoryview(np.arange(10, 16, dtype=np.int32)).cast("B"))
  np.testing.assert_array_equal(t.reshape(2, 3).numpy(), np.arange(10, 16, dtype=np.int32).reshape(2, 3))

def test_outputs_of_two_jits_and_of_several_dtypes():
  @Jit
  def f(x): return (x + 1).reshape(2, 2), (x > 1).reshape(4), x.cast("int16") * 3
  @Jit
  def g(x): return (x * 10).reshape(4)
  for i in range(5):
    x = np.arange(4, dtype=np.float32) + i
    a, m, s = f(Tensor(x))
    b = g(Tensor(x))
    np.testing.assert_array_equal(a.numpy(), (x + 1).reshape(2, 2))
    np.testing.assert_array_equal(m.numpy(), x > 1)
    np.testing.assert_array_equal(s.numpy(), x.astype(np.int16) * 3)
    np.testing.assert_array_equal(b.numpy(), x * 10)
