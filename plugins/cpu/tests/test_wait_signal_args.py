"""CPUHCQ.wait_signal's fast path (its signal pointer made once per signal memory, cmdproc_wait_clean called with ctypes
objects): 64-bit values, signals not allocated yet, new signal memory on every wait, and a signal whose memory was freed."""
import gc
import numpy as np
import pytest
from core.device.buffer import Buffer
from core.hcq import HCQError
from core.ir.dtype import dtypes
from plugin_cpu import iface_hcq as H, queue as CQ

@pytest.fixture
def dev():
  d = H.CPUHCQ("CPU", ring_size=4096)
  d.wait_signal(Buffer("CPU", 1, dtypes.uint64).allocate(), 0, 5)   # the first wait starts the queues and reads the faults
  yield d
  d.close()

def signal() -> Buffer: return Buffer("CPU", 1, dtypes.uint64).copyin(np.zeros(1, np.uint64).tobytes())

def submit(q: "H.CPUQueue", packets: bytes) -> None:
  ring, size, wptr = q.buffers["ring"].as_buffer(), q.ring_size, q.value("wptr")
  for i in range(0, len(packets), 4): ring[(wptr + i) % size:(wptr + i) % size + 4] = packets[i:i + 4]
  q.buffers["wptr"].as_buffer().cast("Q")[0] = wptr + len(packets)
  q.buffers["doorbell"].as_buffer().cast("Q")[0] = wptr + len(packets)

def test_a_value_above_32_bits_is_waited_for_exactly(dev):
  sig, q, big = signal(), dev.queue("COMPUTE:0"), (1 << 40) + 5
  submit(q, CQ.enc_signal(H.buffer_addr(sig), big - 1))
  with pytest.raises(HCQError, match="timed out"): dev.wait_signal(sig, big, 0.05)   # big - 1 is not enough
  submit(q, CQ.enc_signal(H.buffer_addr(sig), big))
  dev.wait_signal(sig, big, 5)
  assert sig.numpy()[0] == big and dev.error() is None

def test_a_signal_not_allocated_yet_is_allocated_and_waited_on(dev):
  sig = Buffer("CPU", 1, dtypes.uint64)
  assert not sig.is_allocated()
  dev.wait_signal(sig, 0, 5)
  assert sig.is_allocated()
  submit(dev.queue("COMPUTE:0"), CQ.enc_signal(H.buffer_addr(sig), 9))
  dev.wait_signal(sig, 9, 5)
  assert sig.numpy()[0] == 9

def test_signals_in_new_memory_every_wait(dev):
  # more signals than the pointer cache keeps (64), each freed after its wait: every wait reads its own signal's memory
  q = dev.queue("COMPUTE:0")
  for i in range(1, 151):
    sig = signal()
    submit(q, CQ.enc_signal(H.buffer_addr(sig), i))
    dev.wait_signal(sig, i, 5)
    assert sig.numpy()[0] == i
    del sig
    if i % 50 == 0: gc.collect()
  assert len(dev._signal_ptrs) <= 64 and dev.error() is None

def test_a_wait_on_memory_that_replaced_a_freed_signal(dev):
  # the second signal may get the first one's memory or another: either way the wait must see the second one's value
  q = dev.queue("COMPUTE:0")
  first = signal()
  submit(q, CQ.enc_signal(H.buffer_addr(first), 3))
  dev.wait_signal(first, 3, 5)
  del first
  gc.collect()
  second = signal()
  with pytest.raises(HCQError, match="timed out"): dev.wait_signal(second, 3, 0.05)   # still 0: the old signal's 3 is not seen
  submit(q, CQ.enc_signal(H.buffer_addr(second), 4))
  dev.wait_signal(second, 4, 5)
  assert second.numpy()[0] == 4
