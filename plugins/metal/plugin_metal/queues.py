"""The METAL queues both interfaces share: each queue's ring, write pointer, doorbell and timeline signal in device memory, the
replay that reads encoder calls (cmdbuf.py) from the rings when the host waits, and the HCQDevice core's pipeline talks to.

Core's submit program copies a command-buffer program into a ring and stores the write pointer into the doorbell (bytes since
the queue was created, wrapping anywhere: RingLayout(unit=1)). Metal's queues belong to its driver, so no processor watches
these rings: the host replays them when it waits (`wait_signal`, `synchronize`), every queue of every METAL device in turn until
none can move (a queue stops at a WAIT whose signal has not arrived; another queue may signal it). An interface supplies the
`Encoder` that performs the calls (MOCK: on the host; MTL: as Metal encoder calls) and loads programs."""
from __future__ import annotations
import contextlib, ctypes, itertools, struct, threading, time, weakref
from typing import Any, Callable, Iterator, Protocol
from core.ir.dtype import DType, dtypes
from core.ir.ops import UOp
from core.device.allocator import BufferSpec
from core.device.buffer import Buffer
from core.device.hcq import HCQDevice, RingLayout, handle_addr
from core.hcq import HCQError
from plugin_metal.cmdbuf import Call, decode, packet_words
from plugin_metal.icb import COMPUTE_CALLS, GraphState, Icb, commands_of, fits

def peek(addr: int) -> int: return ctypes.c_uint64.from_address(addr).value
def poke(addr: int, value: int) -> None: ctypes.c_uint64.from_address(addr).value = value

class Encoder(Protocol):
  """One queue's replay of encoder calls (its bound pipeline and buffers are its state)."""
  def call(self, call: Call, fields: tuple[int, ...]) -> None: ...
  def signal_value(self, addr: int) -> int: ...   # what a WAIT compares: the signal as this interface sees it now
  def flush(self) -> None: ...                     # hand over what was encoded (MTL: commit) before the host stops replaying
  # indirect command buffers (icb.py), for Jit replays
  def build_icb(self, icb: Icb) -> None: ...       # make icb.obj and encode every command of icb.commands into it
  def update_icb(self, icb: Icb, changed: list[int]) -> None: ...   # encode again the commands at these indices
  def execute_icb(self, icb: Icb, start: int, count: int) -> None: ...   # run commands [start, start+count) in one compute encoder

