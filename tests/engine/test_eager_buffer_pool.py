"""The eager plan's buffer pool: a repeat of an op takes a Buffer an earlier result left behind only once nothing holds it."""
import gc, weakref
import numpy as np
from core import Tensor, GlobalCounters
from core.engine import realize as R

def _buffer(t: Tensor):
  return R.realized_buffer(t.uop)[0]

def _warm(a: Tensor) -> None:
  for _ in range(3): (a + 1).realize()   # compiled, then the eager plan built (on the second use)

def test_a_dead_results_buffer_is_handed_out_again():
  a = Tensor(np.arange(64, dtype=np.float32)).realize()
  _warm(a)
  r = (a + 1).realize()
  buf = weakref.ref(_buffer(r))   # a strong reference here would keep it out of the pool
  del r
  r2 = (a + 1).realize()
  assert buf() is not None and _buffer(r2) is buf()
  np.testing.assert_array_equal(r2.numpy(), np.arange(64) + 1)

def test_kept_results_keep_their_values_over_repeats():
  a = Tensor(np.arange(64, dtype=np.float32)).realize()
  _warm(a)
  kept = {}
  y = None
  for i in range(12):
    y = (a + i).realize()   # the previous y is alive while this one runs
    if i % 3 == 0: kept[i] = y
  for i, t in kept.items(): np.testing.assert_array_equal(t.numpy(), np.arange(64) + i)
  np.testing.assert_array_equal(y.numpy(), np.arange(64) + 11)
  live = [*kept.values(), y]
  assert len({id(_buffer(t)) for t in live}) == len(live)

def test_a_numpy_view_keeps_the_memory_out_of_the_pool():
  a = Tensor(np.arange(64, dtype=np.float32)).realize()
  _warm(a)
  arr = (a + 1).realize().numpy()   # on host memory a view that holds the Buffer, the tensor itself gone
  for i in range(5): (a + 10 + i).realize()
  np.testing.assert_array_equal(arr, np.arange(64) + 1)

def test_intermediates_and_new_inputs_over_repeats():
  rng = np.random.default_rng(1)
  xs = [rng.standard_normal((8, 16)).astype(np.float32) for _ in range(5)]
  outs = []
  for x in xs:
    t = Tensor(x).realize()
    outs.append(((t + 1).sum(axis=1).reshape(8, 1) * t).realize())   # a reduce feeding an elementwise kernel
  for x, o in zip(xs, outs): np.testing.assert_allclose(o.numpy(), (x + 1).sum(axis=1, keepdims=True) * x, rtol=1e-5, atol=1e-5)

def test_pooled_memory_is_bounded_and_freed_with_the_plan():
  dev = Tensor([0.0]).device
  a = Tensor(np.arange(64, dtype=np.float32)).realize()
  _warm(a)
  gc.collect()
  before = GlobalCounters.mem_used[dev]
  for i in range(30): (a * i).realize()
  # at most POOL_DEPTH idle buffers of 256 bytes for each of the two plans (a + 1, a * i)
  assert GlobalCounters.mem_used[dev] <= before + 2 * R.POOL_DEPTH * 256
  R.schedules.clear()   # the plans go, and their pools with them
  gc.collect()
  assert GlobalCounters.mem_used[dev] < before

def test_results_over_the_shared_bound_are_freed_when_they_die(monkeypatch):
  monkeypatch.setattr(R, "SHARED_POOL_BYTES", 64 << 10)   # two 64 KiB results would pass it: none is pooled
  R._shared_clear()   # nor is one an earlier test's run left there under the real bound (it would be handed to r)
  dev = Tensor([0.0]).device
  a = Tensor.ones(1 << 14, device=dev).realize()
  for _ in range(3): (a + 1).realize()
  gc.collect()
  before = GlobalCounters.mem_used[dev]
  r = (a + 1).realize()
  assert GlobalCounters.mem_used[dev] == before + (4 << 14)
  del r
  assert GlobalCounters.mem_used[dev] == before

def test_a_dead_big_results_buffer_is_handed_out_again():
  # over POOL_BYTES: the pool every plan shares
  a = Tensor(np.arange(1 << 14, dtype=np.float32)).realize()
  _warm(a)
  r = (a + 1).realize()
  buf = weakref.ref(_buffer(r))
  del r
  r2 = (a + 1).realize()
  assert buf() is not None and _buffer(r2) is buf()
  np.testing.assert_array_equal(r2.numpy(), np.arange(1 << 14) + 1)

