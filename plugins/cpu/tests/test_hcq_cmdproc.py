"""The CPU command processor on hand-encoded packets: launches, copies, signal ordering across queues, timestamps, faults."""
import ctypes, os, struct, time
import numpy as np
import pytest
from core.device.buffer import Buffer
from core.hcq import HCQError
from core.ir.dtype import dtypes
from plugin_cpu.compiler import CCompiler
from plugin_cpu import iface_hcq as H, queue as CQ

KERNELS = r"""
void add(float* restrict out, const float* restrict a, const float* restrict b, int n, int nblocks, int gidx0) {
  int per = (n + nblocks - 1) / nblocks;
  int lo = gidx0 * per, hi = lo + per < n ? lo + per : n;
  for (int i = lo; i < hi; i++) out[i] = a[i] + b[i];
}
void add1(float* restrict out, const float* restrict a, const float* restrict b, int n) { for (int i = 0; i < n; i++) out[i] = a[i] + b[i]; }
void slow_store(int* out, int value, int spins) {
  volatile long x = 0;
  for (long i = 0; i < (long)spins * 1000; i++) x += i;
  out[0] = value;
}
void crash(int* out) { *(volatile int*)(long)16 = out[0]; }
void divide(int* out, int d) { out[0] = 100 / d; }
void block_ids(int* out, int gidx0) { out[gidx0] = gidx0 + 1; }
#include <unistd.h>
#include <sys/syscall.h>
void tid(long* out) { out[0] = syscall(SYS_gettid); }
void crash_block(int* out, int bad, int gidx0) { if (gidx0 == bad) *(volatile int*)(long)24 = 1; out[gidx0] = gidx0 + 1; }
"""

@pytest.fixture(scope="module")
def kernels():
  lib = CCompiler().compile(KERNELS)
  return {n: CQ.load_program(n, lib) for n in ("add", "add1", "slow_store", "crash", "divide", "block_ids", "crash_block", "tid")}

def fn(kernels, name): return ctypes.cast(kernels[name].fxn, ctypes.c_void_p).value

@pytest.fixture
def dev():
  d = H.CPUHCQ("CPU", ring_size=4096)
  yield d
  d.close()

_DT = {np.float32: dtypes.float32, np.int32: dtypes.int32, np.uint64: dtypes.uint64, np.uint8: dtypes.uint8}
def buf(arr): return Buffer("CPU", arr.size, _DT[arr.dtype.type]).copyin(arr.tobytes())
def addr(b): return H.buffer_addr(b)
def kernargs(*slots):
  b = Buffer("CPU", max(len(slots), 1), dtypes.uint64).copyin(struct.pack(f"<{max(len(slots), 1)}Q", *(slots or (0,))))
  return b
def signal(): return buf(np.zeros(1, np.uint64))

def submit(q: "H.CPUQueue", packets: bytes) -> None:
  """What the host submit program does: copy into the ring at wptr (wrapping), bump wptr, ring the doorbell."""
  ring, size = q.buffers["ring"].as_buffer(), q.ring_size
  wptr = q.value("wptr")
  assert len(packets) <= size - (wptr - q.rptr()), "test submits more than the ring holds"
  for i in range(0, len(packets), 4): ring[(wptr + i) % size:(wptr + i) % size + 4] = packets[i:i + 4]
  q.buffers["wptr"].as_buffer().cast("Q")[0] = wptr + len(packets)
  q.buffers["doorbell"].as_buffer().cast("Q")[0] = wptr + len(packets)

