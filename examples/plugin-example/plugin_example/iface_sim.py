"""EXAMPLE's SIM interface (DEV=SIM+EXAMPLE): a simulated driver whose command processor, written in Python, runs queue.py's packets.

What a real driver gives each user-mode queue, here in host memory (EXAMPLE buffers): a ring (`ring_size` bytes), a write
pointer, a doorbell and a timeline signal (one uint64 each). The ring protocol, core's side: the submit program copies a
command buffer into the ring at wptr modulo the ring size (wrapping at the end: RingLayout(unit=1, nop=None)), adds its
length to wptr, then stores wptr into the doorbell, last. wptr and the doorbell count bytes since the queue was created and
never wrap. The processor's side: it reads the packet at its read pointer (same count) while that is below the doorbell.

Hardware runs its queues by itself; this processor runs when the host waits (`wait_signal`, `synchronize`), on the waiting
thread. It serves every queue of every SIM device, round robin, until none can move: a queue is empty or stopped in a WAIT
whose signal has not arrived (another queue, maybe of another device, may write it). A packet it can't run is a fault: the
queue drops what its doorbell announced, and the next wait raises core.hcq.HCQError with the report.
"""
from __future__ import annotations
import ctypes, hashlib, itertools, struct, threading, time, weakref
from typing import TYPE_CHECKING, Callable
from core.ir.dtype import DType, dtypes
from core.ir.ops import UOp
from core.device.allocator import BufferSpec
from core.device.buffer import Buffer
from core.device.hcq import HCQDevice, RingLayout, handle_addr, PerDevice
from core.hcq import HCQError
from plugin_example.queue import Op, decode, packet_words

if TYPE_CHECKING:
  from plugin_example.runtime import ExampleProgram

def peek(addr: int) -> int: return ctypes.c_uint64.from_address(addr).value
def poke(addr: int, value: int) -> None: ctypes.c_uint64.from_address(addr).value = value

# *** the driver's table of loaded kernels: a LAUNCH's image is a handle into it ***

# the ExampleProgramData of the submissions that launch a program holds it, so a program lives while a (cached or captured)
# submission can launch it and is unloaded after; a handle is never reused, so a stale LAUNCH names no program, not another one
_programs: weakref.WeakValueDictionary[int, ExampleProgram] = weakref.WeakValueDictionary()
_by_key: weakref.WeakValueDictionary[tuple[str, bytes], ExampleProgram] = weakref.WeakValueDictionary()
_next_handle = itertools.count(1)   # 0 is no handle: an image never written
_load_lock = threading.Lock()

