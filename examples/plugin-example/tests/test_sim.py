"""plugin-example's SIM interface (iface_sim.py): the command processor on hand-written packets, its errors, and whole tensor
programs on DEV=SIM+EXAMPLE checked against numpy."""
from __future__ import annotations
import ctypes, os, struct
from typing import Iterator
import numpy as np
import pytest
from core.device.buffer import Buffer
from core.device.registry import Device
from core.device.target import Target
from core.hcq import HCQError
from core.ir.dtype import dtypes
from plugin_example import iface_sim
from plugin_example.iface_sim import SimHCQ, SimQueue, peek, poke
from plugin_example.queue import Op, packet

def submit(q: SimQueue, words: bytes) -> None:
  """What core's submit program does: copy the words into the ring at wptr (wrapping at its end), bump wptr, ring the doorbell."""
  wptr = peek(q.addr["wptr"])
  for i in range(0, len(words), 4): ctypes.memmove(q.addr["ring"] + (wptr + i) % q.ring_size, words[i:i + 4], 4)
  poke(q.addr["wptr"], wptr + len(words))
  poke(q.addr["doorbell"], wptr + len(words))

def signal() -> Buffer:
  """A zeroed uint64 signal in EXAMPLE memory."""
  return Buffer("EXAMPLE", 1, dtypes.uint64).allocate().copyin(memoryview(bytearray(8)))

def at(b: Buffer) -> int: return ctypes.addressof(b._buf)

# *** the command processor on hand-written packets ***

def test_a_submission_nobody_waits_for_runs() -> None:
  # the processor runs on a thread that steps it: core calls submitted_without_wait() after a run with wait=False
  sim = SimHCQ("EXAMPLE")
  sig = signal()
  submit(sim.queue("COMPUTE:0"), packet(Op.SIGNAL, at(sig), 3))
  sim.submitted_without_wait()
  assert peek(at(sig)) == 3

def test_copy_and_signal_wrap_around_the_ring_end() -> None:
  sim = SimHCQ("EXAMPLE", ring_size=256)
  q = sim.queue("COMPUTE:0")
  q.rptr = 240   # as if 240 bytes ran before: the next packets start 16 bytes before the ring's end
  poke(q.addr["wptr"], 240)
  src, dst = (ctypes.c_uint8 * 32)(*range(32)), (ctypes.c_uint8 * 32)()
  sig = signal()
  submit(q, packet(Op.COPY, ctypes.addressof(dst), ctypes.addressof(src), 32) + packet(Op.SIGNAL, at(sig), 7))
  sim.wait_signal(sig, 7, 1.0)
  assert bytes(dst) == bytes(range(32)) and peek(at(sig)) == 7 and q.rptr == peek(q.addr["doorbell"]) == 240 + 56

def test_wait_holds_its_queue_until_another_queue_signals() -> None:
  sim = SimHCQ("EXAMPLE")
  a, b, ts = signal(), signal(), signal()
  # COMPUTE:0 waits for a, then stamps the time and signals b; COPY:0 signals a
  submit(sim.queue("COMPUTE:0"), packet(Op.WAIT, at(a), 1) + packet(Op.BARRIER) + packet(Op.TIMESTAMP, at(ts)) + packet(Op.SIGNAL, at(b), 2))
  submit(sim.queue("COPY:0"), packet(Op.SIGNAL, at(a), 1))
  sim.wait_signal(b, 2, 1.0)
  assert peek(at(a)) == 1 and peek(at(b)) == 2 and peek(at(ts)) > 0
  sim.synchronize()

def test_timeout_names_the_blocked_wait_and_the_queue_resumes() -> None:
  sim = SimHCQ("EXAMPLE")
  a, b = signal(), signal()
  submit(sim.queue("COMPUTE:0"), packet(Op.WAIT, at(a), 5) + packet(Op.SIGNAL, at(b), 1))
  with pytest.raises(HCQError, match=rf"EXAMPLE: timed out after 0.05 s \(HCQ_TIMEOUT\) waiting for signal 0x{at(b):x} to reach 1; it is 0") as e:
    sim.wait_signal(b, 1, 0.05)
  assert f"COMPUTE:0 stopped in the WAIT at byte 0 for signal 0x{at(a):x} >= 5 (it is 0)" in str(e.value) and e.value.device == "EXAMPLE"
  poke(at(a), 5)   # what core's recovery does after a failed wait: signals behind their host value are set to it
  sim.wait_signal(b, 1, 1.0)

