"""The CPU's HCQ interface: the device's queues (rings, doorbells, signals, worker threads) run by the native command processor.

Queues and the ring protocol: each device instance ("CPU", "CPU:1") has the queues COMPUTE:0 and COPY:0, each with a ring
(`ring_size` bytes, a power of two, placeholder dtype uint32), a wptr, a doorbell and a timeline signal (one uint64 each). wptr
and doorbell count BYTES written since the queue was created and never wrap: the host copies a command buffer to
ring[wptr % ring_size] onwards (wrapping at the end), adds its length to wptr, then stores the new wptr into the doorbell. The
worker runs packets until its read offset reaches the doorbell. The host must keep wptr - rptr <= ring_size (`ring_space`).

Host draining: a queue is run by whoever owns it at the moment, its worker or a host thread inside `wait_signal` (or
`synchronize`), which runs the packets nobody runs yet on its own thread before it waits; a worker leaves new packets to the
host for a short while (native/cmdproc.c). A submit followed by a wait thus costs no thread wake-up, microseconds instead of
hundreds on a busy machine; work nobody waits for still runs on the worker.
"""
from __future__ import annotations
import atexit, ctypes, functools, os, threading, time, weakref
from typing import Any, Callable
from core.ir.dtype import DType, dtypes
from core.ir.ops import UOp
from core.device.allocator import BufferSpec
from core.device.buffer import Buffer
from core.device.hcq import HCQDevice, PerDevice
from core.hcq import HCQError
from core.helpers import getenv

# *** the native command processor ***

# the library's CPython entries (submit_wait, idle_clean: plugin_cpu.native.python_entries), set when native() loads it; None
# until then and where the library has none (the ctypes calls are used)
_entries: Any = None

@functools.cache
def native() -> ctypes.CDLL:
  """The plugin's native library (native.py builds it) with the command processor's functions declared."""
  global _entries
  from plugin_cpu.native import lib, python_entries
  dll = lib()
  _entries = python_entries()
  c_u64, c_vp = ctypes.c_uint64, ctypes.c_void_p
  for name, args, res in (("cmdproc_create", [ctypes.c_char_p, c_vp, c_u64, c_vp], c_vp), ("cmdproc_destroy", [c_vp], None),
                          ("cmdproc_rptr", [c_vp], c_u64), ("cmdproc_kick", [], None), ("cmdproc_abort_wait", [c_vp], None),
                          ("cmdproc_error", [c_vp, ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(c_u64), ctypes.POINTER(ctypes.c_uint32)], c_u64),
                          ("cmdproc_describe", [c_vp, ctypes.c_char_p, ctypes.c_int], None),
                          ("cmdproc_faults", [], c_u64), ("cmdproc_drain", [], ctypes.c_int), ("cmdproc_pending", [], ctypes.c_int),
                          ("cmdproc_wait_signal", [c_vp, c_u64, ctypes.c_int64, c_u64, ctypes.c_int64], ctypes.c_int),
                          ("cmdproc_wait_clean", [c_vp, c_u64, ctypes.c_int64, c_u64, ctypes.c_int64], ctypes.c_int),
                          ("cmdproc_interrupt", [c_vp, ctypes.c_int], ctypes.c_int),
                          ("cmdproc_idle_clean", [c_u64], ctypes.c_int), ("cmdproc_set_handoff", [c_u64], c_u64)):
    fn = getattr(dll, name)
    fn.argtypes, fn.restype = args, res
  return dll

def hcq_timeout() -> float:
  from core.helpers import HCQ_TIMEOUT
  return float(HCQ_TIMEOUT.value)

def buffer_addr(b: Buffer) -> int:
  if not b.is_allocated(): b.allocate()
  return ctypes.addressof(b._buf)

