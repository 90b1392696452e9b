"""The METAL queues both interfaces share: each queue's ring, write pointer, doorbell and timeline signal in device memory, the
replay that reads encoder calls (cmdbuf.py) from the rings when the host waits, and the HCQDevice core's pipeline talks to.

Core's submit program copies a command-buffer program into a ring and stores the write pointer into the doorbell (bytes since
the queue was created, wrapping anywhere: RingLayout(unit=1)). Metal's queues belong to its driver, so no processor watches
these rings: the host replays them when it waits (`wait_signal`, `synchronize`), every queue of every METAL device in turn until
none can move (a queue stops at a WAIT whose signal has not arrived; another queue may signal it). An interface supplies the
`Encoder` that performs the calls (MOCK: on the host; MTL: as Metal encoder calls) and loads programs."""
from __future__ import annotations
import contextlib, itertools, threading, weakref
from typing import Any, Iterator, Protocol
from core.device.hcq import HostRing, HostRingHCQ, peek
from plugin_metal.cmdbuf import CALLS, Call
from plugin_metal.icb import COMPUTE_CALLS, GraphState, Icb, commands_of, fits

class Encoder(Protocol):
  """One queue's replay of encoder calls (its bound pipeline and buffers are its state)."""
  def call(self, call: Call, fields: tuple[int, ...]) -> None: ...
  def signal_value(self, addr: int) -> int: ...   # what a WAIT compares: the signal as this interface sees it now
  def flush(self) -> None: ...                     # hand over what was encoded (MTL: commit) before the host stops replaying
  # indirect command buffers (icb.py), for Jit replays
  def build_icb(self, icb: Icb) -> None: ...       # make icb.obj and encode every command of icb.commands into it
  def update_icb(self, icb: Icb, changed: list[int]) -> None: ...   # encode again the commands at these indices
  def execute_icb(self, icb: Icb, start: int, count: int) -> None: ...   # run commands [start, start+count) in one compute encoder

class MetalQueue(HostRing):
  """One queue: core's HostRing (its four buffers, the replay's read pointer, the ring read as a circle) and its encoder."""
  WAIT = Call.WAIT

  def __init__(self, hcq: MetalHCQ, name: str, encoder: Encoder):
    super().__init__(hcq, name)
    self.encoder = encoder
    self.graph: GraphState | None = None   # during a Jit replay: that capture's ICBs on this queue
    self.run: list[tuple[Call, tuple[int, ...]]] = []   # the compute calls read since the last other call (graph replays only)

  def next_packet(self) -> tuple[Call, tuple[int, ...]]:
    return CALLS.next_in(self)

  def step(self) -> bool:
    """Replays the call at the read pointer. False when there is none or it is a WAIT whose signal has not arrived."""
    if self.idle(): return False
    try:
      call, fields = self.next_packet()
      if call is Call.WAIT and self.encoder.signal_value(fields[0]) < fields[1]: return False
      if self.graph is not None and call in COMPUTE_CALLS: self.run.append((call, fields))
      else:
        self.close_run()
        self.encoder.call(call, fields)
      self.rptr += 8 * (len(fields) + 1)
    except Exception as e:
      self.run = []
      self.fault(f"fault at ring byte {self.rptr}: {type(e).__name__}: {e}")   # reported at the next wait
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
    except Exception as e: self.hcq.faults.append(f"{self.device} {self.name}: fault in an indirect command buffer before ring byte {self.rptr}: {type(e).__name__}: {e}")
    self.encoder.flush()


_live: weakref.WeakSet[MetalHCQ] = weakref.WeakSet()
_replay_lock = threading.RLock()   # one host thread replays at a time

def replay_queues() -> bool:
  """Replays encoder calls of every METAL queue, round robin, until no queue can move; then each encoder hands its work over.
  True when a queue moved."""
  with _replay_lock:
    any_moved, moved = False, True
    while moved:
      moved = False
      for hcq in list(_live):
        for q in list(hcq._queues.values()):
          while q.step(): moved = any_moved = True
        for q in list(hcq._queues.values()): q.flush()
    return any_moved

class MetalHCQ(HostRingHCQ[MetalQueue]):
  """The HCQDevice of a METAL device: core's HostRingHCQ (queues made on first use, the buffers pm_bufferize hands out, faults
  and waits) whose waits replay the rings (`_step`), programs loaded by handle (prep.py: a LAUNCH's image is the handle), and
  Jit replays through indirect command buffers. An interface subclass gives `new_encoder(queue)`, `_load(name, lib)` and,
  where it must, `_finish()` (wait for work handed to the GPU)."""
  queues = ("COMPUTE:0", "COPY:0")
  kind = "METAL"

  def __init__(self, device: str, ring_size: int = 1 << 20):
    super().__init__(device, ring_size)
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

  # *** core's HostRingHCQ: its queues, and what its waits run ***

  def new_queue(self, name: str) -> MetalQueue:
    q = MetalQueue(self, name, self.new_encoder(name))
    self._enter_graph(q)   # a queue made during a Jit replay joins it
    return q

  # the host replays every METAL device's queues while it waits, so a wait raises a fault of any of them
  def _step(self) -> bool:
    moved = replay_queues()
    for hcq in list(_live): hcq._finish()
    return moved
  def _fault_sources(self) -> list[MetalHCQ]: return list(_live)

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
