"""CPUHCQ.wait_signal's fast path (its signal pointer made once per signal memory, cmdproc_wait_clean called with ctypes
objects): 64-bit values, signals not allocated yet, new signal memory on every wait, and a signal whose memory was freed."""
import gc, struct, threading
import numpy as np
import pytest
from core.device.buffer import Buffer
from core.hcq import HCQError
from core.ir.dtype import dtypes
from plugin_cpu import iface_hcq as H, queue as CQ

def signal() -> Buffer: return Buffer("CPU", 1, dtypes.uint64).copyin(np.zeros(1, np.uint64).tobytes())

def submit(q: "H.CPUQueue", packets: bytes) -> None:
  ring, size, wptr = q.buffers["ring"].as_buffer(), q.ring_size, q.value("wptr")
  for i in range(0, len(packets), 4): ring[(wptr + i) % size:(wptr + i) % size + 4] = packets[i:i + 4]
  q.buffers["wptr"].as_buffer().cast("Q")[0] = wptr + len(packets)
  q.buffers["doorbell"].as_buffer().cast("Q")[0] = wptr + len(packets)

def test_a_value_above_32_bits_is_waited_for_exactly(cpu_hcq):
  sig, q, big = signal(), cpu_hcq.queue("COMPUTE:0"), (1 << 40) + 5
  submit(q, CQ.enc_signal(H.buffer_addr(sig), big - 1))
  with pytest.raises(HCQError, match="timed out"): cpu_hcq.wait_signal(sig, big, 0.05)   # big - 1 is not enough
  submit(q, CQ.enc_signal(H.buffer_addr(sig), big))
  cpu_hcq.wait_signal(sig, big, 5)
  assert sig.numpy()[0] == big and cpu_hcq.error() is None

def test_a_signal_not_allocated_yet_is_allocated_and_waited_on(cpu_hcq):
  sig = Buffer("CPU", 1, dtypes.uint64)
  assert not sig.is_allocated()
  cpu_hcq.wait_signal(sig, 0, 5)
  assert sig.is_allocated()
  submit(cpu_hcq.queue("COMPUTE:0"), CQ.enc_signal(H.buffer_addr(sig), 9))
  cpu_hcq.wait_signal(sig, 9, 5)
  assert sig.numpy()[0] == 9

def test_signals_in_new_memory_every_wait(cpu_hcq):
  # more signals than the pointer cache keeps (64), each freed after its wait: every wait reads its own signal's memory
  q = cpu_hcq.queue("COMPUTE:0")
  for i in range(1, 151):
    sig = signal()
    submit(q, CQ.enc_signal(H.buffer_addr(sig), i))
    cpu_hcq.wait_signal(sig, i, 5)
    assert sig.numpy()[0] == i
    del sig
    if i % 50 == 0: gc.collect()
  assert len(cpu_hcq._signal_ptrs) <= 64 and cpu_hcq.error() is None

def test_a_wait_on_memory_that_replaced_a_freed_signal(cpu_hcq):
  # the second signal may get the first one's memory or another: either way the wait must see the second one's value
  q = cpu_hcq.queue("COMPUTE:0")
  first = signal()
  submit(q, CQ.enc_signal(H.buffer_addr(first), 3))
  cpu_hcq.wait_signal(first, 3, 5)
  del first
  gc.collect()
  second = signal()
  with pytest.raises(HCQError, match="timed out"): cpu_hcq.wait_signal(second, 3, 0.05)   # still 0: the old signal's 3 is not seen
  submit(q, CQ.enc_signal(H.buffer_addr(second), 4))
  cpu_hcq.wait_signal(second, 4, 5)
  assert second.numpy()[0] == 4

def test_a_fault_after_fast_waits_is_raised_once_and_the_fast_path_resumes(cpu_hcq):
  # the fast path (wait_signal's own, on a signal it has waited on before) must not return for a fault recorded since the last
  # look: it falls through to the general wait, which raises it; the wait after that is fast again
  q, sig = cpu_hcq.queue("COMPUTE:0"), signal()
  for v in (1, 2):
    submit(q, CQ.enc_signal(H.buffer_addr(sig), v))
    cpu_hcq.wait_signal(sig, v, 5)
  mark = cpu_hcq._fault_mark
  submit(q, struct.pack("<II", 99 | 2 << 16, 0) + CQ.enc_signal(H.buffer_addr(sig), 3))
  with pytest.raises(HCQError, match="unknown opcode"): cpu_hcq.wait_signal(sig, 3, 5)
  submit(q, CQ.enc_signal(H.buffer_addr(sig), 4))
  cpu_hcq.wait_signal(sig, 4, 5)   # the general wait once (the fault is newer than the mark), which moves the mark past it
  assert cpu_hcq._fault_mark > mark and cpu_hcq._mark_arg is not None and cpu_hcq._mark_arg.value == cpu_hcq._fault_mark
  submit(q, CQ.enc_signal(H.buffer_addr(sig), 5))
  cpu_hcq.wait_signal(sig, 5, 5)
  cpu_hcq.synchronize(5)
  assert sig.numpy()[0] == 5 and "unknown opcode" in cpu_hcq.error() and cpu_hcq.error() is None

def test_a_signal_that_arrives_after_the_fast_slice_is_waited_for(cpu_hcq):
  # the fast path's slice (FAST_SLICE_NS) runs out before the signal arrives: the general wait takes over and sees it
  q, sig = cpu_hcq.queue("COMPUTE:0"), signal()
  submit(q, CQ.enc_signal(H.buffer_addr(sig), 1))
  cpu_hcq.wait_signal(sig, 1, 5)
  late = threading.Timer(10 * H.FAST_SLICE_NS / 1e9, lambda: submit(q, CQ.enc_signal(H.buffer_addr(sig), 2)))
  late.start()
  cpu_hcq.wait_signal(sig, 2, 5)
  late.join()
  assert sig.numpy()[0] == 2 and cpu_hcq.error() is None

def test_a_wait_after_close_starts_the_queues_again(cpu_hcq):
  q, sig = cpu_hcq.queue("COMPUTE:0"), signal()
  submit(q, CQ.enc_signal(H.buffer_addr(sig), 1))
  cpu_hcq.wait_signal(sig, 1, 5)
  cpu_hcq.close()
  assert not q.handle
  cpu_hcq.wait_signal(sig, 1, 5)   # reached already: the wait starts the queues all the same, where the fast path would not
  assert q.handle
  submit(q, CQ.enc_signal(H.buffer_addr(sig), 2))
  cpu_hcq.wait_signal(sig, 2, 5)
  assert sig.numpy()[0] == 2 and cpu_hcq.error() is None
  with pytest.raises(HCQError, match="timed out"): cpu_hcq.wait_signal(sig, 3, 0.05)   # a short timeout: the general wait's deadline
