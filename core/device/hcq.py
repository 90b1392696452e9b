"""The HCQ device contract: what a plugin's runtime offers core's command-queue pipeline (core/hcq), as one typed base class."""
from __future__ import annotations
import abc, atexit, contextlib, ctypes, errno, threading
import numpy as np
from core.helpers import frozen_record
from typing import TYPE_CHECKING, Any, Callable, Generic, Protocol, Sequence, TypeVar

if TYPE_CHECKING:
  from core.device.allocator import BufferSpec
  from core.device.buffer import Buffer
  from core.ir.dtype import DType
  from core.ir.ops import UOp

class HCQError(RuntimeError):
  """A hardware command queue failed: a wait timed out or the device reported a fault. The message names the device,
  the queue, the command (its kind and index in its submit) and the signal value seen versus expected."""
  def __init__(self, msg: str, device: str | None = None, queue: str | None = None, command: str | None = None,
               seen: int | None = None, expected: int | None = None):
    super().__init__(msg)
    self.device, self.queue, self.command, self.seen, self.expected = device, queue, command, seen, expected

def handle_addr(buf: Buffer) -> int:
  """The address behind an allocated Buffer's allocator handle: an int, a ctypes object, or a numpy array (the built-in PYTHON
  device's host memory); allocated now if it is not yet, 0 for a zero-size buffer. A device whose addresses differ from its
  handles' says so in HCQDevice.addr."""
  if not buf.is_allocated(): buf.allocate()
  h = buf._buf
  if h is None: return 0
  if isinstance(h, int): return h
  return int(h.ctypes.data) if isinstance(h, np.ndarray) else ctypes.addressof(h)

@frozen_record
class RingLayout:
  """How a queue's ring takes command words. `unit`: bytes per count of its write pointer and doorbell (1, 2 or 4; a PM4
  queue counts dwords). `nop`: None when a submit's words may wrap from the ring's end to its start anywhere (the command
  processor reads the ring as a circle); else the dword that fills the ring's tail when a submit would not fit before the
  end, so the submit starts again at word 0 and no packet ever wraps (an SDMA engine needs this: it reads a packet's
  dwords in one burst)."""
  unit: int = 1
  nop: int | None = None

class HCQDevice(abc.ABC):
  """The command-queue side of a device, passed as `Compiled(..., hcq=...)`: core's HCQ pipeline runs whole schedules
  through it instead of calling `Compiled.runtime` per kernel. Queue names are "COMPUTE:n" and "COPY:n".

  Write-pointer protocol (what core's submit program does): the write pointer and the doorbell of a queue count units
  (`ring_layout(q).unit`) written since the queue was created and never wrap; the host copies a command buffer into the
  ring at `wptr` modulo the ring size, bumps `wptr`, then stores it into the doorbell, last. Core never puts more than
  `ring_size(q)` bytes of one schedule into a ring and waits for each schedule, so unread words are never overwritten."""
  device: str
  queues: tuple[str, ...]

  @abc.abstractmethod
  def ring_size(self, queue: str) -> int:
    """Bytes in `queue`'s ring (a power of two). Raises ValueError for a queue the device lacks."""

  def ring_layout(self, queue: str) -> RingLayout:
    """How words enter `queue`'s ring (the default: byte write pointers, wrapping anywhere)."""
    return RingLayout()

  @abc.abstractmethod
  def wait_signal(self, signal: Buffer, value: int, timeout_s: float) -> None:
    """Blocks until the uint64 timeline signal in `signal` reaches `value`. Raises core.hcq.HCQError on a device fault or
    when `timeout_s` seconds pass first."""

  def bind_submit_wait(self, fn: Any, args: tuple[int, ...], signal: Buffer, timeline: Any) -> Callable[[float], int] | None:
    """Optional: one call `go(timeout_s)` that runs core's submit program `fn` (a ctypes function of pointer parameters) with
    `args` (their host addresses), then waits as wait_signal(signal, timeline[0] read after the submit, timeout_s) would: an
    eager op submits and waits at once, and one step of the device's own saves the separate waiter's cost. go returns 0: the
    program ran and the signal reached the value, nothing to report; 1: it ran, and core's wait_signal must go on (not there
    yet, or a fault to raise); 2: nothing ran (core submits, then waits, as without it). None (the default): no such step."""
    return None

  def submitted_without_wait(self) -> None:
    """Called after core's submit program rang this device's doorbells when no wait follows (a submission run with
    wait=False): a command processor that does not watch the doorbells while idle (CPU's workers sleep) is told here. The
    default does nothing."""

  def error(self) -> str | None:
    """The device's own report of a fault since the last call (core adds it to the HCQError it raises), or None."""
    return None

  def synchronize(self) -> None:
    """Waits until every queue ran everything its doorbell announced (Compiled.synchronize calls it)."""

  def timeline_signal(self, queue: str) -> Buffer | None:
    """The Buffer holding `queue`'s uint64 timeline signal, for another device whose queue waits on it (a cross-device
    dependency: it reads or maps that memory). None: the signal is not memory another device can reach."""
    return None

  def addr(self, buf: Buffer) -> int:
    """The device address of an allocated Buffer, as command words and kernel arguments carry it."""
    return handle_addr(buf)

  def buffer_of(self, u: UOp) -> Buffer | None:
    """The Buffer behind a BUFFER uop this device's pm_bufferize returned (None: a buffer of the schedule, core knows it)."""
    return None

  def needs_staging(self, other_device: str) -> bool:
    """True when a copy between this device and `other_device` must go through a host staging buffer (no DMA path)."""
    return False

  # bytes a TIMESTAMP command writes at its buffer, the time being the last 8 (NV's semaphore reports are 16: payload, then time)
  timestamp_size: int = 8

  def timestamp_ns(self, ticks: int) -> int:
    """A value a TIMESTAMP command wrote, in nanoseconds (the default: the device writes nanoseconds)."""
    return ticks

  def graph_replay(self, key: object) -> contextlib.AbstractContextManager[None]:
    """Entered by a Jit (core/tensor/jit.py) around each HCQ replay of its capture, on every device it runs on. `key` is
    the same object on every replay of one Jit capture and dies with it. What reaches this device's queues inside the block
    is that capture's command buffers, the same words on every replay; only the kernel arguments the host patched (buffer
    addresses, variable values) differ. A device whose API has device-side graphs may build one from the first replay and
    afterwards only patch and run it (METAL: an indirect command buffer). The default does nothing."""
    return contextlib.nullcontext()