def test_encoder_layout_and_decode():
  words = CQ.enc_launch(0x1000, 0x2000, 3, 7) + CQ.enc_copy(1, 2, 3) + CQ.enc_wait(4, 5) + CQ.enc_signal(6, 7) + CQ.enc_timestamp(8) + CQ.enc_barrier()
  assert len(words) == 4 * (8 + 8 + 6 + 6 + 4 + 2) and len(words) % 8 == 0
  assert struct.unpack_from("<I", words, 0)[0] == 1 | 8 << 16
  assert struct.unpack_from("<Q", words, CQ.LAUNCH_KERNARGS)[0] == 0x2000
  assert CQ.decode(words) == [("LAUNCH", (3, 0x1000, 0x2000, 7)), ("COPY", (1, 2, 3)), ("WAIT", (4, 5)), ("SIGNAL", (6, 7)),
                             ("TIMESTAMP", (8,)), ("BARRIER", ())]
  with pytest.raises(ValueError, match="bad packet header"): CQ.decode(struct.pack("<II", 99 | 2 << 16, 0))

@pytest.mark.parametrize("name,nblocks", [("add1", 1), ("add", 1), ("add", 4)])
def test_launch_runs_a_compiled_kernel(dev, kernels, name, nblocks):
  a, b = np.arange(37, dtype=np.float32), np.linspace(-3, 3, 37, dtype=np.float32)
  A, B, OUT, sig = buf(a), buf(b), buf(np.zeros(37, np.float32)), signal()
  ka = kernargs(addr(OUT), addr(A), addr(B), 37, nblocks)
  q = dev.queue("COMPUTE:0")
  submit(q, CQ.enc_launch(fn(kernels, name), addr(ka), 5, nblocks) + CQ.enc_signal(addr(sig), 1))
  dev.wait_signal(sig, 1, 5)
  np.testing.assert_array_equal(OUT.numpy(), a + b)

def test_launch_over_many_blocks_runs_each_once(dev, kernels):
  OUT, sig = buf(np.zeros(300, np.int32)), signal()
  ka = kernargs(addr(OUT))
  submit(dev.queue("COMPUTE:0"), CQ.enc_launch(fn(kernels, "block_ids"), addr(ka), 1, 300) + CQ.enc_signal(addr(sig), 9))
  dev.wait_signal(sig, 9, 5)
  np.testing.assert_array_equal(OUT.numpy(), np.arange(1, 301))

def test_copy_and_barrier(dev):
  src = np.random.default_rng(0).integers(0, 255, 1000, dtype=np.uint8)
  S, D, sig = buf(src), buf(np.zeros(1000, np.uint8)), signal()
  submit(dev.queue("COPY:0"), CQ.enc_copy(addr(D) + 10, addr(S), 990) + CQ.enc_barrier() + CQ.enc_signal(addr(sig), 3))
  dev.wait_signal(sig, 3, 5)
  out = D.numpy()
  np.testing.assert_array_equal(out[10:], src[:990])
  assert not out[:10].any()

def test_wait_orders_a_consumer_queue_after_a_slow_producer(dev, kernels):
  # COPY:0 must wait for COMPUTE:0's signal: without the WAIT it would copy the 0 before the slow kernel stores 1234
  X, Y, s1, s2 = buf(np.zeros(1, np.int32)), buf(np.full(1, -1, np.int32)), signal(), signal()
  ka = kernargs(addr(X), 1234, 30000)   # ~tens of ms of spinning
  # the consumer goes first, so its worker is already blocked in the WAIT when the producer runs
  submit(dev.queue("COPY:0"), CQ.enc_wait(addr(s1), 1) + CQ.enc_copy(addr(Y), addr(X), 4) + CQ.enc_signal(addr(s2), 1))
  until = time.monotonic() + 5
  while "blocked in the WAIT" not in dev.queue("COPY:0").describe() and time.monotonic() < until: time.sleep(0.001)
  assert Y.numpy()[0] == -1 and "blocked in the WAIT" in dev.queue("COPY:0").describe()
  submit(dev.queue("COMPUTE:0"), CQ.enc_launch(fn(kernels, "slow_store"), addr(ka), 2, 1) + CQ.enc_signal(addr(s1), 1))
  dev.wait_signal(s2, 1, 10)
  assert Y.numpy()[0] == 1234