def test_bad_packet_is_a_fault_and_later_submits_run() -> None:
  sim = SimHCQ("EXAMPLE")
  q = sim.queue("COPY:0")
  sig = signal()
  submit(q, struct.pack("<2Q", 0xff, 0) + packet(Op.SIGNAL, at(sig), 1))
  with pytest.raises(HCQError, match=r"reported a fault:\n  EXAMPLE COPY:0: fault at ring byte 0: bad packet header 0x00000000000000ff"):
    sim.wait_signal(sig, 1, 1.0)
  assert q.rptr == 40 and peek(at(sig)) == 0   # what was announced is dropped
  # error() explains the failed wait to core (once); the next wait does not raise the fault again
  assert "EXAMPLE COPY:0: fault at ring byte 0" in (sim.error() or "") and sim.error() is None
  submit(q, packet(Op.SIGNAL, at(sig), 2))
  sim.wait_signal(sig, 2, 1.0)

def test_launch_of_a_handle_never_loaded_is_a_fault() -> None:
  sim = SimHCQ("EXAMPLE")
  image, kargs, sig = ctypes.c_uint64(999), ctypes.c_uint64(0), signal()
  submit(sim.queue("COMPUTE:0"), packet(Op.LAUNCH, ctypes.addressof(image), ctypes.addressof(kargs), 0) + packet(Op.SIGNAL, at(sig), 1))
  with pytest.raises(HCQError, match="LAUNCH of program handle 999, which is not loaded"): sim.wait_signal(sig, 1, 1.0)

def test_launch_runs_a_loaded_kernel_with_its_kernargs() -> None:
  from test_queue import compiled_kernel
  sim = SimHCQ("EXAMPLE")
  prg = sim.load_program("k", compiled_kernel().src[4].arg)   # held while it runs: a program nothing holds is unloaded
  a, out = np.arange(8, dtype=np.float32), np.zeros(8, np.float32)
  image = ctypes.c_uint64(prg.handle)
  # k(out, a, n): the buffers' addresses, then n = 6 in the low half of its slot (the high half is not read)
  kargs = (ctypes.c_uint64 * 3)(out.ctypes.data, a.ctypes.data, 0xFFFFFFFF_00000006)
  sig = signal()
  submit(sim.queue("COMPUTE:0"), packet(Op.LAUNCH, ctypes.addressof(image), ctypes.addressof(kargs), 2 | 1 << 32) + packet(Op.SIGNAL, at(sig), 1))
  sim.wait_signal(sig, 1, 1.0)
  np.testing.assert_array_equal(out, [0, 2, 4, 6, 8, 10, 0, 0])

# *** the interface ***

def test_unknown_interface_names_the_choices() -> None:
  from plugin_example.runtime import make_device
  with pytest.raises(ValueError, match=r"EXAMPLE has no interface 'PCI'; choose DIRECT \(the default\) or SIM \(DEV=SIM\+EXAMPLE\)"):
    make_device("EXAMPLE", Target(device="EXAMPLE", interface="PCI"))

# *** whole programs on DEV=SIM+EXAMPLE ***

@pytest.fixture
def sim_dev() -> Iterator[None]:
  saved = os.environ.get("DEV")
  os.environ["DEV"] = "SIM+EXAMPLE"
  Device.reset()
  try: yield
  finally:
    if saved is None: os.environ.pop("DEV", None)
    else: os.environ["DEV"] = saved
    Device.reset()

def test_tensor_program_on_sim_matches_numpy(sim_dev: None) -> None:
  from core import Tensor
  assert Device.DEFAULT == "EXAMPLE" and Device["EXAMPLE"].hcq is iface_sim.sim_hcq("EXAMPLE")
  compute = Device["EXAMPLE"].hcq.queue("COMPUTE:0")
  before = compute.rptr
  rng = np.random.default_rng(0)
  a, b = rng.standard_normal((16, 33)).astype(np.float32), rng.standard_normal((33, 5)).astype(np.float32)
  np.testing.assert_allclose(((Tensor(a) * 2 - 1).relu().sum(axis=1)).numpy(), np.maximum(a * 2 - 1, 0).sum(axis=1), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose((Tensor(a) @ Tensor(b)).numpy(), a @ b, rtol=1e-4, atol=1e-4)
  assert compute.rptr > before   # the kernels ran as packets through the command processor
  # a copy to another instance (its COPY queue waits for the producer's signal), then work there
  x = (Tensor(a) + 1).to("EXAMPLE:1")
  np.testing.assert_allclose((x * 3).numpy(), (a + 1) * 3, rtol=1e-6)
  assert Device["EXAMPLE:1"].hcq.queue("COPY:0").rptr > 0