H = TypeVar("H")
E = TypeVar("E", bound=OSError)

class PerDevice(Generic[H]):
  """An interface's HCQ objects, one per device name for the life of the process like the hardware queues they stand for:
  a device reopened (Device.reset()) gets the same object, so the submissions core cached against its rings and signals
  keep working. `on_exit(h)` runs for each at interpreter exit (stopping workers before what they use is torn down)."""
  def __init__(self, on_exit: Callable[[H], None] | None = None):
    self._objs: dict[str, H] = {}
    self._lock = threading.RLock()   # a constructor may look at the other devices' objects
    if on_exit is not None: atexit.register(lambda: [on_exit(h) for h in self.values()])

  def get(self, device: str, make: Callable[[], H], keep: Callable[[H], bool] | None = None) -> H:
    """The object of `device`, made by `make()` when there is none yet or `keep(old)` is False (closed, another arch)."""
    with self._lock:
      if (h := self._objs.get(device)) is None or (keep is not None and not keep(h)): h = self._objs[device] = make()
    return h

  def values(self) -> list[H]:
    with self._lock: return list(self._objs.values())

class PerProcess(Generic[H]):
  """A driver client the kernel keeps one of per process (KFD's process, RM's client), shared by the interface's devices:
  made by `make()` on first use; a `make()` that raises (no driver, no access) raises again on the next use."""
  def __init__(self, make: Callable[[], H]):
    self._make, self._lock = make, threading.Lock()
    self._obj: H | None = None

  def get(self) -> H:
    with self._lock:
      if self._obj is None: self._obj = self._make()
      return self._obj

def node_open_error(error: type[E], device: str, path: str, e: OSError, driver: str, instead: str, denied: str) -> E:
  """The `error` (an OSError subclass) for opening a driver's device node `path` failing with `e`, saying the fix: when there is
  no such node, which kernel `driver` provides it and what to use `instead`; when the user may not open it, what grants access
  (`denied`)."""
  if isinstance(e, FileNotFoundError): return error(errno.ENOENT, f"{device} needs {path} ({driver}); there is none here. {instead}")
  if isinstance(e, PermissionError): return error(errno.EACCES, f"{device}: permission denied opening {path}: {denied}")
  return error(e.errno or errno.EIO, f"{device}: opening {path} failed: {e}")

@frozen_record
class EncodeCtx:
  """The ctx a plugin's pm_lower rules get: the device's HCQ object and the submit being encoded (its device and queue;
  a command's words depend on its queue, e.g. AMD encodes PM4 on COMPUTE and SDMA on COPY)."""
  hcq: HCQDevice
  device: str
  queue: str


