"""The eager fast path: a repeated op runs its cached schedule with only new buffers bound, with the same results as the first."""
import numpy as np
from core import Tensor, GlobalCounters
from core.engine import realize as R

def _key(t: Tensor) -> tuple:
  w = R._walk([t.uop], True)
  assert w is not None
  return w[0]

def test_repeated_op_takes_the_fast_path_with_fresh_outputs():
  rng = np.random.default_rng(0)
  xs = [rng.standard_normal(37).astype(np.float32) for _ in range(4)]
  ts = [Tensor(x).realize() for x in xs]
  outs = [(t * 3 + 1).realize() for t in ts]
  assert isinstance(R.schedules.get(_key(ts[0] * 3 + 1)).plan, R.EagerPlan)   # built on the second call, reused after
  for x, o in zip(xs, outs): np.testing.assert_allclose(o.numpy(), x * 3 + 1, rtol=1e-6)
  # every call got its own output buffer: none of the results was overwritten by a later call
  assert len({R.contiguous_buffer(o.uop)[0] for o in outs}) == len(outs)

def test_fast_path_counts_kernels_like_the_general_path():
  a = Tensor(np.arange(16, dtype=np.float32)).realize()
  for _ in range(3): (a - 2).realize()
  GlobalCounters.reset()
  (a - 2).realize()
  assert GlobalCounters.kernel_count == 1

def test_results_over_movement_ops_and_several_roots():
  a = Tensor(np.arange(12, dtype=np.float32)).realize()
  for i in range(3):
    x, y = (a + i).reshape(3, 4), (a * i).reshape(4, 3)
    Tensor.realize(x, y)
    np.testing.assert_allclose(x.numpy(), (np.arange(12) + i).reshape(3, 4))
    np.testing.assert_allclose(y.numpy(), (np.arange(12) * i).reshape(4, 3))
  # the same graph given twice is a different schedule (two results), not the cached one-result entry
  z = a + 5
  r1, r2 = R.realize(z.uop, z.uop)
  np.testing.assert_allclose(np.frombuffer(R.to_host(r2), np.float32), np.arange(12) + 5)

def test_assign_through_the_fast_path_runs_every_time():
  a = Tensor(np.array([1, 2, 3], np.float32)).realize()
  for _ in range(4): a.assign(a * 2).realize()
  np.testing.assert_allclose(a.numpy(), [16, 32, 48])
  # a result computed before an assign is not reused after it (the buffer's version moved on)
  b = Tensor(np.array([1, 1], np.float32)).realize()
  for _ in range(3):
    c = b + 1
    c.realize()
    b.assign(b + 10).realize()
    np.testing.assert_allclose((c * 1).numpy(), b.numpy() - 9)

def test_realized_buffer_comes_back_as_it_is():
  a = Tensor(np.arange(6, dtype=np.float32)).realize()
  assert R.realize(a.uop)[0] is a.uop
  r = a.reshape(2, 3)
  assert R.realize(r.uop)[0] is r.uop
  p = a.reshape(2, 3).permute(1, 0)
  np.testing.assert_allclose(p.numpy(), np.arange(6).reshape(2, 3).T)

def test_a_realized_constant_subgraph_is_not_memoized_and_its_memory_goes_with_its_tensor():
  # a buffer-free graph (a fill) is recomputed where it is used again rather than memoized: its nodes are shared with the
  # kernel's AST, which the compile caches keep, and a memo there kept the result's memory alive after `del`
  from core.device.counters import GlobalCounters
  a = Tensor(np.arange(8, dtype=np.float32)).realize()
  x = Tensor.arange(8).cast(a.dtype) * 2
  for _ in range(3): np.testing.assert_allclose((a + x).numpy(), np.arange(8) * 3)
  keep = x.uop
  x.realize()
  assert R._walk([(a + Tensor(keep)).uop], True) is not None   # no memo to substitute: the walk's fast key still holds
  np.testing.assert_allclose((a + Tensor(keep)).numpy(), np.arange(8) * 3)
  dev = a.device
  big = (Tensor.ones(1 << 20, device=dev) + 1).realize()
  # measured from the peak, not from before: small buffers other objects drop meanwhile (a pool's eviction) would count too
  peak = GlobalCounters.mem_used[dev]
  del big
  assert GlobalCounters.mem_used[dev] <= peak - (4 << 20)

