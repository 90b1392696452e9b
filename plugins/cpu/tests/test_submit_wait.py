"""CPUHCQ.bind_submit_wait: core's submit program and wait_signal's fast path in one native call (cmdproc_submit_wait), which every
eager op's submission takes (core.hcq.pipeline.Submission.resubmit)."""
import ctypes, struct
import numpy as np
import pytest
from core import Tensor
from core.device.buffer import Buffer
from core.device.hostjit import host_library
from core.device.registry import Device
from core.engine import realize as R
from core.hcq import HCQError
from core.ir.dtype import dtypes
from plugin_cpu import iface_hcq as H, queue as CQ

def program(values: list[int]) -> ctypes._CFuncPtr:
  """A submit program (as core.hcq.callify loads it: no argtypes) of len(values) pointer parameters, storing values[i] at the i-th."""
  params = ", ".join(f"ptr %p{i}" for i in range(len(values)))
  body = "".join(f"  store i64 {v}, ptr %p{i}\n" for i, v in enumerate(values))
  return host_library(f"define void @hcq_submit({params}) {{\n{body}  ret void\n}}\n").function("hcq_submit", None)

@pytest.fixture(params=["python entry", "ctypes"], autouse=True)
def entry(request, monkeypatch):
  """Each test through the library's CPython entry (plugin_cpu._native, built by setup.py) and through ctypes (a library built at
  run time has no such entry); a step binds the one in use when it is made."""
  H.native()
  if request.param == "python entry" and H._entries is None: pytest.skip("the loaded native library has no CPython entries")
  if request.param == "ctypes": monkeypatch.setattr(H, "_entries", None)
  from core.hcq import pipeline as P
  P._device_epoch[0] += 1   # cached submissions bind their step again (and after the test, with the patch undone)
  yield request.param
  P._device_epoch[0] += 1

def signal(v: int) -> Buffer: return Buffer("CPU", 1, dtypes.uint64).copyin(np.array([v], np.uint64).tobytes())
def addr(x) -> int: return ctypes.addressof(x._buf if isinstance(x, Buffer) else x)

@pytest.mark.parametrize("n", range(H.SUBMIT_WAIT_ARGS + 1))
def test_the_program_runs_with_each_count_of_parameters(cpu_hcq, n):
  cells, sig, tl = [ctypes.c_uint64() for _ in range(n)], signal(5), (ctypes.c_uint64 * 1)(5)
  go = cpu_hcq.bind_submit_wait(program([10 + i for i in range(n)]), tuple(addr(c) for c in cells), sig, tl)
  assert go(5.0) == 0
  assert [c.value for c in cells] == [10 + i for i in range(n)] and cpu_hcq.error() is None

def test_more_parameters_than_the_step_takes_have_no_step(cpu_hcq):
  cells = [ctypes.c_uint64() for _ in range(H.SUBMIT_WAIT_ARGS + 1)]
  assert cpu_hcq.bind_submit_wait(program([1] * len(cells)), tuple(addr(c) for c in cells), signal(0), (ctypes.c_uint64 * 1)()) is None

def test_the_wait_is_for_the_timeline_value_the_program_wrote(cpu_hcq):
  sig, tl = signal(0), (ctypes.c_uint64 * 1)(0)
  # the program advances the timeline to 9 and (standing in for the device) the signal too: reached
  assert cpu_hcq.bind_submit_wait(program([9, 9]), (addr(tl), addr(sig)), sig, tl)(5.0) == 0
  # to 10 and the signal stays at 9: the program ran, the fast slice ran out, and wait_signal's general wait goes on
  assert cpu_hcq.bind_submit_wait(program([10]), (addr(tl),), sig, tl)(5.0) == 1
  assert tl[0] == 10 and sig.numpy()[0] == 9
  with pytest.raises(HCQError, match="timed out"): cpu_hcq.wait_signal(sig, tl[0], 0.05)