def test_signal_value_is_compared_as_uint64(dev):
  sig, done = buf(np.array([2**40], np.uint64)), signal()
  submit(dev.queue("COMPUTE:0"), CQ.enc_wait(addr(sig), 2**40) + CQ.enc_signal(addr(done), 2**63 + 5))
  dev.wait_signal(done, 2**63 + 5, 5)
  assert done.numpy()[0] == 2**63 + 5

def test_timestamps_are_monotonic_ns(dev, kernels):
  T, X, sig = buf(np.zeros(2, np.uint64)), buf(np.zeros(1, np.int32)), signal()
  ka = kernargs(addr(X), 1, 2000)
  before = time.monotonic_ns()
  submit(dev.queue("COMPUTE:0"), CQ.enc_timestamp(addr(T)) + CQ.enc_launch(fn(kernels, "slow_store"), addr(ka), 3, 1) +
         CQ.enc_timestamp(addr(T) + 8) + CQ.enc_signal(addr(sig), 1))
  dev.wait_signal(sig, 1, 5)
  t0, t1 = (int(x) for x in T.numpy())
  assert before <= t0 < t1 <= time.monotonic_ns()

def test_ring_wraps_around(kernels):
  d = H.CPUHCQ("CPU", ring_size=128)   # 5 packets of 24 bytes + 1 of 48 per round: offsets wrap mid-packet
  try:
    q, sig = d.queue("COPY:0"), signal()
    S, D = buf(np.arange(64, dtype=np.uint8)), buf(np.zeros(64, np.uint8))
    for r in range(1, 30):
      submit(q, CQ.enc_copy(addr(D) + r, addr(S) + r, 1) + CQ.enc_signal(addr(sig), r) + CQ.enc_barrier() * 2)
      d.wait_signal(sig, r, 5)
    np.testing.assert_array_equal(D.numpy()[1:30], np.arange(1, 30))
    d.synchronize(5)   # the barriers after the last signal
    assert q.rptr() == 29 * (32 + 24 + 16) and q.rptr() > 128 * 10
  finally: d.close()

def test_malformed_packet_reports_offset_and_opcode(dev):
  q, sig = dev.queue("COMPUTE:0"), signal()
  submit(q, CQ.enc_barrier())
  dev.synchronize(5)
  start = q.value("wptr")
  submit(q, CQ.enc_barrier() + struct.pack("<II", 99 | 2 << 16, 0) + CQ.enc_signal(addr(sig), 1))
  with pytest.raises(HCQError, match=rf"offset {start + 8} .*opcode 99 \(unknown\): unknown opcode"): dev.wait_signal(sig, 1, 5)
  # a wrong length for a known opcode, in a later submit: the device is still running
  sig2 = signal()
  start = q.value("wptr")
  submit(q, struct.pack("<IIQQ", CQ.OP_SIGNAL | 5 << 16, 0, addr(sig2), 1))
  with pytest.raises(HCQError, match=rf"offset {start} .*opcode 4 \(SIGNAL\): length 5 dwords, a SIGNAL packet has 6"): dev.wait_signal(sig2, 1, 5)
  submit(q, CQ.enc_signal(addr(sig2), 7))
  dev.wait_signal(sig2, 7, 5)
  # error() still has both reports (core reads it to explain a failed wait), each once
  err = dev.error()
  assert "unknown opcode" not in err and "length 5 dwords" in err and "1 earlier fault" in err and dev.error() is None

