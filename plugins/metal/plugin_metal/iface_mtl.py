"""METAL's MTL interface (DEV=METAL on macOS): shared-storage MTLBuffers, pipelines built from the MSL, and the command-buffer
programs in the rings replayed as the same encoder calls on an MTLCommandQueue per queue, signals as MTLSharedEvents.
NOT RUN YET: no Mac was available where this was written; tests/hw runs the op suite on one (skipped elsewhere).

Addresses are host pointers into MTLBuffer contents (shared storage), so core's patches and the MOCK's replay use the same
numbers; `MtlHCQ.resolve` turns one back into (MTLBuffer, offset) for setBuffer/blit calls. A SIGNAL is encoded on the signal's
MTLSharedEvent (a WAIT of another queue on it becomes a GPU-side encodeWaitForEvent) and, once its command buffer completed, the
host writes the value into the signal's memory too, which is what core's host waits read."""
from __future__ import annotations
import bisect, ctypes, threading, time
from typing import Any
from core.device.allocator import BufferSpec, LRUAllocator
from core.device.compiled import Compiled
from core.device.hcq import peek, poke
from core.device.target import Target
from plugin_metal import objc
from plugin_metal.cmdbuf import Call
from plugin_metal.icb import Icb, max_bind_count
from plugin_metal.queues import MetalHCQ

class Allocations:
  """Every live MTLBuffer by host address range: address -> (MTLBuffer, offset)."""
  def __init__(self) -> None:
    self.starts: list[int] = []
    self.entries: dict[int, tuple[int, int]] = {}   # start -> (MTLBuffer, size)
    self.lock = threading.Lock()

  def add(self, start: int, buf: int, size: int) -> None:
    with self.lock:
      bisect.insort(self.starts, start)
      self.entries[start] = (buf, size)

  def remove(self, start: int) -> int:
    with self.lock:
      self.starts.pop(bisect.bisect_left(self.starts, start))
      return self.entries.pop(start)[0]

  def resolve(self, addr: int) -> tuple[int, int]:
    with self.lock:
      i = bisect.bisect_right(self.starts, addr) - 1
      if i >= 0 and addr < (start := self.starts[i]) + self.entries[start][1]: return self.entries[start][0], addr - start
    raise ValueError(f"address 0x{addr:x} is in no MTLBuffer of this process")

ALLOCATIONS = Allocations()

class MtlAllocator(LRUAllocator):
  """Shared-storage MTLBuffers; a handle is a ctypes byte array over the buffer's contents (host access and views for free)."""
  def __init__(self, device: str, dev: int):
    super().__init__(device)
    self.dev = dev

  def _alloc(self, size: int, options: BufferSpec) -> Any:
    buf, addr = objc.new_buffer(self.dev, size)
    ALLOCATIONS.add(addr, buf, size)
    return (ctypes.c_uint8 * size).from_address(addr)

  def _free(self, opaque: Any, options: BufferSpec) -> None: objc.release(ALLOCATIONS.remove(ctypes.addressof(opaque)))
  def _offset(self, opaque: Any, size: int, offset: int) -> Any: return (ctypes.c_uint8 * size).from_address(ctypes.addressof(opaque) + offset)
  def _as_buffer(self, opaque: Any) -> memoryview: return memoryview(opaque).cast("B")
  def _copyin(self, dest: Any, src: memoryview) -> None: ctypes.memmove(dest, bytes(src), src.nbytes)
  def _copyout(self, dest: memoryview, src: Any) -> None: dest[:] = memoryview(src).cast("B")

class Pipeline:
  """A kernel's MTLComputePipelineState (its threadgroup size is checked against the pipeline's limit at dispatch)."""
  def __init__(self, dev: int, name: str, msl: str):
    self.name, self.pso = name, objc.new_pipeline(dev, msl, name)
    self.max_threads = objc.max_threads(self.pso)

  def check(self, tg: tuple[int, ...]) -> None:
    if (n := tg[0] * tg[1] * tg[2]) > self.max_threads:
      raise ValueError(f"kernel {self.name}: a threadgroup of {n} threads, this pipeline allows {self.max_threads}")