def test_a_fault_since_the_last_look_is_left_to_wait_signal(cpu_hcq):
  q, sig, tl = cpu_hcq.queue("COMPUTE:0"), signal(0), (ctypes.c_uint64 * 1)(0)
  # a malformed packet, then the signal: the step runs both (host draining), sees the fault and leaves it to the general wait
  packets = struct.pack("<II", 99 | 2 << 16, 0) + CQ.enc_signal(H.buffer_addr(sig), 1)
  ring, size, wptr = q.buffers["ring"].as_buffer(), q.ring_size, q.value("wptr")
  for i in range(0, len(packets), 4): ring[(wptr + i) % size:(wptr + i) % size + 4] = packets[i:i + 4]
  assert cpu_hcq.bind_submit_wait(program([1, wptr + len(packets), wptr + len(packets)]),
                              (addr(tl), addr(q.buffers["wptr"]), addr(q.buffers["doorbell"])), sig, tl)(5.0) == 1
  with pytest.raises(HCQError, match="unknown opcode"): cpu_hcq.wait_signal(sig, 1, 5)
  # as wait_signal's own fast path: once more the general wait (the fault is newer than the mark), which moves the mark past it
  assert cpu_hcq.bind_submit_wait(program([2, 2]), (addr(tl), addr(sig)), sig, tl)(5.0) == 1
  cpu_hcq.wait_signal(sig, 2, 5)
  assert cpu_hcq.bind_submit_wait(program([3, 3]), (addr(tl), addr(sig)), sig, tl)(5.0) == 0
  assert sig.numpy()[0] == 3 and "unknown opcode" in cpu_hcq.error() and cpu_hcq.error() is None   # error() still reports it, once

def test_a_closed_device_runs_nothing_in_the_step(cpu_hcq):
  cell, sig, tl = ctypes.c_uint64(), signal(3), (ctypes.c_uint64 * 1)(3)
  go = cpu_hcq.bind_submit_wait(program([7]), (addr(cell),), sig, tl)
  cpu_hcq.close()
  assert go(5.0) == 2 and cell.value == 0   # core submits and waits itself: its wait starts the queues again
  cpu_hcq.wait_signal(sig, 3, 5)
  assert go(5.0) == 0 and cell.value == 7

def test_a_timeout_below_the_fast_slice_is_left_to_wait_signal(cpu_hcq):
  cell, sig, tl = ctypes.c_uint64(), signal(3), (ctypes.c_uint64 * 1)(3)
  assert cpu_hcq.bind_submit_wait(program([7]), (addr(cell),), sig, tl)(H.FAST_SLICE_S / 2) == 2 and cell.value == 0

@pytest.mark.parametrize("step", ["fused", "ran, wait on", "ran nothing", "none"])
def test_each_eager_op_submits_once_whichever_way_the_device_answers(monkeypatch, step):
  real = H.CPUHCQ.bind_submit_wait
  def bind(self, fn, args, sig, tl):
    go = real(self, fn, args, sig, tl)
    if step == "fused" or go is None: return go
    if step == "none": return None
    if step == "ran nothing": return lambda t: 2
    return lambda t: 1 if go(t) != 2 else 2   # it ran the program (and its fast wait), yet core's wait goes on
  monkeypatch.setattr(H.CPUHCQ, "bind_submit_wait", bind)
  n = 77 + ["fused", "ran, wait on", "ran nothing", "none"].index(step)   # a size of its own: a new submission binds its step
  x = np.arange(n, dtype=np.float32)
  a = Tensor(x).realize()
  cpu_hcq = Device[a.device]
  (a + 1).realize()
  (a + 1).realize()
  (a + 1).realize()   # an eager op cache entry by now
  entry = R.eager_ops.table[R._op_key((a + 1).uop)[0]][0]
  sub = entry.replay.sub
  tl = sub._waits[0][3]
  before = tl[0]
  outs = [(a + 1).realize().numpy() for _ in range(5)]
  cpu_hcq.synchronize()
  assert all(np.array_equal(o, x + 1) for o in outs)
  assert tl[0] == before + 5   # one submit per op: a step that ran the program is not followed by core's own submit
  assert (sub._submit_wait is not None) == (step != "none")

@pytest.mark.parametrize("entry", ["python entry"], indirect=True)
def test_an_eager_op_and_synchronize_make_no_ctypes_call_with_the_python_entry(monkeypatch, entry):
  def no_ctypes(name):
    def fail(*a): raise AssertionError(f"{name} called through ctypes")
    return lambda: fail
  for name in ("_submit_wait", "_idle_clean", "_wait_clean"): monkeypatch.setattr(H, name, no_ctypes(name))
  x = np.arange(83, dtype=np.float32)   # a size of its own: its submission binds its step under the patches
  a = Tensor(x).realize()
  dev = Device[a.device]
  outs = []
  for _ in range(5):
    outs.append((a + 1).realize())
    dev.synchronize()
  assert all(np.array_equal(o.numpy(), x + 1) for o in outs)

@pytest.mark.parametrize("entry", ["python entry"], indirect=True)
def test_the_python_entry_checks_its_arguments(entry):
  with pytest.raises(TypeError, match="got 1 arguments"): H._entries.submit_wait(1)
  with pytest.raises(ValueError, match="address is 0"): H._entries.submit_wait(0, 0)
  with pytest.raises(OverflowError): H._entries.idle_clean(-1)
  assert H._entries.idle_clean(H.native().cmdproc_faults()) in (True, False)