def test_segfaulting_kernel_is_reported_and_the_device_stays_usable(dev, kernels):
  q, X, sig = dev.queue("COMPUTE:0"), buf(np.zeros(4, np.int32)), signal()
  bad = kernargs(addr(X))
  start = q.value("wptr")
  ok = kernargs(addr(X), 5, 1)
  # the rest of the submit (the slow_store) is dropped, its SIGNAL still runs so later submits waiting on it are not stuck
  submit(q, CQ.enc_launch(fn(kernels, "crash"), addr(bad), 1, 1) + CQ.enc_launch(fn(kernels, "slow_store"), addr(ok), 3, 1) +
         CQ.enc_signal(addr(sig), 1))
  with pytest.raises(HCQError, match=rf"COMPUTE:0: packet at offset {start} .*opcode 1 \(LAUNCH\): SIGSEGV .* at address 0x10"):
    dev.wait_signal(sig, 1, 5)
  assert X.numpy()[0] == 0
  submit(q, CQ.enc_launch(fn(kernels, "slow_store"), addr(ok), 3, 1) + CQ.enc_signal(addr(sig), 2))
  dev.wait_signal(sig, 2, 5)
  assert X.numpy()[0] == 5 and "SIGSEGV" in dev.error() and dev.error() is None

@pytest.mark.parametrize("bad", [0, 5, 63])
def test_fault_in_one_block_of_a_multi_block_kernel_is_reported(dev, kernels, bad):
  # the blocks run on the thread pool: the faulting one is abandoned wherever it ran, the others finish, the device goes on
  X, sig = buf(np.zeros(64, np.int32)), signal()
  q = dev.queue("COMPUTE:0")
  submit(q, CQ.enc_launch(fn(kernels, "crash_block"), addr(kernargs(addr(X), bad)), 2, 64) + CQ.enc_signal(addr(sig), 1))
  with pytest.raises(HCQError, match=rf"LAUNCH\): signal 11 .* at address 0x18 in block {bad} of 64"): dev.wait_signal(sig, 1, 5)
  want = np.arange(1, 65, dtype=np.int32)
  want[bad] = 0
  np.testing.assert_array_equal(X.numpy(), want)
  Y = buf(np.zeros(64, np.int32))
  submit(q, CQ.enc_launch(fn(kernels, "block_ids"), addr(kernargs(addr(Y))), 1, 64) + CQ.enc_signal(addr(sig), 2))
  dev.wait_signal(sig, 2, 5)
  np.testing.assert_array_equal(Y.numpy(), np.arange(1, 65, dtype=np.int32))
  assert "block" in (dev.error() or "")

def test_division_by_zero_is_reported(dev, kernels):
  X, sig = buf(np.zeros(1, np.int32)), signal()
  submit(dev.queue("COMPUTE:0"), CQ.enc_launch(fn(kernels, "divide"), addr(kernargs(addr(X), 0)), 2, 1) + CQ.enc_signal(addr(sig), 1))
  with pytest.raises(HCQError, match="SIGFPE"): dev.wait_signal(sig, 1, 5)
  submit(dev.queue("COMPUTE:0"), CQ.enc_launch(fn(kernels, "divide"), addr(kernargs(addr(X), 7)), 2, 1) + CQ.enc_signal(addr(sig), 2))
  dev.wait_signal(sig, 2, 5)
  assert X.numpy()[0] == 14

def test_copy_from_a_bad_address_is_reported(dev):
  D, sig = buf(np.zeros(8, np.uint8)), signal()
  submit(dev.queue("COPY:0"), CQ.enc_copy(addr(D), 8, 8) + CQ.enc_signal(addr(sig), 1))
  with pytest.raises(HCQError, match=r"COPY:0: .*opcode 2 \(COPY\): SIGSEGV"): dev.wait_signal(sig, 1, 5)

def test_wait_that_never_completes_times_out_and_the_queue_recovers(dev):
  never, sig, other = signal(), signal(), signal()
  q = dev.queue("COMPUTE:0")
  start = q.value("wptr")
  submit(q, CQ.enc_wait(addr(never), 1) + CQ.enc_signal(addr(sig), 1))
  t = time.monotonic()
  with pytest.raises(HCQError, match=rf"timed out after 0.3 s .* to reach 1; it is 0.*blocked in the WAIT packet at offset {start}.*"
                                   r"Gave up the WAIT of COMPUTE:0") as e:
    dev.wait_signal(sig, 1, 0.3)
  assert 0.3 <= time.monotonic() - t < 3 and (e.value.seen, e.value.expected, e.value.queue) == (0, 1, "COMPUTE:0")
  # the host gave up on the WAIT: the queue moves on (the rest of that submit still signals) and runs later submits
  submit(q, CQ.enc_signal(addr(other), 4))
  dev.wait_signal(other, 4, 5)
  assert sig.numpy()[0] == 1 and dev.error() is None