# the placeholder kinds with one buffer per (device, queue): a RingHCQ's rings and the words core's submissions write and wait
# on (core.hcq.queue_ir builds the placeholders)
QUEUE_KINDS = ("ring", "wptr", "doorbell", "timeline_signal")

class RingHCQ(HCQDevice):
  """What the HCQ devices whose rings live in memory share (AMD, NV, QCOM; through HostRingHCQ, EXAMPLE's SIM, METAL and
  WEBGPU): fixed queue names, one ring size, the per-queue buffers behind placeholders, fault reports, and host-side
  waits. A plugin's subclass gives `queues`, `kind` and `ring_layout`; an interface's subclass gives `queue_buffer(kind,
  queue)` and the hooks the waits call: `_kick()` (look at the doorbells now), `_step()` (run work on the waiting thread;
  True when something ran), `_busy()` (queues with work left) and `_describe()` (the queues' state, for timeout messages)."""
  kind = "HCQ"   # named in fault reports

  def __init__(self, device: str, ring_size: int = 1 << 20):
    import threading, weakref
    if ring_size < 64 or ring_size & (ring_size - 1): raise ValueError(f"{device}: ring size {ring_size} is not a power of two >= 64")
    self.device, self._ring_size = device, ring_size
    self._lock = threading.RLock()
    self._uops: dict[object, UOp] = {}
    self._owned: weakref.WeakKeyDictionary[UOp, Buffer] = weakref.WeakKeyDictionary()
    self.faults: list[str] = []
    self._seen = {"raised": 0, "read": 0}   # fault reports each reader (a wait's raise, error()) has seen

  def ring_size(self, queue: str) -> int:
    self._check(queue)
    return self._ring_size

  def _check(self, queue: str) -> None:
    if queue not in self.queues: raise ValueError(f"{self.device} has no queue {queue!r}; its queues are {', '.join(self.queues)}")

  # *** buffers behind placeholders (a plugin's pm_bufferize) ***

  def queue_buffer(self, kind: str, queue: str) -> Buffer: raise NotImplementedError(f"{type(self).__name__} has no queue buffers")
  def timeline_signal(self, queue: str) -> Buffer | None: return self.queue_buffer("timeline_signal", queue)

  def buffer_spec(self) -> BufferSpec:
    """The BufferSpec of fresh buffers (and a HostRingHCQ's queue buffers); the default keeps them out of the LRU cache, so
    they start zeroed."""
    from core.device.allocator import BufferSpec
    return BufferSpec(nolru=True)

  def fresh_buffer(self, tag: object, dtype: DType, size: int) -> Buffer:
    """The memory of a placeholder that is not per-queue (programs, kernel arguments, scratch): a new allocation."""
    from core.device.buffer import Buffer
    return Buffer(self.device, max(size, 1), dtype, self.buffer_spec()).allocate()

  def buffer_uop(self, tag: object, dtype: DType, size: int) -> UOp:
    """The real BUFFER uop of a placeholder: per-queue buffers exist once, anything else is a fresh allocation."""
    from core.ir.ops import UOp
    with self._lock:
      if isinstance(tag, tuple) and len(tag) == 2 and tag[0] in QUEUE_KINDS:
        if (u := self._uops.get(tag)) is None:
          b = self.queue_buffer(tag[0], tag[1])
          u = self._uops[tag] = UOp.new_buffer(self.device, b.size, b.dtype)
          self._owned[u] = b
        return u
      u = UOp.new_buffer(self.device, max(size, 1), dtype)
      self._owned[u] = self.fresh_buffer(tag, dtype, size)
      return u

  def buffer_of(self, u: UOp) -> Buffer | None: return self._owned.get(u)

  # *** waits and faults ***

  def _kick(self) -> None: pass
  def _step(self) -> bool: return False
  def _busy(self) -> list[str]: return []
  def _describe(self) -> str: return ""

  # what a wait does first, with no wait to follow. Processors that poll their doorbells (the MOCK and simulated drivers' queue
  # workers, NVK's publisher) look now, not at their next poll 0.2-20 ms later (MOCK+AMD idle 0.6 s, an eager op resubmitted:
  # its signal 2.5 -> 1.0 ms median, 3 us a call); a HostRingHCQ's processor and QCOM's runs on this thread, KGSL gets the words
  def submitted_without_wait(self) -> None:
    self._kick()
    self._step()

  def _unseen(self, reader: str) -> list[str]:
    # error() also returns what a wait raised: core reads it to explain the failed wait
    n = len(self.faults)
    new, self._seen[reader] = self.faults[self._seen[reader]:n], n
    if reader == "read": self._seen["raised"] = n
    return new

  def error(self) -> str | None:
    faults = self._unseen("read")
    return "\n".join(faults) if faults else None

  def _fault_sources(self) -> Sequence[RingHCQ]:
    """The HCQ objects whose faults a wait here raises: its own (a processor serving several devices' queues says all)."""
    return [self]

  def _raise_faults(self) -> None:
    if (faults := [f for h in self._fault_sources() for f in h._unseen("raised")]):
      raise HCQError(f"{self.device}: the {self.kind} command processor reported a fault:\n  " + "\n  ".join(faults), device=self.device)

  def wait_signal(self, signal: Buffer, value: int, timeout_s: float | None = None) -> None:
    import time
    from core.helpers import HCQ_TIMEOUT
    timeout_s = float(HCQ_TIMEOUT.value) if timeout_s is None else timeout_s
    self._kick()
    sig = ctypes.c_uint64.from_address(handle_addr(signal))
    deadline, pause = time.monotonic() + timeout_s, 1e-5
    while True:
      moved = self._step()
      self._raise_faults()
      if sig.value >= value: return
      if time.monotonic() > deadline:
        raise HCQError(f"{self.device}: timed out after {timeout_s:g} s (HCQ_TIMEOUT) waiting for signal {ctypes.addressof(sig):#x} to "
                       f"reach {value}; it is {sig.value}. Queues: {self._describe()}", device=self.device, seen=sig.value, expected=value)
      if not moved:
        time.sleep(pause)
        pause = min(pause * 2, 5e-4)

  def synchronize(self, timeout_s: float | None = None) -> None:
    """Waits until every queue ran everything its doorbell announced."""
    import time
    from core.helpers import HCQ_TIMEOUT
    deadline = time.monotonic() + (float(HCQ_TIMEOUT.value) if timeout_s is None else timeout_s)
    self._kick()
    while True:
      moved, busy = self._step(), self._busy()
      if not moved and not busy: break
      if time.monotonic() > deadline: raise HCQError(f"{self.device}: synchronize timed out: {'; '.join(busy)}", device=self.device)
      if not moved: time.sleep(1e-4)
    self._raise_faults()


