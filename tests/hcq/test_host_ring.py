"""core.device.hcq's HostRing and HostRingHCQ, the base of the software command processors (EXAMPLE's SIM, METAL, WEBGPU), on a
toy processor over PYTHON memory: queues made once, the ring read as a circle, waits that run the processor, timeouts naming
the queues' state, faults raised at the next wait (also a peer's) and explained once by error()."""
from __future__ import annotations
import ctypes, struct
import pytest
from core.device.buffer import Buffer
from core.device.hcq import HostRing, HostRingHCQ, RingLayout, handle_addr, peek, poke
from core.hcq import HCQError
from core.ir.dtype import dtypes

WAIT, SIGNAL = 1, 2   # toy packets: 3 uint64 words (op, signal address, value)

class ToyRing(HostRing):
  WAIT = WAIT
  def next_packet(self) -> tuple[int, tuple[int, ...]]:
    op, addr, value = struct.unpack("<3Q", self.ring_bytes(self.rptr, 24))
    if op not in (WAIT, SIGNAL): raise ValueError(f"bad op {op}")
    return op, (addr, value)

  def step(self) -> bool:
    if self.idle(): return False
    try:
      op, (addr, value) = self.next_packet()
      if op == WAIT and peek(addr) < value: return False
      if op == SIGNAL: poke(addr, value)
      self.rptr += 24
    except ValueError as e: self.fault(f"fault at ring byte {self.rptr}: {e}")
    return True

class Toy(HostRingHCQ):
  queues, kind = ("COMPUTE:0", "COPY:0"), "TOY"
  peers: list[Toy] = []
  def new_queue(self, name: str) -> ToyRing: return ToyRing(self, name)
  def _step(self) -> bool: return any([q.step() for h in self.peers for q in list(h._queues.values())])
  def _fault_sources(self) -> list[Toy]: return self.peers

def submit(q: HostRing, *packets: tuple[int, int, int]) -> None:
  """What core's submit program does: the words into the ring at wptr (wrapping), then wptr and the doorbell."""
  words, wptr = b"".join(struct.pack("<3Q", *p) for p in packets), peek(q.addr["wptr"])
  for i in range(0, len(words), 8): ctypes.memmove(q.addr["ring"] + (wptr + i) % q.ring_size, words[i:i + 8], 8)
  poke(q.addr["wptr"], wptr + len(words))
  poke(q.addr["doorbell"], wptr + len(words))

def signal() -> tuple[Buffer, int]:
  b = Buffer("PYTHON", 1, dtypes.uint64).allocate()
  poke(handle_addr(b), 0)
  return b, handle_addr(b)

def test_queues_are_made_once_with_zeroed_buffers_and_checked_names() -> None:
  h = Toy("PYTHON", ring_size=256)
  q = h.queue("COPY:0")
  assert h.queue("COPY:0") is q and h.queue_buffer("doorbell", "COPY:0") is q.buffers["doorbell"] and h.timeline_signal("COPY:0") is q.buffers["timeline_signal"]
  assert q.buffers["ring"].nbytes == 256 and all(peek(q.addr[k]) == 0 for k in ("wptr", "doorbell", "timeline_signal"))
  assert h.ring_layout("COPY:0") == RingLayout(unit=1, nop=None) and h.ring_size("COPY:0") == 256
  with pytest.raises(ValueError, match=r"PYTHON has no queue 'COPY:1'; its queues are COMPUTE:0, COPY:0"): h.queue("COPY:1")

def test_a_packet_across_the_ring_end_is_read_as_a_circle() -> None:
  h = Toy("PYTHON", ring_size=64)
  Toy.peers = [h]
  q, (sig, at) = h.queue("COMPUTE:0"), signal()
  q.rptr = 48   # 16 bytes before the end: the packet's last word is at ring byte 0
  poke(q.addr["wptr"], 48)
  submit(q, (SIGNAL, at, 7))
  h.wait_signal(sig, 7, 1.0)
  assert peek(at) == 7 and q.rptr == 72 and q.idle()

def test_timeout_names_the_wait_a_queue_stopped_in() -> None:
  h = Toy("PYTHON")
  Toy.peers = [h]
  (_, at_a), (b, at_b) = signal(), signal()
  submit(h.queue("COMPUTE:0"), (WAIT, at_a, 5), (SIGNAL, at_b, 1))
  with pytest.raises(HCQError, match=rf"PYTHON: timed out after 0.05 s \(HCQ_TIMEOUT\) waiting for signal 0x{at_b:x} to reach 1; it is 0") as e:
    h.wait_signal(b, 1, 0.05)
  assert f"Queues: COMPUTE:0 stopped in the WAIT at byte 0 for signal 0x{at_a:x} >= 5 (it is 0)" in str(e.value)
  with pytest.raises(HCQError, match=r"synchronize timed out: COMPUTE:0 stopped in the WAIT"): h.synchronize(0.05)
  poke(at_a, 5)
  h.synchronize()
  assert peek(at_b) == 1 and h._describe() == "COMPUTE:0 idle at byte 48"

def test_a_fault_is_raised_at_the_next_wait_of_any_peer_and_explained_once() -> None:
  h, other = Toy("PYTHON"), Toy("PYTHON:1")
  Toy.peers = [h, other]
  q, (sig, at) = other.queue("COPY:0"), signal()
  submit(q, (9, 0, 0), (SIGNAL, at, 1))
  with pytest.raises(HCQError, match=r"PYTHON: the TOY command processor reported a fault:\n  PYTHON:1 COPY:0: fault at ring byte 0: bad op 9"):
    h.wait_signal(sig, 1, 1.0)
  assert q.rptr == 48 and peek(at) == 0   # what the doorbell announced is dropped
  assert other.error() == "PYTHON:1 COPY:0: fault at ring byte 0: bad op 9" and other.error() is None
  submit(q, (SIGNAL, at, 2))   # later submits run
  other.wait_signal(sig, 2, 1.0)