def test_kept_big_results_keep_their_values_and_memory():
  a = Tensor(np.arange(1 << 14, dtype=np.float32)).realize()
  x = Tensor(np.arange(1 << 14, dtype=np.float32).reshape(128, 128)).realize()
  _warm(a)
  kept, y = {}, None
  for i in range(12):
    y = (a + i).realize()
    s = x.softmax(-1).realize() if i % 4 == 0 else None
    if i % 3 == 0: kept[i] = (y, s)
  for i, (t, s) in kept.items():
    np.testing.assert_array_equal(t.numpy(), np.arange(1 << 14) + i)
    if s is not None:
      e = np.exp(x.numpy() - x.numpy().max(-1, keepdims=True))
      np.testing.assert_allclose(s.numpy(), e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)
  live = [t for pair in kept.values() for t in pair if t is not None] + [y]
  assert len({id(_buffer(t)) for t in live}) == len(live)

def test_the_shared_pool_keeps_at_most_its_bound(monkeypatch):
  monkeypatch.setattr(R, "SHARED_POOL_BYTES", 256 << 10)
  R._shared_clear()
  dev = Tensor([0.0]).device
  gc.collect()
  before = GlobalCounters.mem_used[dev]
  ins = [Tensor(np.ones((1 << 14) + 64 * i, dtype=np.float32)).realize() for i in range(6)]   # six sizes of ~64 KiB: six keys
  held = sum(t.nbytes() for t in ins)
  for _ in range(3):
    for t in ins:
      for _ in range(3): (t + 1).realize()
      assert R._shared_bytes <= R.SHARED_POOL_BYTES
      assert R._shared_bytes == sum(b.nbytes for entries in R._shared.values() for b, *_ in entries)
  gc.collect()
  # the results are dead: what stays is the inputs and at most the bound (and the small plans' pools: none here)
  assert GlobalCounters.mem_used[dev] - before - held <= R.SHARED_POOL_BYTES
  assert R._shared_bytes > 0
  R._shared_clear()
  gc.collect()
  assert GlobalCounters.mem_used[dev] - before - held <= 0

def test_a_dead_results_node_is_handed_out_again_with_its_buffer():
  # the BUFFER node over a pooled Buffer is kept with it: a repeat makes no node, no fact, no Buffer
  # (72 floats, a size no other test of tests/engine uses, so the plan and its pool are this test's alone: after
  # test_eager_op_cache.py's 64-float a + scalar entries the kept results' nodes were not all handed out again)
  a = Tensor(np.arange(72, dtype=np.float32)).realize()
  for _ in range(3): (a + 0.5).realize()   # float scalars are the plan's inputs: a + 0.5 and a + 2.5 run one plan
  kept = [(a + 0.5).realize() for _ in range(R.POOL_DEPTH)]   # every pool entry in use
  nodes = [weakref.ref(k.uop) for k in kept]
  assert all(k.uop.op is R.Ops.BUFFER for k in kept)
  del kept
  again = [(a + (2.5 + i)).realize() for i in range(R.POOL_DEPTH)]
  assert {id(t.uop) for t in again} == {id(n()) for n in nodes}
  for i, t in enumerate(again): np.testing.assert_array_equal(t.numpy(), np.arange(72) + 2.5 + i)

def test_a_view_or_graph_over_a_dead_result_keeps_its_node_and_memory():
  a = Tensor(np.arange(64, dtype=np.float32)).realize()
  for _ in range(3): (a + 0.5).realize()
  r = (a + 1.5).realize()
  view = r.reshape(8, 8)      # a RESHAPE node over the result's BUFFER node: the tensor r gone, the view still reads it
  r2 = (a + 2.5).realize()
  lazy = r2 * 1.0             # an unrealized graph over the second result
  del r, r2
  outs = [(a + (10.5 + i)).realize() for i in range(4)]
  np.testing.assert_array_equal(view.numpy(), (np.arange(64) + 1.5).reshape(8, 8))
  np.testing.assert_array_equal(lazy.numpy(), np.arange(64) + 2.5)
  for i, o in enumerate(outs): np.testing.assert_array_equal(o.numpy(), np.arange(64) + 10.5 + i)

def test_a_failed_allocation_lets_the_shared_pool_go():
  # dead results kept for reuse go back to their allocator before an allocation gives up (allocator.oom_hooks)
  from core.device.allocator import BufferSpec, LRUAllocator
  class OnceFull(LRUAllocator[bytearray]):
    def __init__(self): super().__init__("TEST"); self.failed = False
    def _alloc(self, size: int, options: BufferSpec) -> bytearray:
      if not self.failed:
        self.failed = True
        raise MemoryError("full")
      return bytearray(size)
    def _free(self, opaque: bytearray, options: BufferSpec) -> None: pass
  R._shared_clear()
  a = Tensor(np.ones(1 << 14, dtype=np.float32)).realize()   # 64 KiB: over POOL_BYTES, so its results go to the shared pool
  for _ in range(3): (a + 1).realize()
  assert R._shared_bytes > 0
  pooled = [weakref.ref(b) for entries in R._shared.values() for b, *_ in entries]
  assert len(OnceFull().alloc(16)) == 16   # failed once, then the hooks ran and the retry succeeded
  assert R._shared_bytes == 0 and not R._shared
  gc.collect()
  assert all(ref() is None for ref in pooled)   # the pool held the only references: the Buffers were freed
  np.testing.assert_array_equal((a + 1).realize().numpy(), np.full(1 << 14, 2, dtype=np.float32))