class MtlEncoder:
  """One queue's replay: encoder calls go into the open command buffer; `flush` commits it, `finish` waits for what was committed
  and writes the signals and timestamps it carried into memory."""
  def __init__(self, hcq: MtlHCQ):
    self.hcq, self.queue = hcq, objc.new_queue(hcq.dev)
    self.cb = self.compute = self.blit = 0
    self.pipeline: Pipeline | None = None
    self.pending: list[tuple[int, int]] = []                 # (signal or timestamp address, value; -1: a timestamp)
    self.committed: list[tuple[int, list[tuple[int, int]]]] = []

  def _cb(self) -> int:
    if not self.cb: self.cb = objc.command_buffer(self.queue)
    return self.cb

  def _end(self) -> None:
    for enc in (self.compute, self.blit):
      if enc: objc.end_encoding(enc)
    self.compute = self.blit = 0

  def _compute(self) -> int:
    if not self.compute:
      self._end()
      self.compute = objc.compute_encoder(self._cb())
    return self.compute

  def signal_value(self, addr: int) -> int: return max(peek(addr), self.hcq.encoded.get(addr, 0))

  def call(self, call: Call, f: tuple[int, ...]) -> None:
    # Metal hands some objects back autoreleased: each call in its own pool (encoders and command buffers are retained)
    with objc.AutoreleasePool(): self._call(call, f)

  def _call(self, call: Call, f: tuple[int, ...]) -> None:
    if call is Call.SET_PIPELINE:
      if (p := self.hcq.programs.get(handle := peek(f[0]))) is None: raise ValueError(f"SET_PIPELINE of handle {handle}, which is not loaded")
      objc.set_pipeline(self._compute(), p.pso)
      self.pipeline = p
    elif call in (Call.SET_BUFFER, Call.SET_BUFFER_AT):
      buf, off = ALLOCATIONS.resolve(f[1] if call is Call.SET_BUFFER else peek(f[1]))
      objc.set_buffer(self._compute(), buf, off, f[0])
    elif call is Call.DISPATCH:
      if self.pipeline is None: raise ValueError("DISPATCH with no pipeline set")
      self.pipeline.check(f[3:])
      objc.dispatch(self._compute(), f[:3], f[3:])
    elif call is Call.MEMORY_BARRIER:
      if self.compute: objc.memory_barrier(self.compute)
    elif call is Call.BLIT_COPY:
      if not self.blit:
        self._end()
        self.blit = objc.blit_encoder(self._cb())
      (dst, doff), (src, soff) = ALLOCATIONS.resolve(f[0]), ALLOCATIONS.resolve(f[1])
      objc.blit_copy(self.blit, src, soff, dst, doff, f[2])
    elif call is Call.SIGNAL:
      self._end()
      objc.encode_signal(self._cb(), self.hcq.event(f[0]), f[1])
      self.pending.append((f[0], f[1]))
      self.hcq.encoded[f[0]] = max(self.hcq.encoded.get(f[0], 0), f[1])
    elif call is Call.WAIT:
      # replay reaches a WAIT only once its value is in memory or encoded by some queue; only the latter needs the GPU to wait
      if peek(f[0]) < f[1]:
        self._end()
        objc.encode_wait(self._cb(), self.hcq.event(f[0]), f[1])
    elif call is Call.TIMESTAMP: self.pending.append((f[0], -1))

  # *** indirect command buffers (Jit replays) ***

  def build_icb(self, icb: Icb) -> None:
    with objc.AutoreleasePool():
      icb.obj, icb.release = objc.new_icb(self.hcq.dev, len(icb.commands), max_bind_count(icb.commands)), objc.release
      for i in range(len(icb.commands)): self._encode_icb(icb, i)

  def update_icb(self, icb: Icb, changed: list[int]) -> None:
    with objc.AutoreleasePool():
      for i in changed: self._encode_icb(icb, i)

  def _encode_icb(self, icb: Icb, i: int) -> None:
    c = icb.commands[i]
    if (p := self.hcq.programs.get(c.pipeline)) is None: raise ValueError(f"ICB command with pipeline handle {c.pipeline}, which is not loaded")
    p.check(c.threadgroup)
    objc.encode_icb_command(icb.obj, i, p.pso, [(*ALLOCATIONS.resolve(addr), idx) for idx, addr in c.bindings], c.grid, c.threadgroup, c.barrier)

  def execute_icb(self, icb: Icb, start: int, count: int) -> None:
    # a compute encoder of its own: a barrier can't wait for an ICB's commands, an encoder boundary does
    with objc.AutoreleasePool():
      self._end()
      enc = objc.compute_encoder(self._cb())
      objc.use_resources(enc, list(dict.fromkeys(ALLOCATIONS.resolve(a)[0] for c in icb.commands[start:start + count] for _, a in c.bindings)))
      objc.execute_icb(enc, icb.obj, start, count)
      objc.end_encoding(enc)

  def flush(self) -> None:
    if not self.cb: return
    with objc.AutoreleasePool():
      self._end()
      objc.commit(self.cb)
    self.committed.append((self.cb, self.pending))
    self.cb, self.pending = 0, []

  def finish(self) -> None:
    for cb, writes in self.committed:
      err = objc.wait_completed(cb)
      objc.release(cb)
      if err is not None: raise RuntimeError(f"a Metal command buffer failed: {err}")
      for addr, value in writes: poke(addr, time.monotonic_ns() if value == -1 else value)
    self.committed = []

