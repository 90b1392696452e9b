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
from typing import TYPE_CHECKING
from core.device.hcq import HostRing, HostRingHCQ, PerDevice, peek, poke
from plugin_example.queue import PACKETS, Op

if TYPE_CHECKING:
  from plugin_example.runtime import ExampleProgram

# *** the driver's table of loaded kernels: a LAUNCH's image is a handle into it ***

# the HandleProgramData of the submissions that launch a program holds it, so a program lives while a (cached or captured)
# submission can launch it and is unloaded after; a handle is never reused, so a stale LAUNCH names no program, not another one
_programs: weakref.WeakValueDictionary[int, ExampleProgram] = weakref.WeakValueDictionary()
_by_key: weakref.WeakValueDictionary[tuple[str, bytes], ExampleProgram] = weakref.WeakValueDictionary()
_next_handle = itertools.count(1)   # 0 is no handle: an image never written
_load_lock = threading.Lock()

class SimQueue(HostRing):
  """One queue: core's HostRing (its four buffers, the read pointer, the ring read as a circle) and how this processor reads
  and runs its packets."""
  WAIT = Op.WAIT

  def next_packet(self) -> tuple[Op, tuple[int, ...]]:
    """The packet at the read pointer (ValueError when the words there are no packet)."""
    return PACKETS.next_in(self)

  def step(self) -> bool:
    """Runs the packet at the read pointer. False when there is none (empty queue) or it is a WAIT not satisfied yet."""
    if self.idle(): return False
    try:
      op, fields = self.next_packet()
      if op is Op.WAIT and peek(fields[0]) < fields[1]: return False
      execute(op, fields)
      self.rptr += 8 * (len(fields) + 1)
    except Exception as e: self.fault(f"fault at ring byte {self.rptr}: {e}")   # reported at the next wait
    return True

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

def run_queues() -> bool:
  """Runs packets of every SIM queue, round robin, until no queue can move; True when one did."""
  with _processor_lock:
    any_moved, moved = False, True
    while moved:
      moved = False
      for sim in list(_live):
        for q in list(sim._queues.values()):
          while q.step(): moved = any_moved = True
    return any_moved

class SimHCQ(HostRingHCQ[SimQueue]):
  """The HCQDevice of a SIM+EXAMPLE device. Core's HostRingHCQ gives what every host-ring device shares: the queues (buffers
  made on first use), the buffers pm_bufferize hands out, fault reports and the waits; this driver adds its command processor
  (`_step`, run by the waits) and its program table (`load_program`)."""
  queues = ("COMPUTE:0", "COPY:0")
  kind = "SIM"   # named in fault reports

  def __init__(self, device: str, ring_size: int = 1 << 20):
    super().__init__(device, ring_size)
    _live.add(self)

  def new_queue(self, name: str) -> SimQueue: return SimQueue(self, name)

  # the waits (wait_signal, synchronize) run the processor on the waiting thread; it serves every SIM device's queues, so a
  # wait raises a fault of any of them
  def _step(self) -> bool: return run_queues()
  def _fault_sources(self) -> list[SimHCQ]: return list(_live)

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

_by_device: PerDevice[SimHCQ] = PerDevice()

def sim_hcq(device: str) -> SimHCQ:
  """The SimHCQ of a device instance, one per process like the hardware queues it stands for: a device reopened (Device.reset())
  keeps its queues and signals, which core's cached submissions and host timelines refer to."""
  return _by_device.get(device, lambda: SimHCQ(device))
