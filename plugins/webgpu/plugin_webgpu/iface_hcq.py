"""WEBGPU's HCQ interface: queues in host memory and a software command processor that replays queue.py's packets as wgpu
command-encoder calls.

Core's submit program copies packets into a queue's ring and rings its doorbell (host memory). The processor runs them: on
the thread that waits (`wait_signal`, `synchronize`) and on a small background thread (another device's queue may wait on a
WEBGPU signal while the host waits on that device). LAUNCHes and GPU-to-GPU COPYs are recorded into one command encoder;
it is submitted at a SIGNAL or TIMESTAMP (whose value is written once the submitted work completed), before a copy that
involves host memory, and when the queue runs dry. A replayed schedule sends the same kernel arguments again: their bind
groups are kept (keyed by the program and the argument bytes), so a Jit replay only records set_pipeline, set_bind_group and
dispatch_workgroups per kernel, never a new bind group or uniform for unchanged work."""
from __future__ import annotations
import collections, ctypes, hashlib, itertools, struct, threading, time, traceback, weakref
from typing import Any
from core.device.allocator import BufferSpec
from core.device.buffer import Buffer
from core.device.hcq import HostRing, HostRingHCQ, handle_addr, peek, poke, PerDevice
from plugin_webgpu.gpu import GPU
from plugin_webgpu.queue import DEVICE_BIT, PACKETS, Op
from plugin_webgpu.runtime import WGBuffer, WebGPUProgram, device_addr, read_words, resolve, write_bytes

QUERIES = 512   # timestamp queries per query set: a flush resolves them all

# *** programs loaded by pm_prep_program: a LAUNCH's image holds the handle ***

# a LAUNCH's image holds a handle; the HandleProgramData of the submissions that launch it holds the program, so a program
# nothing can launch any more is dropped (its pipeline with it). Handles are never reused.
_programs: weakref.WeakValueDictionary[int, WebGPUProgram] = weakref.WeakValueDictionary()
_by_key: weakref.WeakValueDictionary[bytes, WebGPUProgram] = weakref.WeakValueDictionary()
_next_handle = itertools.count(1)
_load_lock = threading.Lock()

class Queue(HostRing):
  """One queue: core's HostRing (ring, wptr, doorbell, timeline signal in host memory, the processor's read pointer, the ring
  read as a circle); its device's Processor runs the packets."""
  WAIT = Op.WAIT

  def next_packet(self) -> tuple[Op, tuple[int, ...]]:
    return PACKETS.next_in(self)