class MtlHCQ(MetalHCQ):
  """Metal's queues: one MTLCommandQueue per core queue, an MTLSharedEvent per signal address."""
  def __init__(self, device: str, dev: int):
    self.dev = dev
    self.events: dict[int, int] = {}
    self.encoded: dict[int, int] = {}   # signal address -> the largest value a SIGNAL encoded so far
    super().__init__(device)

  def new_encoder(self, queue: str) -> MtlEncoder: return MtlEncoder(self)
  def _load(self, name: str, lib: bytes) -> Pipeline: return Pipeline(self.dev, name, lib.decode())

  def event(self, addr: int) -> int:
    if (ev := self.events.get(addr)) is None: ev = self.events[addr] = objc.new_event(self.dev)
    return ev

  def _finish(self) -> None:
    for q in list(self._queues.values()):
      try: q.encoder.finish()  # type: ignore[attr-defined]
      except RuntimeError as e: self.faults.append(f"{self.device} {q.name}: {e}")   # raised by the wait that called this

class MtlProgram:
  """A kernel called directly (outside core's HCQ pipeline): one command buffer per call."""
  def __init__(self, hcq: MtlHCQ, name: str, lib: bytes):
    self.hcq, self.name, (_, self.pipeline) = hcq, name, hcq.load_program(name, lib)

  def __call__(self, *bufs: Any, global_size: tuple[int, ...] = (1, 1, 1), local_size: tuple[int, ...] = (1, 1, 1),
               vals: tuple[int, ...] = (), wait: bool = False) -> float | None:
    from plugin_metal.runtime import arg_addresses
    args, keep = arg_addresses(bufs, vals)
    # the variables go through a small shared buffer: setBuffer needs an MTLBuffer, not host memory
    nv = len(vals)
    var_buf, var_addr = objc.new_buffer(self.hcq.dev, 4 * max(1, nv))
    ctypes.memmove(var_addr, keep, 4 * nv)
    st = time.perf_counter()
    with objc.AutoreleasePool():
      q = self.hcq.queue("COMPUTE:0").encoder
      cb = objc.command_buffer(q.queue)  # type: ignore[attr-defined]
      enc = objc.compute_encoder(cb)
      objc.set_pipeline(enc, self.pipeline.pso)
      for i, a in enumerate(args[:len(bufs)]): objc.set_buffer(enc, *ALLOCATIONS.resolve(a), i)
      for j in range(nv): objc.set_buffer(enc, var_buf, 4 * j, len(bufs) + j)
      g, t = (tuple(global_size) + (1, 1, 1))[:3], (tuple(local_size) + (1, 1, 1))[:3]
      self.pipeline.check(t)
      objc.dispatch(enc, g, t)
      objc.end_encoding(enc)
      objc.commit(cb)
      err = objc.wait_completed(cb)
      objc.release(cb)
    objc.release(var_buf)
    if err is not None: raise RuntimeError(f"METAL kernel {self.name} failed: {err}")
    return time.perf_counter() - st if wait else None

def make_mtl_device(name: str, target: Target) -> Compiled:
  """The METAL device on macOS: the system's default GPU."""
  import sys
  if sys.platform != "darwin": raise RuntimeError(f"{name}: the MTL interface needs macOS (Metal); on this machine use DEV=MOCK+{name} "
                                                  f"(the MSL run as C++ on the host) or DEV=NULL:{name} (compile only)")
  from plugin_metal.renderer import MetalRenderer
  from plugin_metal.compiler import MetalCompiler
  dev = objc.metal_device()
  hcq = MtlHCQ(name, dev)
  return Compiled(name, MtlAllocator(name, dev), MetalRenderer(target.arch), MetalCompiler(),
                  lambda n, lib: MtlProgram(hcq, n, lib), target=target, hcq=hcq)