class CPUQueue:
  """One queue's memory (ring, wptr, doorbell, timeline signal: CPU buffers) and its worker thread."""
  def __init__(self, device: str, name: str, ring_size: int):
    self.device, self.name, self.ring_size = device, name, ring_size
    opts = BufferSpec(nolru=True)   # never memory another buffer used: it must start zeroed
    self.buffers: dict[str, Buffer] = {"ring": Buffer(device, ring_size // 4, dtypes.uint32, opts).allocate()}
    for kind in ("wptr", "doorbell", "timeline_signal"): self.buffers[kind] = Buffer(device, 1, dtypes.uint64, opts).allocate()
    self.handle: int | None = None
    self._views: dict[str, memoryview] = {}   # uint64 views of wptr, doorbell, timeline_signal (read often)
    self.start()

  def start(self) -> None:
    """Starts the worker (again, after close() or in a forked child); it resumes at the doorbell, on the same buffers."""
    if self.handle: return
    self.handle = native().cmdproc_create(f"{self.device} {self.name}".encode(), buffer_addr(self.buffers["ring"]), self.ring_size,
                                          buffer_addr(self.buffers["doorbell"]))
    if not self.handle: raise RuntimeError(f"{self.device}: could not start the command processor of queue {self.name}")
    self.seen = {"raised": 0, "read": 0}   # faults reported so far, by reader (see CPUHCQ._unreported)

  def value(self, kind: str) -> int:
    if (v := self._views.get(kind)) is None: v = self._views[kind] = self.buffers[kind].as_buffer().cast("Q")
    return int(v[0])
  def rptr(self) -> int:
    if not self.handle: raise RuntimeError(f"{self.device} {self.name}: the command processor is stopped")
    return int(native().cmdproc_rptr(self.handle))
  def describe(self) -> str:
    if not self.handle: return f"{self.device} {self.name} is stopped"
    buf = ctypes.create_string_buffer(512)
    native().cmdproc_describe(self.handle, buf, len(buf))
    return buf.value.decode()
  def fault(self) -> tuple[int, str, int, int]:
    """(number of faults so far, the latest report, its packet offset, its opcode)."""
    if not self.handle: return self.seen["read"], "", 0, 0
    buf, off, op = ctypes.create_string_buffer(512), ctypes.c_uint64(), ctypes.c_uint32()
    n = native().cmdproc_error(self.handle, buf, len(buf), ctypes.byref(off), ctypes.byref(op))
    return int(n), buf.value.decode(), off.value, op.value
  def interrupt(self, timeout: bool) -> bool:
    """Stops the kernel this queue runs now, on whichever thread (reported as a fault of that packet); False if none runs."""
    return bool(self.handle) and bool(native().cmdproc_interrupt(self.handle, int(timeout)))
  def close(self) -> None:
    if self.handle: native().cmdproc_destroy(self.handle)
    self.handle = None

# a wait first tries this long without reading fault reports (the usual case: the host runs the packets itself, microseconds)
FAST_SLICE_NS = 2_000_000
FAST_SLICE_S = FAST_SLICE_NS / 1e9
_FAST_SLICE = ctypes.c_int64(FAST_SLICE_NS)

def _untyped(name: str) -> Any:
  # indexing makes a new function object: native().<name> keeps its argtypes
  fn = native()[name]
  fn.restype = ctypes.c_int
  return fn

@functools.cache
def _wait_clean() -> Any:
  """cmdproc_wait_clean without argtypes, for the wait of every submit: its callers pass ctypes objects (signal pointer,
  uint64 value, int64 slice, uint64 fault count, int64 deadline), which ctypes hands on without per-argument conversion."""
  return _untyped("cmdproc_wait_clean")

class _SubmitWait(ctypes.Structure):
  """native/cmdproc.c's cmdproc_submit: core's submit program, its pointer arguments, the signal and host timeline value to wait
  for, the fast slice and the whole wait's timeout."""
  _fields_ = [("fn", ctypes.c_void_p), ("nargs", ctypes.c_int64), ("args", ctypes.c_void_p * 8), ("signal", ctypes.c_void_p),
              ("timeline", ctypes.c_void_p), ("slice_ns", ctypes.c_int64), ("timeout_ns", ctypes.c_int64)]
SUBMIT_WAIT_ARGS = 8   # CMDPROC_SUBMIT_ARGS

@functools.cache
def _submit_wait() -> Any:
  """cmdproc_submit_wait without argtypes: called with the _SubmitWait's address (a c_void_p) and the fault mark (a c_uint64)."""
  return _untyped("cmdproc_submit_wait")

@functools.cache
def _idle_clean() -> Any:
  """cmdproc_idle_clean without argtypes (synchronize after every eager op): called with the fault count as a c_uint64."""
  return _untyped("cmdproc_idle_clean")

_live: weakref.WeakSet[CPUHCQ] = weakref.WeakSet()

class CPUHCQ(HCQDevice):
  """The HCQDevice of a CPU device: its queues (started on first use), the buffers its placeholders map to, waits and faults."""
  queues = ("COMPUTE:0", "COPY:0")

  def __init__(self, device: str, ring_size: int | None = None):
    self.device = device
    self._ring_size = ring_size or int(getenv("CPU_HCQ_RING", 1 << 20))
    if self._ring_size < 64 or self._ring_size & (self._ring_size - 1):
      raise ValueError(f"{device}: the HCQ ring size must be a power of two >= 64 bytes, got {self._ring_size} (CPU_HCQ_RING)")
    self._queues: dict[str, CPUQueue] = {}
    self._lock = threading.Lock()
    self._uops: dict[Any, UOp] = {}                                   # placeholder tag -> the real BUFFER uop of a queue buffer
    self._owned: weakref.WeakKeyDictionary[UOp, Buffer] = weakref.WeakKeyDictionary()  # every real BUFFER uop this object made
    self._fault_mark = -1   # the process-wide fault count when wait_signal last found nothing unreported (-1: never looked)
    self._mark_arg: ctypes.c_uint64 | None = None   # _fault_mark as the native calls' argument, made once per change (None: -1)
    self._running = False   # every queue's worker is started (until close() or a fork)
    self._signal_ptrs: dict[int, tuple[Any, ctypes.c_void_p]] = {}   # id(signal memory) -> (it, its address as a pointer)
    _live.add(self)

  def ring_size(self, queue: str) -> int:
    self._check_queue(queue)
    return self._ring_size

  def _check_queue(self, queue: str) -> None:
    if queue not in self.queues: raise ValueError(f"{self.device} has no queue {queue!r}; its queues are {', '.join(self.queues)}")

  def queue(self, name: str) -> CPUQueue:
    """The queue, its buffers allocated and its worker started on first use (and restarted after close() or a fork)."""
    if (q := self._queues.get(name)) is not None and q.handle: return q
    self._check_queue(name)
    with self._lock:
      if (q := self._queues.get(name)) is None: q = self._queues[name] = CPUQueue(self.device, name, self._ring_size)
      q.start()
    return q

  def ring_space(self, queue: str) -> int:
    """Bytes the host may write into the ring now without overwriting packets the worker has not read yet."""
    q = self.queue(queue)
    return self._ring_size - (q.value("wptr") - q.rptr())

  # *** buffers behind placeholders ***

  def buffer_uop(self, tag: Any, dtype: DType, size: int) -> UOp:
    """The real BUFFER uop for placeholder tag `tag`: per-queue buffers are made once, anything else is a fresh allocation."""
    if isinstance(tag, tuple) and len(tag) == 2 and tag[0] in ("ring", "wptr", "doorbell", "timeline_signal"):
      if (u := self._uops.get(tag)) is None:
        b = self.queue(tag[1]).buffers[tag[0]]
        u = self._uops[tag] = UOp.new_buffer(self.device, b.size, b.dtype)
        self._owned[u] = b
      return u
    u = UOp.new_buffer(self.device, size, dtype)
    self._owned[u] = Buffer(self.device, size, dtype, BufferSpec(nolru=True)).allocate()
    return u

  def timeline_signal(self, queue: str) -> Buffer | None: return self.queue(queue).buffers["timeline_signal"]

  def buffer_of(self, u: UOp) -> Buffer | None:
    """The Buffer behind a BUFFER uop that pm_bufferize returned (None for any other uop)."""
    return self._owned.get(u)

  # *** waiting and faults ***

  def _unreported(self, reader: str = "raised") -> list[tuple[CPUQueue, str]]:
    # each reader (wait_signal's raise, error()) sees every fault once; error() also covers what a wait is about to raise
    out = []
    for q in list(self._queues.values()):
      if not q.handle: continue
      n, report, _, _ = q.fault()
      if n != q.seen[reader]:
        out.append((q, report + (f" (and {n - q.seen[reader] - 1} earlier fault(s))" if n - q.seen[reader] > 1 else "")))
        q.seen[reader] = n
        if reader == "read": q.seen["raised"] = n
    return out

  def error(self) -> str | None:
    """The faults the device reported that error() has not returned yet, one per line (a wait_signal that raised for a fault
    does not hide it from error(), which core reads to explain a failed wait); None if there are none."""
    faults = self._unreported("read")
    return "\n".join(r for _, r in faults) if faults else None

  def _raise_faults(self, faults: list[tuple[CPUQueue, str]]) -> None:
    raise HCQError(f"{self.device}: the command processor reported a fault:\n  " + "\n  ".join(r for _, r in faults),
                   device=self.device, queue=faults[0][0].name)

  def wait_signal(self, signal_buf: Buffer, value: int, timeout_s: float | None = None) -> None:
    """Blocks until the uint64 at `signal_buf` is >= value. Raises HCQError when a queue of this device reports a fault (also
    when the signal arrived: the work it covers may be incomplete) or after `timeout_s` (default HCQ_TIMEOUT); on a timeout a
    queue blocked in a WAIT gives it up and a kernel still running is stopped, so the device keeps running later submits.
    The deadline holds also while this thread runs the kernel itself (host draining): the queue's worker stops it then.
    Ctrl-C during the wait stops the running kernels too (their reports are consumed) and raises KeyboardInterrupt."""
    try:
      # the fast path of every submit (_wait_signal's first step) without its frame and setup: the queues run, the signal's pointer
      # is made, no fault since the last look, and the signal arrives within a short slice
      if self._running and (mark := self._mark_arg) is not None and timeout_s is not None and timeout_s >= FAST_SLICE_S:
        try: h = signal_buf._buf
        except AttributeError: h = None
        if (ptr := self._signal_ptrs.get(id(h))) is not None and ptr[0] is h:
          if _wait_clean()(ptr[1], ctypes.c_uint64(value), _FAST_SLICE, mark, ctypes.c_int64(time.monotonic_ns() + int(timeout_s * 1e9))) == 0: return
          self._wait_signal(signal_buf, value, timeout_s, fast=False)   # a fault, or not there yet: the general wait, without this try
          return
      self._wait_signal(signal_buf, value, timeout_s)
    except KeyboardInterrupt:
      self._stop_kernels(timeout=False)
      raise

  def submitted_without_wait(self) -> None:
    """Wakes the sleeping workers (a no-op when none sleeps) to run what core's submit program rang in, since no wait will."""
    native().cmdproc_kick()

  def bind_submit_wait(self, fn: Any, args: tuple[Any, ...], signal: Buffer, timeline: Any) -> Callable[[float], int] | None:
    """The submit program and wait_signal's fast path in one native call (cmdproc_submit_wait), its arguments filled in once:
    the eager op's submit and wait cost one ctypes call, not two, and build no argument per call."""
    if len(args) > SUBMIT_WAIT_ARGS or not signal.is_allocated(): return None
    s = _SubmitWait(fn=ctypes.cast(fn, ctypes.c_void_p).value, nargs=len(args), signal=ctypes.addressof(signal._buf),
                    timeline=ctypes.addressof(timeline), slice_ns=FAST_SLICE_NS)
    for i, a in enumerate(args): s.args[i] = a
    native()   # loaded, and _entries with it
    last, keep = [-1.0], (fn, args, signal._buf, timeline, s)   # keep: `s` and what it points at
    # the CPython entry takes the address and the fault count as Python ints; ctypes takes prebuilt ctypes objects (_mark_arg)
    entry = (entries := _entries) is not None
    ptr, call = (ctypes.addressof(s), entries.submit_wait) if entry else (ctypes.c_void_p(ctypes.addressof(s)), _submit_wait())
    def submit_wait(timeout_s: float, _keep: tuple = keep) -> int:
      # as wait_signal's fast path: the queues run and the fault reports were looked at (else the general wait does that)
      if not self._running or self._fault_mark < 0 or timeout_s < FAST_SLICE_S: return 2
      if timeout_s != last[0]: s.timeout_ns, last[0] = int(timeout_s * 1e9), timeout_s
      try: return 1 if call(ptr, self._fault_mark if entry else self._mark_arg) else 0   # -1 can't happen: the arguments were counted above
      except KeyboardInterrupt:
        self._stop_kernels(timeout=False)
        raise
    return submit_wait

  def _stop_kernels(self, timeout: bool) -> None:
    """Stops the kernels this device's queues run now and waits (up to 1 s) for their reports, which are then consumed: they
    belong to the error being raised, not to a later wait."""
    stopped = [(q, q.fault()[0]) for q in list(self._queues.values()) if q.interrupt(timeout)]
    until = time.monotonic() + 1.0
    for q, n in stopped:
      while q.fault()[0] == n and time.monotonic() < until: time.sleep(0.001)
    self._unreported("read")

  def _wait_signal(self, signal_buf: Buffer, value: int, timeout_s: float | None, fast: bool = True) -> None:
    if not self._running:   # a signal may be written by any queue: make sure they all run
      for name in self.queues: self.queue(name)
      self._running = True
    h = getattr(signal_buf, "_buf", None)
    if (ptr := self._signal_ptrs.get(id(h))) is None or ptr[0] is not h:
      # the signal's address as a ctypes pointer, made once per signal memory (the handle is kept: its id stays its own)
      h = (signal_buf if h is not None else signal_buf.allocate())._buf
      ptr = (h, ctypes.c_void_p(ctypes.addressof(h)))
      if len(self._signal_ptrs) >= 64: self._signal_ptrs = {}   # a signal in other memory every call: stays bounded
      self._signal_ptrs[id(h)] = ptr
    # the fast path of every submit: no fault anywhere since this object last looked, and the signal arrives within a short
    # slice (the native wait runs the submitted packets on this thread when no worker has them); no report is read then.
    # One native call checks the fault count before and after the wait.
    timeout_s = hcq_timeout() if timeout_s is None else timeout_s
    # when the wait gives up, as CLOCK_MONOTONIC ns (time.monotonic's clock): a kernel this thread runs itself is stopped then
    deadline_ns = time.monotonic_ns() + (timeout_ns := int(timeout_s * 1e9))
    if fast and (mark := self._mark_arg) is not None:
      # called without argtypes, its arguments ctypes objects: ~0.2 us less than the conversion through argtypes
      fast_ns = _FAST_SLICE if timeout_ns >= FAST_SLICE_NS else ctypes.c_int64(max(0, timeout_ns))
      if _wait_clean()(ptr[1], ctypes.c_uint64(value), fast_ns, mark, ctypes.c_int64(deadline_ns)) == 0: return
    lib, addr = native(), ptr[1].value or 0
    deadline = deadline_ns / 1e9
    while True:
      # short slices: ctypes drops the GIL during the call, and Ctrl-C is handled between slices
      snapshot = lib.cmdproc_faults()   # read before the reports are checked: a fault recorded after it ends the wait
      if (faults := self._unreported()): self._raise_faults(faults)
      self._set_mark(snapshot)          # every fault up to the snapshot is now reported
      left = deadline - time.monotonic()
      ret = lib.cmdproc_wait_signal(addr, value, int(max(0.0, min(left, 0.1)) * 1e9), snapshot, deadline_ns) if left > 0 else 1
      if ret == 0:
        if (faults := self._unreported()): self._raise_faults(faults)
        return
      if ret == 1 and time.monotonic() >= deadline: break
    seen = int(signal_buf.as_buffer().cast("Q")[0]) if signal_buf.nbytes >= 8 else -1
    states = [q.describe() for q in self._queues.values()]
    faults = self._unreported()
    if faults: self._raise_faults(faults)
    self._stop_kernels(timeout=True)   # a kernel a worker still runs: stopped, so later submits don't queue behind it
    # give up the WAITs that block a queue, so later submits run; their "aborted" reports belong to this error
    blocked = [q for q in self._queues.values() if "blocked in the WAIT" in q.describe()]
    for q in blocked:
      n = q.fault()[0]
      lib.cmdproc_abort_wait(q.handle)
      until = time.monotonic() + 1.0
      while q.fault()[0] == n and time.monotonic() < until: time.sleep(0.001)
    self._unreported("read")   # the aborted WAITs are this timeout, not faults to report later
    raise HCQError(f"{self.device}: timed out after {timeout_s:g} s (HCQ_TIMEOUT) waiting for signal 0x{addr:x} to reach {value}; it is "
                   f"{seen}. Queues: " + "; ".join(states) + (f". Gave up the WAIT of {', '.join(q.name for q in blocked)}" if blocked else ""),
                   device=self.device, queue=blocked[0].name if blocked else None, seen=seen, expected=value)

  def _set_mark(self, snapshot: int) -> None:
    self._fault_mark, self._mark_arg = snapshot, ctypes.c_uint64(snapshot)

  def synchronize(self, timeout_s: float | None = None) -> None:
    """Waits until every started queue has run everything its doorbell announced."""
    # the usual case in one native call: nothing pending anywhere and no fault since the last look (an eager op waited already)
    if (mark := self._fault_mark) >= 0 and (_entries.idle_clean(mark) if _entries is not None else _idle_clean()(self._mark_arg)): return
    lib = native()
    queues = [q for q in self._queues.values() if q.handle]
    # one native call when nothing is pending on any queue of the process (an eager op's result was waited for already)
    if lib.cmdproc_pending() != 0 and any(q.rptr() != q.value("doorbell") for q in queues):
      # run what nobody runs yet on this thread (host draining), then wake the workers for what is left (a WAIT)
      lib.cmdproc_drain()
      lib.cmdproc_kick()
      deadline = time.monotonic() + (hcq_timeout() if timeout_s is None else timeout_s)
      for q in queues:
        while q.handle and q.rptr() != q.value("doorbell"):
          if time.monotonic() > deadline: raise HCQError(f"{self.device}: synchronize timed out: {q.describe()}", device=self.device, queue=q.name)
          time.sleep(0.0002)
    # the reports are read only when some queue of the process recorded a fault since the last look
    snapshot = lib.cmdproc_faults()
    if snapshot != self._fault_mark:
      faults = self._unreported()
      self._set_mark(snapshot)
      if faults: self._raise_faults(faults)

  def close(self) -> None:
    """Stops and joins the workers; the buffers stay, and a later use starts the workers again where they stopped."""
    with self._lock:
      self._running = False
      for q in self._queues.values(): q.close()

  def _forget(self) -> None:
    # in a forked child the workers do not exist (nor may the parent's lock states be trusted): drop the handles untouched
    self._lock = threading.Lock()
    self._running = False
    for q in self._queues.values(): q.handle = None

  def __del__(self) -> None:
    try: self.close()
    except Exception: pass   # interpreter shutdown

_by_device: PerDevice[CPUHCQ] = PerDevice()

def device_hcq(device: str) -> CPUHCQ:
  """The HCQ object of a device instance, one per process like the hardware queues it stands for: reopening the device (e.g.
  after Device.reset()) gets the same queues, so submissions core cached against their rings and signals keep working."""
  return _by_device.get(device, lambda: CPUHCQ(device))

def _close_all() -> None:
  for h in list(_live): h.close()
atexit.register(_close_all)
def _forget_all() -> None:
  for h in list(_live): h._forget()
if hasattr(os, "register_at_fork"): os.register_at_fork(after_in_child=_forget_all)