class SimQueue:
  """One queue: its four buffers and the command processor's read pointer (bytes since creation, like wptr)."""
  def __init__(self, device: str, name: str, ring_size: int):
    self.device, self.name, self.ring_size, self.rptr = device, name, ring_size, 0
    opts = BufferSpec(nolru=True)   # fresh memory: it must start zeroed
    self.buffers = {"ring": Buffer(device, ring_size // 4, dtypes.uint32, opts).allocate()}
    for kind in ("wptr", "doorbell", "timeline_signal"): self.buffers[kind] = Buffer(device, 1, dtypes.uint64, opts).allocate()
    self.addr = {kind: handle_addr(b) for kind, b in self.buffers.items()}
    self.fault: str | None = None   # the report of a fault no wait has raised yet

  def ring_bytes(self, off: int, n: int) -> bytes:
    """`n` bytes of the ring from byte `off` (a read pointer value): the ring is a circle."""
    start = off % self.ring_size
    first = min(n, self.ring_size - start)
    return ctypes.string_at(self.addr["ring"] + start, first) + ctypes.string_at(self.addr["ring"], n - first)

  def next_packet(self) -> tuple[Op, tuple[int, ...]]:
    """The packet at the read pointer (ValueError when the words there are no packet)."""
    header = struct.unpack("<Q", self.ring_bytes(self.rptr, 8))[0]
    (op, fields), = decode(self.ring_bytes(self.rptr, 8 * packet_words(header)))
    return op, fields

  def step(self) -> bool:
    """Runs the packet at the read pointer. False when there is none (empty queue) or it is a WAIT not satisfied yet."""
    bell = peek(self.addr["doorbell"])
    if self.rptr >= bell: return False
    try:
      op, fields = self.next_packet()
      if op is Op.WAIT and peek(fields[0]) < fields[1]: return False
      execute(op, fields)
      self.rptr += 8 * (len(fields) + 1)
    except Exception as e:
      # a fault: drop what the doorbell announced (the queue runs later submits normally), report it at the next wait
      self.fault = f"{self.device} {self.name}: fault at ring byte {self.rptr}: {e}"
      self.rptr = bell
    return True

  def describe(self) -> str:
    """Where the processor is in this queue, for timeout errors."""
    if self.rptr >= (bell := peek(self.addr["doorbell"])): return f"{self.name} idle at byte {self.rptr}"
    op, fields = self.next_packet()
    if op is not Op.WAIT: return f"{self.name} at byte {self.rptr} of {bell}"
    return f"{self.name} stopped in the WAIT at byte {self.rptr} for signal 0x{fields[0]:x} >= {fields[1]} (it is {peek(fields[0])})"

def execute(op: Op, fields: tuple[int, ...]) -> None:
  """What a packet does (a WAIT reaches this only when its signal is there; a BARRIER needs nothing: packets run in order)."""
  if op is Op.LAUNCH:
    image, kernargs, counts = fields
    if (prg := _programs.get(handle := peek(image))) is None: raise ValueError(f"LAUNCH of program handle {handle}, which is not loaded")
    nbufs, nvars = counts & 0xffffffff, counts >> 32
    slots = struct.unpack(f"<{nbufs + nvars}Q", ctypes.string_at(kernargs, 8 * (nbufs + nvars)))
    prg(*slots[:nbufs], vals=tuple(ctypes.c_int32(s & 0xffffffff).value for s in slots[nbufs:]))
  elif op is Op.COPY: ctypes.memmove(fields[0], fields[1], fields[2])
  elif op is Op.SIGNAL: poke(fields[0], fields[1])
  elif op is Op.TIMESTAMP: poke(fields[0], time.monotonic_ns())

# *** the command processor: every queue of every SIM device ***

_live: weakref.WeakSet[SimHCQ] = weakref.WeakSet()   # every SimHCQ: the processor serves all their queues
_processor_lock = threading.Lock()                    # one host thread runs the processor at a time

def run_queues() -> None:
  """Runs packets of every SIM queue, round robin, until no queue can move."""
  with _processor_lock:
    moved = True
    while moved:
      moved = False
      for sim in list(_live):
        for q in list(sim._queues.values()):
          while q.step(): moved = True

class SimHCQ(HCQDevice):
  """The HCQDevice of a SIM+EXAMPLE device: its queues (buffers made on first use), the buffers pm_bufferize hands out, and
  the waits that run the command processor."""
  queues = ("COMPUTE:0", "COPY:0")

  def __init__(self, device: str, ring_size: int = 1 << 20):
    if ring_size < 64 or ring_size & (ring_size - 1): raise ValueError(f"{device}: the ring size must be a power of two >= 64, got {ring_size}")
    self.device, self._ring_size = device, ring_size
    self._queues: dict[str, SimQueue] = {}
    self._lock = threading.Lock()
    self._queue_uops: dict[tuple[str, str], UOp] = {}                            # (kind, queue) -> its real BUFFER uop
    self._owned: weakref.WeakKeyDictionary[UOp, Buffer] = weakref.WeakKeyDictionary()   # every BUFFER uop handed out
    _live.add(self)

  # *** what core's pipeline asks ***

  def ring_size(self, queue: str) -> int:
    if queue not in self.queues: raise ValueError(f"{self.device} has no queue {queue!r}; its queues are {', '.join(self.queues)}")
    return self._ring_size

  def ring_layout(self, queue: str) -> RingLayout:
    """Byte write pointers, and a submit may wrap at the ring's end anywhere: the processor reads the ring as a circle."""
    return RingLayout(unit=1, nop=None)

  def buffer_of(self, u: UOp) -> Buffer | None: return self._owned.get(u)

  def wait_signal(self, signal: Buffer, value: int, timeout_s: float) -> None:
    addr = self.addr(signal)
    self._run_until(lambda: peek(addr) >= value, timeout_s, lambda: f"waiting for signal 0x{addr:x} to reach {value}; it is {peek(addr)}")

  def synchronize(self) -> None:
    from core.helpers import HCQ_TIMEOUT
    def idle() -> bool: return all(q.rptr >= peek(q.addr["doorbell"]) for q in self._queues.values())
    self._run_until(idle, float(HCQ_TIMEOUT.value), lambda: "in synchronize")

  def error(self) -> str | None:
    return "\n".join(reports) if (reports := take_faults(list(self._queues.values()))) else None

  # *** what this plugin's rules ask ***

  def load_program(self, name: str, lib: bytes) -> ExampleProgram:
    """Kernel `name` in the shared object `lib`, loaded once while in use (the caller holds it); `.handle` is what a LAUNCH names."""
    from plugin_example.runtime import ExampleProgram
    key = (name, hashlib.sha256(lib).digest())
    with _load_lock:
      if (prg := _by_key.get(key)) is None:
        prg = _by_key[key] = ExampleProgram(name, lib)
        prg.handle = next(_next_handle)
        _programs[prg.handle] = prg
    return prg

  def queue(self, name: str) -> SimQueue:
    """The queue, its buffers allocated on first use."""
    self.ring_size(name)
    with self._lock:
      if (q := self._queues.get(name)) is None: q = self._queues[name] = SimQueue(self.device, name, self._ring_size)
    return q

  def timeline_signal(self, queue: str) -> Buffer | None: return self.queue(queue).buffers["timeline_signal"]

  def queue_buffer(self, kind: str, queue: str) -> UOp:
    """The real BUFFER uop of one of a queue's buffers (ring, wptr, doorbell, timeline_signal), the same one every time."""
    if (u := self._queue_uops.get((kind, queue))) is None:
      b = self.queue(queue).buffers[kind]
      u = self._queue_uops[(kind, queue)] = UOp.new_buffer(self.device, b.size, b.dtype)
      self._owned[u] = b
    return u

  def fresh_buffer(self, size: int, dtype: DType) -> UOp:
    u = UOp.new_buffer(self.device, size, dtype)
    self._owned[u] = Buffer(self.device, size, dtype, BufferSpec(nolru=True)).allocate()
    return u

  # *** waiting ***

  def _run_until(self, done: Callable[[], bool], timeout_s: float, what: Callable[[], str]) -> None:
    """Runs the processor until `done()`. Raises HCQError on a fault of any SIM queue (the processor serves them all), or after
    `timeout_s` seconds: once nothing moves only another host thread's submit can help, so the wait sleeps between tries."""
    deadline = time.monotonic() + timeout_s
    while True:
      run_queues()
      if reports := take_faults([q for sim in list(_live) for q in sim._queues.values()]):
        raise HCQError(f"{self.device}: the SIM command processor reported a fault:\n  " + "\n  ".join(reports), device=self.device)
      if done(): return
      if time.monotonic() >= deadline:
        states = "; ".join(q.describe() for q in self._queues.values()) or "none"
        raise HCQError(f"{self.device}: timed out after {timeout_s:g} s (HCQ_TIMEOUT) {what()}. Queues: {states}", device=self.device)
      time.sleep(0.001)

def take_faults(queues: list[SimQueue]) -> list[str]:
  """The fault reports of `queues` not reported yet; each is reported once."""
  reports = [q.fault for q in queues if q.fault is not None]
  for q in queues: q.fault = None
  return reports

_by_device: PerDevice[SimHCQ] = PerDevice()

def sim_hcq(device: str) -> SimHCQ:
  """The SimHCQ of a device instance, one per process like the hardware queues it stands for: a device reopened (Device.reset())
  keeps its queues and signals, which core's cached submissions and host timelines refer to."""
  return _by_device.get(device, lambda: SimHCQ(device))
