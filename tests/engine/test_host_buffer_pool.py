"""Tensor(ndarray)'s buffer pool (core/engine/realize.py from_host): a new small array of an earlier one's shape takes the Buffer
and node the earlier tensor left behind, only once nothing holds them."""
import gc, threading, weakref
import numpy as np
from core import Tensor, Jit
from core.engine import realize as R

def _buffer(t: Tensor):
  return R.realized_buffer(t.uop)[0]

def _arr(i: int, shape: tuple[int, ...] = (2, 3, 8)) -> np.ndarray:
  return np.arange(np.prod(shape), dtype=np.float32).reshape(shape) + i

def test_a_dead_tensors_buffer_and_node_are_handed_out_again():
  for shape in [(2, 3, 8), (48,)]:   # a RESHAPE over the buffer, and the bare BUFFER node of a 1-d array
    t = Tensor(_arr(0, shape))
    buf, node = weakref.ref(_buffer(t)), weakref.ref(t.uop)   # strong references here would keep them out of the pool
    del t
    t2 = Tensor(_arr(5, shape))
    assert buf() is not None and _buffer(t2) is buf() and t2.uop is node()
    np.testing.assert_array_equal(t2.numpy(), _arr(5, shape))

def test_live_tensors_keep_their_own_buffers():
  live = [Tensor(_arr(i)) for i in range(6)]
  assert len({id(_buffer(t)) for t in live}) == len(live)
  for i, t in enumerate(live): np.testing.assert_array_equal(t.numpy(), _arr(i))

def test_what_holds_a_tensors_buffer_keeps_it_out_of_the_pool():
  t = Tensor(_arr(0))
  view = t.numpy()            # a zero-copy view on host memory holds the Buffer
  lazy = t * 2                # a graph over its node
  del t
  for i in range(1, 6): np.testing.assert_array_equal(Tensor(_arr(i)).numpy(), _arr(i))
  np.testing.assert_array_equal(view, _arr(0))
  np.testing.assert_array_equal(lazy.numpy(), _arr(0) * 2)

def test_an_assigned_tensor_reused_reads_its_new_values():
  t = Tensor(_arr(0))
  t.assign(t + 100).realize()
  np.testing.assert_array_equal(t.numpy(), _arr(0) + 100)
  del t
  gc.collect()
  t2 = Tensor(_arr(7))
  np.testing.assert_array_equal(t2.numpy(), _arr(7))
  np.testing.assert_array_equal((t2 + 1).numpy(), _arr(7) + 1)

def test_jit_steps_on_fresh_input_tensors():
  @Jit
  def step(x: Tensor) -> Tensor: return (x * 2 + 1).realize()
  # each call's output copied out before the next (a Jit's replay rewrites its outputs): each call read its own input
  vals = [step(Tensor(_arr(i))).numpy() for i in range(8)]
  for i, v in enumerate(vals): np.testing.assert_allclose(v, _arr(i) * 2 + 1)

def test_threads_making_tensors_get_distinct_buffers():
  errors: list[str] = []
  def work(k: int) -> None:
    for i in range(200):
      a = _arr(1000 * k + i)
      t = Tensor(a)
      u = Tensor(a + 1)   # two alive at once per thread
      if not (np.array_equal(t.numpy(), a) and np.array_equal(u.numpy(), a + 1)): errors.append(f"thread {k} step {i}")
  ths = [threading.Thread(target=work, args=(k,)) for k in range(4)]
  for th in ths: th.start()
  for th in ths: th.join()
  assert not errors, errors[:5]
