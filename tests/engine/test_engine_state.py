"""Engine state lives off the IR: nodes keep only values cached from their own fields, the engine's facts about a node die
with it, and one schedule cache is dropped whole when a device name may mean another device."""
import gc
import numpy as np
from core import Tensor, Jit
from core.ir.ops import UOp
from core.device.registry import Device
from core.engine import realize as R
from core.engine.state import facts

# what a node may cache from its own (immutable) fields: cached_property values, the bounds/sort-key caches and a SINK's
# toposort order (the graph below a node never changes)
CACHED_FROM_FIELDS = {"shape", "device", "_min_max", "_skey", "_topo"}

def _nodes(*ts: Tensor) -> dict[UOp, None]:
  return UOp(UOp.sink(ts[0].uop).op, src=tuple(t.uop for t in ts)).toposort()

def test_nodes_hold_no_engine_state_after_eager_assign_and_jit_work():
  rng = np.random.default_rng(0)
  w = Tensor(rng.standard_normal((8, 8)).astype(np.float32)).realize()
  x = Tensor(rng.standard_normal((4, 8)).astype(np.float32)).realize()
  y = (x @ w).relu().sum(axis=1)
  y.realize()
  w.assign(w * 0.5).realize()
  f = Jit(lambda a: (a @ w + 1).realize())
  outs = [f(Tensor(rng.standard_normal((4, 8)).astype(np.float32)).realize()) for _ in range(3)]
  extra = {k for u in _nodes(w, x, y, *outs) for k in u.__dict__} - CACHED_FROM_FIELDS
  assert not extra, f"engine state found on nodes: {extra}"
  np.testing.assert_allclose(y.numpy(), np.maximum(x.numpy() @ (w.numpy() * 2), 0).sum(1), rtol=1e-5)

def test_a_nodes_facts_die_with_it():
  a = Tensor(np.arange(1024, dtype=np.float32)).realize()
  for _ in range(3): (a + 1).realize()   # warm: the schedule cache holds its own placeholder nodes
  gc.collect()
  n = len(facts)
  # each result: a buffer node with a Buffer, a root with a memo; the first ones take the eager plan's pooled buffer nodes, whose
  # facts the pool keeps (counted in n)
  ts = [(a + 1).realize() for i in range(50)]
  assert len(facts) >= n + 50 - R.POOL_DEPTH
  np.testing.assert_equal(ts[7].numpy(), np.arange(1024) + 1)
  del ts
  gc.collect()
  assert len(facts) <= n + 2

def test_device_change_drops_every_cached_schedule_and_recomputes():
  a = Tensor(np.arange(6, dtype=np.float32)).realize()
  for _ in range(3): (a * 3).realize()
  key = R._walk([(a * 3).uop], True)[0]
  assert R.schedules.get(key) is not None and R.schedules.get(key).plan
  dev = Device[a.device]
  with Device.installed({a.device: dev}):   # the same object again: still a change of what the name may mean
    assert len(R.schedules) == 0
    np.testing.assert_equal((a * 3).numpy(), np.arange(6) * 3)
  assert R.schedules.get(key) is None
  np.testing.assert_equal((a * 3).numpy(), np.arange(6) * 3)