def test_instances_have_their_own_queues_and_can_wait_on_each_other(kernels):
  d0, d1 = H.CPUHCQ("CPU", ring_size=4096), H.CPUHCQ("CPU:1", ring_size=4096)
  try:
    assert d0.queue("COMPUTE:0") is not d1.queue("COMPUTE:0")
    assert addr(d0.queue("COMPUTE:0").buffers["ring"]) != addr(d1.queue("COMPUTE:0").buffers["ring"])
    X, Y, s0, s1 = buf(np.zeros(1, np.int32)), buf(np.zeros(1, np.int32)), signal(), signal()
    submit(d1.queue("COPY:0"), CQ.enc_wait(addr(s0), 1) + CQ.enc_copy(addr(Y), addr(X), 4) + CQ.enc_signal(addr(s1), 1))
    submit(d0.queue("COMPUTE:0"), CQ.enc_launch(fn(kernels, "slow_store"), addr(kernargs(addr(X), 77, 20000)), 3, 1) + CQ.enc_signal(addr(s0), 1))
    d1.wait_signal(s1, 1, 10)
    assert Y.numpy()[0] == 77
  finally:
    d0.close()
    d1.close()

def _threads(expect: int | None = None) -> int:
  # pthread_join returns once the thread's tid is cleared, a moment before the kernel drops it from /proc: let it settle
  deadline = time.monotonic() + 2
  while (n := len(os.listdir("/proc/self/task"))) != expect and expect is not None and time.monotonic() < deadline: time.sleep(0.001)
  return n

def test_close_joins_the_workers():
  d = H.CPUHCQ("CPU", ring_size=4096)
  n = _threads()
  d.queue("COMPUTE:0"), d.queue("COPY:0")
  assert _threads() == n + 2
  never = signal()
  submit(d.queue("COPY:0"), CQ.enc_wait(addr(never), 1))   # even a worker blocked in a WAIT stops
  d.close()
  assert _threads(n) == n
  # a later use starts them again on the same ring, resuming at the doorbell
  sig = signal()
  submit(d.queue("COPY:0"), CQ.enc_signal(addr(sig), 5))
  d.wait_signal(sig, 5, 5)
  assert _threads() == n + 2
  d.close()

def test_forked_child_restarts_the_workers_on_the_same_rings(dev):
  q, sig = dev.queue("COMPUTE:0"), signal()
  ring = addr(q.buffers["ring"])
  pid = os.fork()
  if pid == 0:   # the child: the parent's worker threads do not exist here
    code = 1
    try:
      q2 = dev.queue("COMPUTE:0")
      submit(q2, CQ.enc_signal(addr(sig), 3))
      dev.wait_signal(sig, 3, 5)
      code = 0 if addr(q2.buffers["ring"]) == ring and sig.numpy()[0] == 3 else 2
    finally: os._exit(code)
  assert os.waitpid(pid, 0)[1] == 0
  assert sig.numpy()[0] == 0   # the child's memory was its own

def test_idle_workers_sleep():
  d = H.CPUHCQ("CPU", ring_size=4096)
  try:
    d.queue("COMPUTE:0")
    time.sleep(0.05)
    c0, t0 = time.process_time(), time.monotonic()
    time.sleep(0.3)
    assert (time.process_time() - c0) / (time.monotonic() - t0) < 0.2   # an idle worker does not spin a core
  finally: d.close()