def _sum_warm(*ts: Tensor) -> None:
  for t in ts:
    for _ in range(3): t.sum().realize()

def test_a_dead_sums_result_node_is_handed_out_again_with_its_buffer():
  # a sum's result is a view (a reshape to ()) of its buffer: the pool keeps that node too, so a repeat makes none
  rng = np.random.default_rng(2)
  xs = [rng.random(1000, dtype=np.float32) for _ in range(3)]
  a, b, c = (Tensor(x).realize() for x in xs)   # the same plan over other inputs
  _sum_warm(a, b, c)
  r = a.sum().realize()
  node, buf = weakref.ref(r.uop), weakref.ref(_buffer(r))
  del r
  gc.collect()
  r2 = b.sum().realize()
  assert node() is not None and r2.uop is node() and _buffer(r2) is buf()
  np.testing.assert_allclose(r2.numpy(), xs[1].astype(np.float64).sum(), rtol=1e-6)
  # held (r2), or only through a view of its buffer (v): never handed out while anything reads it
  v = r2.reshape(1)
  r3 = c.sum().realize()
  assert r3.uop is not r2.uop and _buffer(r3) is not _buffer(r2)
  del r2
  gc.collect()
  r4 = a.sum().realize()
  assert _buffer(r4) is not _buffer(v)
  for t, x in ((v, xs[1]), (r3, xs[2]), (r4, xs[0])): np.testing.assert_allclose(t.numpy(), x.astype(np.float64).sum(), rtol=1e-6)

def test_a_dead_64_mib_result_is_handed_out_again():
  # the bench's eager a * b + 1 on 16M floats: its 64 MiB result is pooled (SHARED_POOL_BYTES), so a repeat allocates and
  # frees no Buffer
  n = 1 << 24
  a, b = Tensor(np.full(n, 2, dtype=np.float32)).realize(), Tensor(np.full(n, 3, dtype=np.float32)).realize()
  R._shared_clear()
  for _ in range(3): (a * b + 1).realize()
  r = (a * b + 1).realize()
  buf = weakref.ref(_buffer(r))
  del r
  gc.collect()
  r2 = (a * b + 1).realize()
  assert _buffer(r2) is buf()
  np.testing.assert_array_equal(r2.numpy()[::1 << 16], np.full(n >> 16, 7, dtype=np.float32))
  del r2
  R._shared_clear()

def test_a_dead_big_results_view_node_is_handed_out_again_with_its_buffer():
  # over POOL_BYTES a result that is a view of its buffer (a @ b's 2-D reshape) is kept in the shared pool with its node too:
  # a repeat makes no node (after a big kernel flushed the caches a new view node was ~12 us of a 1024^3 a @ b's Python)
  rng = np.random.default_rng(3)
  x, y = rng.standard_normal((40, 48)).astype(np.float32), rng.standard_normal((48, 56)).astype(np.float32)   # 8960 bytes out
  a, b = Tensor(x).realize(), Tensor(y).realize()
  for _ in range(3): (a @ b).realize()
  r = (a @ b).realize()
  assert r.uop.op is R.Ops.RESHAPE and _buffer(r).nbytes > R.POOL_BYTES
  node, buf = weakref.ref(r.uop), weakref.ref(_buffer(r))
  del r
  gc.collect()
  r2 = (a @ b).realize()
  assert node() is not None and r2.uop is node() and _buffer(r2) is buf()
  np.testing.assert_allclose(r2.numpy(), x @ y, rtol=1e-4, atol=1e-4)
  assert R._shared_bytes == sum(p.nbytes for entries in R._shared.values() for p, *_ in entries)
  # held, or only through a view of its buffer: never handed out while anything reads it
  v = r2.reshape(-1)
  r3 = (a @ b).realize()
  assert r3.uop is not r2.uop and _buffer(r3) is not _buffer(r2)
  del r2
  gc.collect()
  r4 = (a @ b).realize()
  assert _buffer(r4) is not _buffer(v)
  np.testing.assert_allclose(v.numpy(), (x @ y).reshape(-1), rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(r4.numpy(), x @ y, rtol=1e-4, atol=1e-4)