class MetalQueue:
  """One queue: its four buffers, the replay's read pointer (bytes since creation, like wptr) and its encoder."""
  def __init__(self, device: str, name: str, ring_size: int, encoder: Encoder):
    self.device, self.name, self.ring_size, self.rptr, self.encoder = device, name, ring_size, 0, encoder
    opts = BufferSpec(nolru=True)   # fresh memory: it must start zeroed
    self.buffers = {"ring": Buffer(device, ring_size // 4, dtypes.uint32, opts).allocate()}
    for kind in ("wptr", "doorbell", "timeline_signal"): self.buffers[kind] = Buffer(device, 1, dtypes.uint64, opts).allocate()
    self.addr = {kind: handle_addr(b) for kind, b in self.buffers.items()}
    self.fault: str | None = None   # the report of a fault no wait has raised yet
    self.graph: GraphState | None = None   # during a Jit replay: that capture's ICBs on this queue
    self.run: list[tuple[Call, tuple[int, ...]]] = []   # the compute calls read since the last other call (graph replays only)

  def ring_bytes(self, off: int, n: int) -> bytes:
    start = off % self.ring_size
    first = min(n, self.ring_size - start)
    return ctypes.string_at(self.addr["ring"] + start, first) + ctypes.string_at(self.addr["ring"], n - first)

  def next_call(self) -> tuple[Call, tuple[int, ...]]:
    header = struct.unpack("<Q", self.ring_bytes(self.rptr, 8))[0]
    (call, fields), = decode(self.ring_bytes(self.rptr, 8 * packet_words(header)))
    return call, fields

  def step(self) -> bool:
    """Replays the call at the read pointer. False when there is none or it is a WAIT whose signal has not arrived."""
    bell = peek(self.addr["doorbell"])
    if self.rptr >= bell: return False
    try:
      call, fields = self.next_call()
      if call is Call.WAIT and self.encoder.signal_value(fields[0]) < fields[1]: return False
      if self.graph is not None and call in COMPUTE_CALLS: self.run.append((call, fields))
      else:
        self.close_run()
        self.encoder.call(call, fields)
      self.rptr += 8 * (len(fields) + 1)
    except Exception as e:
      # a fault: drop what the doorbell announced (later submits run normally), report it at the next wait
      self.fault = f"{self.device} {self.name}: fault at ring byte {self.rptr}: {type(e).__name__}: {e}"
      self.rptr, self.run = bell, []
    return True

  def close_run(self) -> None:
    """Runs the compute calls collected during a Jit replay as the capture's next ICB on this queue: built the first time, else
    the commands that changed encoded again, then executed."""
    if not self.run: return
    calls, self.run = self.run, []
    cmds = commands_of(calls, peek)
    if self.graph is None or not fits(cmds):
      for call, fields in calls: self.encoder.call(call, fields)
      return
    st, key = self.graph, tuple(calls)
    n, st.next = st.next, st.next + 1
    try:
      if n < len(st.icbs) and (icb := st.icbs[n]).calls == key:
        changed = [i for i, (old, new) in enumerate(zip(icb.commands, cmds)) if old != new]
        icb.commands = cmds
        if changed: self.encoder.update_icb(icb, changed)
        icb.encoded += len(changed)
      else:
        icb = Icb(key, cmds)
        self.encoder.build_icb(icb)
        icb.encoded += len(cmds)
        st.icbs[n:n + 1] = [icb]
      self.encoder.execute_icb(icb, 0, len(cmds))
    except Exception:
      del st.icbs[n:]   # a fault: what the ICB holds is unknown, the next replay builds it again
      raise
    icb.executed += 1

  def flush(self) -> None:
    """Runs what a graph replay collected, then hands the encoder's work over."""
    try: self.close_run()
    except Exception as e: self.fault = f"{self.device} {self.name}: fault in an indirect command buffer before ring byte {self.rptr}: {type(e).__name__}: {e}"
    self.encoder.flush()

  def describe(self) -> str:
    if self.rptr >= (bell := peek(self.addr["doorbell"])): return f"{self.name} idle at byte {self.rptr}"
    call, fields = self.next_call()
    if call is not Call.WAIT: return f"{self.name} at byte {self.rptr} of {bell}"
    return f"{self.name} stopped in the WAIT at byte {self.rptr} for signal 0x{fields[0]:x} >= {fields[1]} (it is {peek(fields[0])})"

_live: weakref.WeakSet[MetalHCQ] = weakref.WeakSet()
_replay_lock = threading.RLock()   # one host thread replays at a time

def replay_queues() -> None:
  """Replays encoder calls of every METAL queue, round robin, until no queue can move; then each encoder hands its work over."""
  with _replay_lock:
    moved = True
    while moved:
      moved = False
      for hcq in list(_live):
        for q in list(hcq._queues.values()):
          while q.step(): moved = True
        for q in list(hcq._queues.values()): q.flush()

class MetalHCQ(HCQDevice):
  """The HCQDevice of a METAL device: queues (made on first use), the buffers pm_bufferize hands out, programs loaded by handle
  (prep.py: a LAUNCH's image is the handle), and waits that replay the rings. An interface subclass gives `new_encoder(queue)`,
  `_load(name, lib)` and, where it must, `_finish()` (wait for work handed to the GPU)."""
  queues = ("COMPUTE:0", "COPY:0")
  kind = "METAL"

  def __init__(self, device: str, ring_size: int = 1 << 20):
    if ring_size < 64 or ring_size & (ring_size - 1): raise ValueError(f"{device}: the ring size must be a power of two >= 64, got {ring_size}")
    self.device, self._ring_size = device, ring_size
    self._queues: dict[str, MetalQueue] = {}
    self._lock = threading.Lock()
    self._queue_uops: dict[tuple[str, str], UOp] = {}
    self._owned: weakref.WeakKeyDictionary[UOp, Buffer] = weakref.WeakKeyDictionary()
    # a program lives while a MetalProgramData (in a cached or captured submission) or a direct program holds it; its handle is
    # never reused, so a stale LAUNCH names no program rather than another one (a plain dict kept every program ever loaded)
    self.programs: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
    self._by_key: weakref.WeakValueDictionary[tuple[str, bytes], Any] = weakref.WeakValueDictionary()
    self._handle_of: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
    self._next_handle = itertools.count(1)   # 0 is no handle: an image never written
    # ICBs per Jit capture (the key graph_replay gets) and queue; they go with the capture
    self.graphs: weakref.WeakKeyDictionary[Any, dict[str, GraphState]] = weakref.WeakKeyDictionary()
    self._graph: dict[str, GraphState] | None = None   # the current replay's, while one runs
    _live.add(self)

  # *** the interface's part ***

  def new_encoder(self, queue: str) -> Encoder: raise NotImplementedError(f"{type(self).__name__} has no encoder")
  def _load(self, name: str, lib: bytes) -> Any: raise NotImplementedError(f"{type(self).__name__} loads no programs")
  def _finish(self) -> None: pass

  # *** what core's pipeline asks ***

  def ring_size(self, queue: str) -> int:
    if queue not in self.queues: raise ValueError(f"{self.device} has no queue {queue!r}; its queues are {', '.join(self.queues)}")
    return self._ring_size

  def ring_layout(self, queue: str) -> RingLayout: return RingLayout(unit=1, nop=None)
  def buffer_of(self, u: UOp) -> Buffer | None: return self._owned.get(u)
  def timeline_signal(self, queue: str) -> Buffer | None: return self.queue(queue).buffers["timeline_signal"]

  def wait_signal(self, signal: Buffer, value: int, timeout_s: float) -> None:
    addr = self.addr(signal)
    self._run_until(lambda: peek(addr) >= value, timeout_s, lambda: f"waiting for signal 0x{addr:x} to reach {value}; it is {peek(addr)}")

  def synchronize(self) -> None:
    from core.helpers import HCQ_TIMEOUT
    def idle() -> bool: return all(q.rptr >= peek(q.addr["doorbell"]) for q in self._queues.values())
    self._run_until(idle, float(HCQ_TIMEOUT.value), lambda: "in synchronize")

  def error(self) -> str | None:
    return "\n".join(reports) if (reports := take_faults(list(self._queues.values()))) else None

  @contextlib.contextmanager
  def graph_replay(self, key: object) -> Iterator[None]:
    """A Jit replay: the compute runs its queues replay meanwhile go through the capture's ICBs (queues.MetalQueue.close_run).
    A profiled replay runs its own timed program, whose timestamps want the calls encoded one by one: it is left alone."""
    from core.device import profiler
    if profiler.timing():
      yield
      return
    with _replay_lock:
      self._graph = self.graphs.setdefault(key, {})
      for q in self._queues.values(): self._enter_graph(q)
    try: yield
    finally:
      with _replay_lock:
        for q in self._queues.values():
          q.flush()
          q.graph = None
        self._graph = None

  def _enter_graph(self, q: MetalQueue) -> None:
    if self._graph is None: return
    q.graph = self._graph.setdefault(q.name, GraphState())
    q.graph.next = 0

  # *** what this plugin's rules ask ***

  def load_program(self, name: str, lib: bytes) -> tuple[int, Any]:
    """The handle and program of kernel `name` (its MSL in `lib`), loaded once while in use: the caller holds the program."""
    import hashlib
    key = (name, hashlib.sha256(lib).digest())
    with self._lock:
      if (prg := self._by_key.get(key)) is None:
        prg = self._by_key[key] = self._load(name, lib)
        self._handle_of[prg] = handle = next(self._next_handle)
        self.programs[handle] = prg
      return self._handle_of[prg], prg

  def queue(self, name: str) -> MetalQueue:
    self.ring_size(name)
    with self._lock:
      if (q := self._queues.get(name)) is None:
        q = self._queues[name] = MetalQueue(self.device, name, self._ring_size, self.new_encoder(name))
        self._enter_graph(q)
    return q

  def queue_buffer(self, kind: str, queue: str) -> UOp:
    """The real BUFFER uop of one of a queue's buffers, the same one every time."""
    if (u := self._queue_uops.get((kind, queue))) is None:
      b = self.queue(queue).buffers[kind]
      u = self._queue_uops[(kind, queue)] = UOp.new_buffer(self.device, b.size, b.dtype)
      self._owned[u] = b
    return u

  def fresh_buffer(self, size: int, dtype: DType) -> UOp:
    u = UOp.new_buffer(self.device, size, dtype)
    self._owned[u] = Buffer(self.device, size, dtype, BufferSpec(nolru=True)).allocate()
    return u

  def _run_until(self, done: Callable[[], bool], timeout_s: float, what: Callable[[], str]) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
      replay_queues()
      for hcq in list(_live): hcq._finish()
      if reports := take_faults([q for hcq in list(_live) for q in hcq._queues.values()]):
        raise HCQError(f"{self.device}: replaying the command buffers failed:\n  " + "\n  ".join(reports), device=self.device)
      if done(): return
      if time.monotonic() >= deadline:
        states = "; ".join(q.describe() for q in self._queues.values()) or "none"
        raise HCQError(f"{self.device}: timed out after {timeout_s:g} s (HCQ_TIMEOUT) {what()}. Queues: {states}", device=self.device)
      time.sleep(0.001)

def take_faults(queues: list[MetalQueue]) -> list[str]:
  """The fault reports of `queues` not reported yet; each is reported once."""
  reports = [q.fault for q in queues if q.fault is not None]
  for q in queues: q.fault = None
  return reports