def _wakes(tids: set[str]) -> int:
  n = 0
  for t in tids:
    with open(f"/proc/self/task/{t}/status") as f: n += int(f.read().split("voluntary_ctxt_switches:")[1].split()[0])
  return n

def test_idle_workers_rarely_wake():
  # an idle worker's sleep grows to 100 ms (~10 wake-ups a second); with the 2 ms it grew to before, it woke ~475 times a second,
  # taking the core from whatever ran there. Counted over 0.5 s once the sleep has grown (after ~0.2 s)
  before = set(os.listdir("/proc/self/task"))
  d = H.CPUHCQ("CPU", ring_size=4096)
  try:
    d.queue("COMPUTE:0"), d.queue("COPY:0")
    workers = set(os.listdir("/proc/self/task")) - before
    time.sleep(0.4)
    w0 = _wakes(workers)
    time.sleep(0.5)
    woke = _wakes(workers) - w0
    assert len(workers) == 2 and woke < 40, f"2 idle workers woke {woke} times in 0.5 s"
  finally: d.close()

def test_a_worker_sleeps_while_a_waiting_host_runs_a_long_kernel(kernels):
  # host draining: while the waiting thread runs the kernel, the queue's worker has nothing to do before that wait's deadline
  # and sleeps until then (at most 100 ms at a time). It polled every 2 ms or less instead (~460 wake-ups a second), each one
  # taking a core from the kernel's threads under CFS
  before = set(os.listdir("/proc/self/task"))
  d = H.CPUHCQ("CPU", ring_size=4096)
  old = H.native().cmdproc_set_handoff(120 * 10**9)   # the waiting thread runs the kernel, however late its wait starts
  try:
    q = d.queue("COMPUTE:0")
    worker = set(os.listdir("/proc/self/task")) - before
    X, sig = buf(np.zeros(1, np.int32)), signal()
    d.wait_signal(sig, 0, 5)   # every queue started
    submit(q, CQ.enc_launch(fn(kernels, "slow_store"), addr(kernargs(addr(X), 7, 200000)), 3, 1) + CQ.enc_signal(addr(sig), 1))
    H.native().cmdproc_kick()   # the worker sees the packets now, not at the end of its idle sleep
    w0, t0 = _wakes(worker), time.monotonic()
    d.wait_signal(sig, 1, 60)
    woke, secs = _wakes(worker) - w0, time.monotonic() - t0
    assert X.numpy()[0] == 7 and len(worker) == 1
    assert secs > 0.05 and woke < 5 + 20 * secs, f"the worker woke {woke} times in the {secs:.2f} s the host ran the kernel"
  finally:
    H.native().cmdproc_set_handoff(old)
    d.close()

def test_a_core_submission_nobody_waits_for_runs_on_a_worker(monkeypatch):
  # run(wait=False) leaves the submit to the workers: the device's submitted_without_wait() wakes them (one kick), no host wait
  # runs it (the idle workers' 100 ms timeout would find it too: the kick is what is counted)
  from core.engine import run
  from core.tensor.tensor import Tensor
  before = {id(s) for s in run._submissions.values()}
  x = Tensor(np.arange(7919, dtype=np.float32), device="CPU")
  np.testing.assert_allclose((x * 3 + 0.25).numpy(), np.arange(7919, dtype=np.float32) * 3 + 0.25)
  sub = next(s for s in run._submissions.values() if id(s) not in before)
  (_, _, sig, tl), = sub._waits
  seen = ctypes.c_uint64.from_address(H.buffer_addr(sig))
  time.sleep(0.3)   # the workers are asleep
  lib, kicks = H.native(), []
  kick = lib.cmdproc_kick
  monkeypatch.setattr(lib, "cmdproc_kick", lambda: (kicks.append(1), kick())[1])
  sub.resubmit(wait=False)
  assert kicks == [1]
  until = time.monotonic() + 5
  while seen.value < tl[0] and time.monotonic() < until: time.sleep(0.001)
  assert seen.value == tl[0]