def _general_walk(monkeypatch, roots: list) -> tuple | None:
  with monkeypatch.context() as m:
    m.setattr(R, "_walk_one", lambda u: R._NO_FAST)
    return R._walk(roots, True)

def test_one_level_walk_matches_the_general_walk(monkeypatch):
  a = Tensor(np.arange(8, dtype=np.float32)).realize()
  b = Tensor(np.ones(8, dtype=np.float32)).realize()
  c = Tensor.arange(8).cast(a.dtype) * 2   # a buffer-free subgraph: marked on its first walk, a leaf after
  for _ in range(2): (a + c).realize()
  graphs = [a + 1, a + a, a * b + 0, a + b, b - a, a + c, c + a, (a + c) * 2, a.reshape(2, 4) + 1, a.where(b, a), a.cast("int32")]
  for t in graphs:
    R._walk([t.uop], True)   # the first walk marks the buffer-free subgraphs
    fast, slow = R._walk([t.uop], True), _general_walk(monkeypatch, [t.uop])
    assert fast == slow, t.uop
  assert all(R._walk([t.uop], True) is not None for t in graphs[:5])   # graphs over buffers and constants need no substitution
  # a later memo of the marked subgraph is still seen (the mark retires), and an assign is never taken as a leaf
  c.realize()
  assert R._walk([(a + Tensor(c.uop)).uop], True) == _general_walk(monkeypatch, [(a + Tensor(c.uop)).uop])

def test_one_level_walk_results_match_numpy_across_buffers_and_shapes():
  rng = np.random.default_rng(1)
  for n in (5, 5, 9, 9, 5):
    x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    a, b = Tensor(x).realize(), Tensor(y).realize()
    for _ in range(2):
      np.testing.assert_allclose((a + b).numpy(), x + y, rtol=1e-6)
      np.testing.assert_allclose((a * a).numpy(), x * x, rtol=1e-6)
      np.testing.assert_allclose((b - 1).numpy(), y - 1, rtol=1e-6)

def test_fast_path_results_survive_frees_and_shape_changes():
  # freed results go back to the allocator's cache and are handed out again: a live result must never be one of them
  a = Tensor(np.arange(16, dtype=np.float32)).realize()
  keep = []
  for i in range(6):
    r = (a + i).realize()
    if i % 2 == 0: keep.append((i, r))
    del r
  for i, r in keep: np.testing.assert_allclose(r.numpy(), np.arange(16) + i)
  b = Tensor(np.arange(8, dtype=np.float32)).realize()   # another shape: another schedule, the same answers
  for _ in range(3): np.testing.assert_allclose((b + 1).numpy(), np.arange(8) + 1)
  assert R._walk_one((a + 1).uop) is not R._NO_FAST   # x + 1 takes the one-level walk

def test_2d_matmul_builds_the_general_graph_directly():
  # a @ b of 2-D float tensors skips the Tensor-level reshape/expand/sum chain; the graph (and so its schedule-cache entry,
  # its gradient) must be the one the general path builds, which an explicit dtype forces
  from core.ir.dtype import dtypes
  rng = np.random.default_rng(0)
  for n, k, m in [(3, 4, 5), (1, 7, 1), (5, 1, 3), (2, 20000, 3)]:   # the last one splits its long sum
    a = Tensor(rng.standard_normal((n, k)).astype(np.float32), requires_grad=True)
    b = Tensor(rng.standard_normal((k, m)).astype(np.float32))
    c = a @ b
    assert c.uop is a.dot(b, dtype=dtypes.float32).uop and c.requires_grad
    np.testing.assert_allclose(c.numpy(), a.numpy() @ b.numpy(), rtol=1e-4, atol=1e-4)
  a = Tensor(rng.standard_normal((4, 6)).astype(np.float32), requires_grad=True)
  b = Tensor(rng.standard_normal((6, 3)).astype(np.float32))
  (a @ b).sum().backward()
  np.testing.assert_allclose(a.grad.numpy(), np.ones((4, 3), np.float32) @ b.numpy().T, rtol=1e-5)