def peek(addr: int) -> int:
  """The uint64 at host address `addr` (a signal, a doorbell)."""
  return ctypes.c_uint64.from_address(addr).value

def poke(addr: int, value: int) -> None:
  """Stores the uint64 `value` at host address `addr`."""
  ctypes.c_uint64.from_address(addr).value = value

class HostRing:
  """One queue of a software command processor (EXAMPLE's SIM, METAL, WEBGPU): its ring, write pointer, doorbell and timeline
  signal in memory the host reads, and the processor's read pointer (bytes since the queue was created, like wptr). A
  subclass decodes its packets (`next_packet`, whose op `WAIT` stops a queue) and runs them."""
  WAIT: Any = None   # the op of a WAIT packet, named in describe()

  def __init__(self, hcq: HostRingHCQ[Any], name: str):
    from core.device.buffer import Buffer
    from core.ir.dtype import dtypes
    self.hcq, self.device, self.name, self.ring_size, self.rptr = hcq, hcq.device, name, hcq._ring_size, 0
    spec = hcq.buffer_spec()   # fresh memory: it must start zeroed
    self.buffers = {"ring": Buffer(self.device, self.ring_size // 4, dtypes.uint32, spec).allocate()}
    for kind in QUEUE_KINDS:
      if kind != "ring": self.buffers[kind] = Buffer(self.device, 1, dtypes.uint64, spec).allocate()
    self.addr = {kind: handle_addr(b) for kind, b in self.buffers.items()}

  def doorbell(self) -> int: return peek(self.addr["doorbell"])
  def idle(self) -> bool: return self.rptr >= self.doorbell()

  def ring_bytes(self, off: int, n: int) -> bytes:
    """`n` bytes of the ring from byte `off` (a read pointer value): the ring is a circle (RingLayout(unit=1, nop=None))."""
    start = off % self.ring_size
    first = min(n, self.ring_size - start)
    return ctypes.string_at(self.addr["ring"] + start, first) + ctypes.string_at(self.addr["ring"], n - first)

  def next_packet(self) -> tuple[Any, tuple[int, ...]]:
    """The packet at the read pointer, (op, fields); ValueError when the words there are no packet."""
    raise NotImplementedError(f"{type(self).__name__} decodes no packets")

  def fault(self, report: str) -> None:
    """A packet failed: what the doorbell announced is dropped (later submits run normally), the next wait raises `report`."""
    self.hcq.faults.append(f"{self.device} {self.name}: {report}")
    self.rptr = self.doorbell()

  def describe(self) -> str:
    """Where the processor is in this queue, for timeout errors."""
    if self.rptr >= (bell := self.doorbell()): return f"{self.name} idle at byte {self.rptr}"
    op, fields = self.next_packet()
    if op is not self.WAIT: return f"{self.name} at byte {self.rptr} of {bell}"
    return f"{self.name} stopped in the WAIT at byte {self.rptr} for signal 0x{fields[0]:x} >= {fields[1]} (it is {peek(fields[0])})"

Q = TypeVar("Q", bound=HostRing)

class HCQQueue(Protocol):
  """One queue of a QueuedHCQ: its buffers by kind (QUEUE_KINDS) and where it is, for timeout errors."""
  buffers: dict[str, Buffer]
  def describe(self) -> str: ...

A = TypeVar("A", bound=HCQQueue)

class QueuedHCQ(RingHCQ, Generic[A]):
  """A RingHCQ whose queues are objects of type A (their `buffers` by kind and `describe()`), made on first use by
  `new_queue(name)`: HostRingHCQ's and WorkerQueuesHCQ's shared part."""
  def __init__(self, *args: Any, **kwargs: Any):
    super().__init__(*args, **kwargs)
    self._queues: dict[str, A] = {}

  def new_queue(self, name: str) -> A:
    """A new queue `name` (called once per queue, under the lock)."""
    raise NotImplementedError(f"{type(self).__name__} makes no queues")

  def queue(self, name: str) -> A:
    """The queue `name`, made on first use."""
    self._check(name)
    with self._lock:
      if (q := self._queues.get(name)) is None: q = self._queues[name] = self.new_queue(name)
    return q

  def queue_buffer(self, kind: str, queue: str) -> Buffer: return self.queue(queue).buffers[kind]
  def _describe(self) -> str: return "; ".join(q.describe() for q in list(self._queues.values())) or "none"

class HostRingHCQ(QueuedHCQ[Q]):
  """A QueuedHCQ whose queues are HostRings of type Q, read by a software processor that runs when the host waits or submits
  with no wait to follow (the hook `_step`). A subclass gives `queues`, `kind`, `new_queue(name)` and `_step`; `buffer_spec()` where its memory is special
  (all its buffers use it)."""
  def ring_layout(self, queue: str) -> RingLayout:
    """Byte write pointers, and a submit may wrap at the ring's end anywhere: the processor reads the ring as a circle."""
    return RingLayout(unit=1, nop=None)

  def _busy(self) -> list[str]: return [q.describe() for q in list(self._queues.values()) if not q.idle()]

class WorkerQueue(HCQQueue, Protocol):
  """A queue served by its own worker thread (the MOCK+AMD and MOCK+NV queues), as WorkerQueuesHCQ uses it."""
  @property
  def closed(self) -> bool: ...
  @property
  def thread(self) -> threading.Thread: ...
  @property
  def kick(self) -> threading.Event: ...
  def start(self) -> None: ...
  def busy(self) -> bool: ...
  def close(self) -> None: ...

W = TypeVar("W", bound=WorkerQueue)

class WorkerQueuesHCQ(QueuedHCQ[W]):
  """A QueuedHCQ whose queues are WorkerQueues of type W. A mixin in front of the plugin's RingHCQ subclass
  (`class MockHCQ(WorkerQueuesHCQ[MockChannel], NVHCQ)`); the interface gives `new_queue(name)`."""
  def queue_timeout_s(self) -> float:
    """How long a queue's own WAIT waits: longer than the host's wait, which reports the timeout (and releases the WAIT) first."""
    from core.helpers import HCQ_TIMEOUT
    return 3 * float(HCQ_TIMEOUT.value)

  def queue(self, name: str) -> W:
    """The queue `name`, made on first use; its worker started again in a forked child, which has none of the parent's threads."""
    if (q := self._queues.get(name)) is not None:
      if not q.thread.is_alive() and not q.closed:
        with self._lock:
          if not q.thread.is_alive(): q.start()
      return q
    return super().queue(name)

  def _kick(self) -> None:
    for name in self.queues: self.queue(name).kick.set()
  def _busy(self) -> list[str]:
    busy = []
    for q in list(self._queues.values()):
      q.kick.set()
      if q.busy(): busy.append(q.describe())
    return busy

  def close(self) -> None:
    with self._lock:
      for q in self._queues.values(): q.close()
      self._queues.clear()
      self._uops.clear()