def test_a_waiting_host_runs_the_packets_itself(dev, kernels):
  # host draining: the thread that waits runs what it just submitted (no hand-off to a sleeping worker). The worker takes
  # packets the host leaves for HANDOFF_NS (200 us), which a host preempted between submit and wait can (CI saw it once under
  # load): most of the submits, not every one, must run on the waiting thread; without host draining none does
  import threading
  T, sig = buf(np.zeros(1, np.uint64)), signal()
  q = dev.queue("COMPUTE:0")
  ran_here = 0
  for i in range(1, 11):
    time.sleep(0.01)   # the worker is idle
    submit(q, CQ.enc_launch(fn(kernels, "tid"), addr(kernargs(addr(T))), 1, 1) + CQ.enc_signal(addr(sig), i))
    dev.wait_signal(sig, i, 5)
    assert T.numpy()[0] != 0
    ran_here += int(T.numpy()[0] == threading.get_native_id())
  assert ran_here >= 6, f"{ran_here} of 10 submits ran on the waiting thread"

def test_a_submit_nobody_waits_for_is_run_by_the_worker(dev, kernels):
  import threading
  T, sig = buf(np.zeros(1, np.uint64)), signal()
  q = dev.queue("COMPUTE:0")
  submit(q, CQ.enc_launch(fn(kernels, "tid"), addr(kernargs(addr(T))), 1, 1) + CQ.enc_signal(addr(sig), 1))
  until = time.monotonic() + 5
  while sig.numpy()[0] != 1 and time.monotonic() < until: time.sleep(0.001)
  assert sig.numpy()[0] == 1 and T.numpy()[0] not in (0, threading.get_native_id())

def test_synchronize_runs_pending_packets_and_reports_faults(dev, kernels):
  X, sig = buf(np.zeros(1, np.int32)), signal()
  q = dev.queue("COMPUTE:0")
  submit(q, CQ.enc_launch(fn(kernels, "slow_store"), addr(kernargs(addr(X), 9, 1)), 3, 1) + CQ.enc_signal(addr(sig), 1))
  dev.synchronize(5)
  assert X.numpy()[0] == 9 and sig.numpy()[0] == 1 and q.rptr() == q.value("doorbell")
  submit(q, CQ.enc_launch(fn(kernels, "crash"), addr(kernargs(addr(X))), 1, 1) + CQ.enc_signal(addr(sig), 2))
  with pytest.raises(HCQError, match="SIGSEGV"): dev.synchronize(5)
  dev.synchronize(5)   # reported once

def test_a_program_is_loaded_once_while_held_and_unloaded_after():
  import gc
  lib = CCompiler().compile("void only_here(int* out) { out[0] = 7; }")
  a = CQ.load_program("only_here", lib)
  assert CQ.load_program("only_here", lib) is a
  key = next(k for k, v in CQ._programs.items() if v is a)
  del a
  gc.collect()
  assert key not in CQ._programs   # nothing holds it: unloaded, not kept for the life of the process

def test_programs_of_evicted_submissions_are_unloaded(tmp_path):
  # 40 eager ops, each a new kernel, with every cache that may hold a loaded program bounded to 4 entries: the loaded
  # programs stay near that bound (they grew by one per new kernel, without end, before)
  code = """
import gc
from core import Tensor
from plugin_cpu import queue
for i in range(40): assert (Tensor.ones(8 + i) * 2 + 1).sum().item() == 3 * (8 + i)
gc.collect()
print(len(queue._programs))
"""
  env = {**os.environ, "DEV": "CPU", "CORE_CACHE_DIR": str(tmp_path), **{f"CORE_CACHE_{n}": "4" for n in ("SUBMISSIONS", "HCQ_PROGRAMS", "RUNNERS")}}
  import subprocess, sys
  out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
  assert out.returncode == 0, out.stderr
  assert int(out.stdout.split()[-1]) <= 12, out.stdout