class Processor:
  """Replays packets into command encoders. One per device process-wide; `lock` makes one thread run it at a time."""
  def __init__(self, g: GPU):
    # every wgpu call of the process holds g.lock: wgpu-py's error capture and object state are not thread-safe
    self.gpu, self.enc, self.lock = g, None, g.lock
    self.groups: collections.OrderedDict[tuple[int, bytes], Any] = collections.OrderedDict()   # (handle, kernargs) -> bind group
    self.made = 0   # bind groups made (a Jit replay of unchanged work makes none)
    # timestamp queries (adapter feature "timestamp-query"): a TIMESTAMP pair around a LAUNCH becomes the compute pass's
    # begin/end writes into a query set, resolved at the next flush; other TIMESTAMPs read the host clock after completion
    self.queries = "timestamp-query" in g.features
    self.qset: Any = None
    self.q_addrs: list[int] = []        # query index -> the host address its time goes to
    self.begin: int | None = None       # a TIMESTAMP waiting for the LAUNCH after it
    self.end_slot: int | None = None    # the query index the next TIMESTAMP's address fills
    self.timed = 0                      # launches timed by queries

  def encoder(self) -> Any:
    if self.enc is None: self.enc = self.gpu.device.create_command_encoder()
    return self.enc

  def flush(self, wait: bool = False) -> None:
    """Submits what was recorded; `wait`: returns once the GPU finished it (and everything before)."""
    from plugin_webgpu.runtime import wait_idle
    if self.q_addrs and self.end_slot is None: return self.resolve_times()
    if self.enc is not None:
      with self.gpu.lock: self.gpu.device.queue.submit([self.enc.finish()])
      self.enc = None
    if wait: wait_idle(self.gpu)

  def resolve_times(self) -> None:
    """Submits with the query set resolved, waits, and writes each query's time (ns) to its address."""
    g, n = self.gpu, len(self.q_addrs)
    rbuf = g.device.create_buffer(size=8 * n, usage=g.wgpu.BufferUsage.QUERY_RESOLVE | g.wgpu.BufferUsage.COPY_SRC)
    self.encoder().resolve_query_set(self.qset, 0, n, rbuf, 0)
    addrs, self.q_addrs = self.q_addrs, []
    self.flush()
    for addr, t in zip(addrs, struct.unpack(f"<{n}Q", read_words(g, rbuf, 0, 8 * n))): poke(addr, t)

  def timestamp(self, addr: int, next_is_launch: bool) -> None:
    if self.end_slot is not None:
      self.q_addrs[self.end_slot], self.end_slot = addr, None
    elif self.queries and next_is_launch: self.begin = addr
    else:
      self.flush(wait=True)
      poke(addr, time.monotonic_ns())

  def pass_timestamps(self) -> Any:
    """The timestamp_writes of the LAUNCH being recorded, when a TIMESTAMP asked for its start."""
    if self.begin is None: return None
    if self.qset is None: self.qset = self.gpu.device.create_query_set(type="timestamp", count=QUERIES)
    if len(self.q_addrs) + 2 > QUERIES: self.flush(wait=True)
    i = len(self.q_addrs)
    self.q_addrs += [self.begin, 0]
    self.begin, self.end_slot = None, i + 1
    self.timed += 1
    return {"query_set": self.qset, "beginning_of_pass_write_index": i, "end_of_pass_write_index": i + 1}

  def launch(self, image: int, kernargs: int, counts: int) -> None:
    if (prg := _programs.get(handle := peek(image))) is None: raise ValueError(f"LAUNCH of program handle {handle}, which is not loaded")
    nbufs, nvars = counts & 0xffffffff, counts >> 32
    raw = ctypes.string_at(kernargs, 8 * (nbufs + nvars))
    if (bg := self.groups.get(key := (handle, raw))) is None:
      slots = struct.unpack(f"<{nbufs + nvars}Q", raw)
      bufs = tuple(resolve(a) for a in slots[:nbufs])
      bg = self.groups[key] = prg.bind_group(bufs, tuple(ctypes.c_int32(s & 0xffffffff).value for s in slots[nbufs:]))
      self.made += 1
      if len(self.groups) > 4096: self.groups.popitem(last=False)
    else: self.groups.move_to_end(key)
    prg.encode(self.encoder(), (), (), bg, self.pass_timestamps())

  def copy(self, dst: int, src: int, nbytes: int) -> None:
    if dst & DEVICE_BIT and src & DEVICE_BIT and (dst | src | nbytes) & 3 == 0:
      d, s = resolve(dst, nbytes), resolve(src, nbytes)
      self.encoder().copy_buffer_to_buffer(s.buf, s.offset, d.buf, d.offset, nbytes)
      return
    self.flush(wait=not dst & DEVICE_BIT)   # host reads of GPU data wait for the work before; writes are queue-ordered
    if src & DEVICE_BIT:
      s = resolve(src, nbytes)
      lo = s.offset & ~3
      data = bytes(read_words(self.gpu, s.buf, lo, ((s.offset + nbytes + 3) & ~3) - lo)[s.offset - lo:s.offset - lo + nbytes])
    else: data = ctypes.string_at(src, nbytes)
    if dst & DEVICE_BIT: write_bytes(self.gpu, resolve(dst, nbytes), memoryview(data))
    else: ctypes.memmove(dst, data, nbytes)

  def execute(self, op: Op, fields: tuple[int, ...], next_op: Op | None = None) -> None:
    if op is Op.LAUNCH: self.launch(*fields)
    elif op is Op.COPY: self.copy(*fields)
    elif op is Op.SIGNAL:
      self.flush(wait=True)
      poke(fields[0], fields[1])
    elif op is Op.TIMESTAMP: self.timestamp(fields[0], next_op is Op.LAUNCH)

  def step(self, q: Queue) -> bool:
    """Runs the packet at q's read pointer; False when there is none or it is an unsatisfied WAIT (what was recorded is
    submitted then, so the GPU works while the queue waits)."""
    bell = q.doorbell()
    if q.rptr >= bell:
      self.flush()
      return False
    try:
      op, fields = q.next_packet()
      if op is Op.WAIT and peek(fields[0]) < fields[1]:
        self.flush()
        return False
      nxt = q.rptr + 8 * (len(fields) + 1)
      next_op = Op(struct.unpack("<Q", q.ring_bytes(nxt, 8))[0] & 0xff) if op is Op.TIMESTAMP and nxt < bell else None
      self.execute(op, fields, next_op)
      q.rptr = nxt
    except Exception as e:
      self.enc, self.q_addrs, self.begin, self.end_slot = None, [], None, None   # what the faulting submit recorded is dropped
      where = traceback.extract_tb(e.__traceback__)[-1]   # the line that failed: the report names it
      q.fault(f"fault at ring byte {q.rptr}: {type(e).__name__}: {e} ({where.filename}:{where.lineno})")
    return True

