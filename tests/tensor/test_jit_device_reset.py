"""After Device.reset() a device name means a new device object with its own allocator: a Jit output's numpy read plan and a Jit's
staging copy for numpy inputs (both keep an allocator's copy method) go through the new allocator, not the one they were made with."""
import numpy as np
from core import Device, Jit, Tensor
from core.engine.realize import realized_buffer

def _recording(monkeypatch, name: str) -> list[int]:
  """Makes the current default device's allocator count its `name` calls (_copyin or _copyout), still copying."""
  alloc = Device[Device.DEFAULT].allocator
  calls: list[int] = []
  real = getattr(alloc, name)
  def counting(*args):
    calls.append(1)
    return real(*args)
  monkeypatch.setattr(alloc, name, counting)
  return calls

def test_numpy_read_plan_reads_through_the_new_allocator(monkeypatch):
  t = Tensor(np.arange(6, dtype=np.float32)).realize()
  buf, _ = realized_buffer(t.uop)
  buf.rewritten = True   # as a Jit's captured buffers are: numpy() copies them through the read plan
  np.testing.assert_array_equal(t.numpy(), np.arange(6, dtype=np.float32))   # the plan is made here
  Device.reset()
  reads = _recording(monkeypatch, "_copyout")
  buf.deallocate()   # memory from the new device's allocator
  buf.allocate().copyin(memoryview(np.arange(10, 16, dtype=np.float32)).cast("B"))
  np.testing.assert_array_equal(t.numpy(), np.arange(10, 16, dtype=np.float32))   # the same node: the plan's shortcut
  assert len(reads) == 1

def test_jit_staging_copies_through_the_new_allocator(monkeypatch):
  @Jit
  def f(x): return (x * 2 + 1).reshape(2, 2)
  for i in range(3): np.testing.assert_array_equal(f(np.full(4, i, np.float32)).numpy(), np.full((2, 2), 2 * i + 1, np.float32))
  assert f.staging   # the last call copied its array into the Jit's staging buffer
  Device.reset()
  writes = _recording(monkeypatch, "_copyin")
  for i in range(3, 6): np.testing.assert_array_equal(f(np.full(4, i, np.float32)).numpy(), np.full((2, 2), 2 * i + 1, np.float32))
  assert len(writes) == 3   # one staging copy per replay, each through the allocator the device has now