class WebGPUHCQ(HostRingHCQ[Queue]):
  """The HCQDevice of a WEBGPU device: core's HostRingHCQ (queues made on first use, the buffers pm_bufferize hands out, faults
  and waits) with one compute queue (copies share it: WebGPU has one queue per device), all its memory host memory, GPU
  buffer addresses, and waits that run the command processor (which a background thread also runs)."""
  queues = ("COMPUTE:0",)
  kind = "WEBGPU"

  def __init__(self, device: str, g: GPU, ring_size: int = 1 << 20):
    super().__init__(device, ring_size)
    self.gpu, self.proc = g, _processor(g)
    _live.add(self)
    _start_background()

  def buffer_spec(self) -> BufferSpec: return BufferSpec(host=True, nolru=True)   # the processor and the host both read it
  def new_queue(self, name: str) -> Queue: return Queue(self, name)
  def needs_staging(self, other_device: str) -> bool: return not other_device.split(":")[0] == "WEBGPU"

  def addr(self, buf: Buffer) -> int:
    if not buf.is_allocated(): buf.allocate()
    return device_addr(buf._buf) if isinstance(buf._buf, WGBuffer) else handle_addr(buf)

  # the processor serves every WEBGPU device's queues, so a wait raises a fault of any of them
  def _step(self) -> bool: return run_queues()
  def _fault_sources(self) -> list[WebGPUHCQ]: return list(_live)

  def synchronize(self, timeout_s: float | None = None) -> None:
    super().synchronize(timeout_s)
    self.proc.flush(wait=True)   # the queues are read: wait for the GPU work they recorded

  # *** what the rules ask ***

  def load_program(self, name: str, lib: bytes) -> WebGPUProgram:
    """The program of (name, WGSL), made once while in use; `handle` is what a LAUNCH names it by."""
    key = hashlib.sha256(name.encode() + b"\0" + lib).digest()
    with _load_lock:
      if (prg := _by_key.get(key)) is None:
        prg = _by_key[key] = WebGPUProgram(name, lib, self.gpu)
        prg.handle = next(_next_handle)
        _programs[prg.handle] = prg
    return prg

# *** running the processor: the waiting thread and a background thread ***

_live: weakref.WeakSet[WebGPUHCQ] = weakref.WeakSet()
_procs: dict[int, Processor] = {}

def _processor(g: GPU) -> Processor:
  if (p := _procs.get(id(g))) is None: p = _procs[id(g)] = Processor(g)
  return p

def run_queues() -> bool:
  """Runs packets of every WEBGPU queue until none can move; True when one did."""
  any_moved, moved = False, True
  while moved:
    moved = False
    for h in list(_live):
      with h.proc.lock:
        for q in list(h._queues.values()):
          while h.proc.step(q): moved = any_moved = True
  return any_moved

_bg_started = False
def _start_background() -> None:
  # another device's queue may wait for a WEBGPU signal while the host thread waits on that device: keep WEBGPU moving
  global _bg_started
  if _bg_started: return
  _bg_started = True
  def loop() -> None:
    idle = 0.0005
    while True:
      try: moved = run_queues()
      except Exception: moved = False   # a fault is stored on its queue and raised by the next wait
      idle = 0.0005 if moved else min(idle * 2, 0.005)
      time.sleep(idle)
  threading.Thread(target=loop, name="webgpu-command-processor", daemon=True).start()

_by_device: PerDevice[WebGPUHCQ] = PerDevice()

def webgpu_hcq(device: str, g: GPU) -> WebGPUHCQ:
  """The WebGPUHCQ of a device instance, one per process like the queues it stands for (a reopened device keeps its queues)."""
  return _by_device.get(device, lambda: WebGPUHCQ(device, g))
