"""The WEBGPU runtime over wgpu: storage-buffer allocator (write_buffer uploads, mapped staging read-back), programs, device."""
from __future__ import annotations
import ctypes, itertools, threading, time
from typing import Any
from core.device.allocator import BufferSpec, LRUAllocator
from core.device.compiled import Compiled
from core.device.target import Target
from plugin_webgpu.gpu import GPU, gpu
from plugin_webgpu.compiler import WGSLCompiler, pipeline
from plugin_webgpu.renderer import WGSLRenderer
from plugin_webgpu.queue import DEVICE_BIT

class WGBuffer(ctypes.Structure):
  """A handle: `size` bytes at `offset` in the GPUBuffer `buf` (a view shares its base's GPUBuffer). A ctypes object only so
  core's HCQ pipeline can take its (host) address to notice a changed buffer; the device address is WebGPUHCQ.addr's."""
  _fields_ = [("_tag", ctypes.c_uint8)]
  def __init__(self, buf: Any, offset: int, size: int):
    super().__init__()
    self.buf, self.offset, self.size = buf, offset, size

# *** GPU buffers by address (what HCQ packets and kernel arguments carry): DEVICE_BIT | slot << 32 | offset ***
# Strong references, dropped when the allocator frees the buffer: a weak table could hand the command processor a buffer
# in the middle of being finalized by another thread.

_slots: dict[int, Any] = {}
_slot_of: dict[int, int] = {}   # id(GPUBuffer) -> slot (the buffer is alive while it is in _slots)
_next_slot = itertools.count(1)
_slot_lock = threading.Lock()

def device_addr(h: WGBuffer) -> int:
  with _slot_lock:
    if (s := _slot_of.get(id(h.buf))) is None:
      s = _slot_of[id(h.buf)] = next(_next_slot)
      _slots[s] = h.buf
  return DEVICE_BIT | s << 32 | h.offset

def forget(buf: Any) -> None:
  with _slot_lock:
    if (s := _slot_of.pop(id(buf), None)) is not None: del _slots[s]

def resolve(addr: int, nbytes: int | None = None) -> WGBuffer:
  """The GPU buffer at a device address (to the buffer's end when `nbytes` is None)."""
  if (buf := _slots.get((addr & ~DEVICE_BIT) >> 32)) is None: raise ValueError(f"address 0x{addr:x} names no live WEBGPU buffer")
  off = addr & 0xffffffff
  return WGBuffer(buf, off, buf.size - off if nbytes is None else nbytes)

def _span(offset: int, size: int) -> tuple[int, int]:
  """The 4-byte aligned byte range around [offset, offset+size): copies and write_buffer move whole words."""
  lo = offset & ~3
  return lo, ((offset + size + 3) & ~3) - lo

def read_words(g: GPU, buf: Any, offset: int, size: int) -> memoryview:
  """`size` bytes (a multiple of 4) at `offset` (4-aligned) of `buf`, through a mapped staging buffer; waits for the queue."""
  wgpu = g.wgpu
  with g.lock:
    staging = g.device.create_buffer(size=size, usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST)
    enc = g.device.create_command_encoder()
    enc.copy_buffer_to_buffer(buf, offset, staging, 0, size)
    g.device.queue.submit([enc.finish()])
    staging.map_sync(wgpu.MapMode.READ)
    data = memoryview(staging.read_mapped()).cast("B")
    out = memoryview(bytearray(data))
    staging.unmap()
    staging.destroy()
  return out

def wait_idle(g: GPU) -> None:
  """Blocks until everything submitted so far has run: a one-word copy submitted last, then mapped (the queue runs in order).
  (wgpu 0.32's on_submitted_work_done_sync fails in its callback binding.)"""
  wgpu = g.wgpu
  with g.lock:
    if (probe := g.__dict__.get("_idle_probe")) is None:
      probe = g.__dict__["_idle_probe"] = g.device.create_buffer(size=4, usage=wgpu.BufferUsage.COPY_SRC)
  read_words(g, probe, 0, 4)

class WebGPUAllocator(LRUAllocator):
  """Storage buffers (usable as copy source and destination), sizes rounded up to whole 4-byte words. `BufferSpec(host=True)`
  is host memory instead (a ctypes array): the rings, signals and kernel arguments the HCQ command processor reads."""
  def __init__(self, name: str, g: GPU):
    super().__init__(name)
    self.gpu = g
  def _alloc(self, size: int, options: BufferSpec) -> WGBuffer | ctypes.Array:
    if options.host: return (ctypes.c_uint8 * size)()
    wgpu, limit = self.gpu.wgpu, self.gpu.limits.get("max-buffer-size", 1 << 31)
    if size > limit: raise MemoryError(f"{size} bytes is more than this adapter's maxBufferSize ({limit})")
    usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
    with self.gpu.lock: return WGBuffer(self.gpu.device.create_buffer(size=(size + 3) & ~3, usage=usage), 0, size)
  def _free(self, opaque: Any, options: BufferSpec) -> None:
    # wgpu releases the buffer with its last reference; its address stops naming it now
    if isinstance(opaque, WGBuffer): forget(opaque.buf)
  def _offset(self, opaque: Any, size: int, offset: int) -> Any:
    if isinstance(opaque, WGBuffer): return WGBuffer(opaque.buf, opaque.offset + offset, size)
    return (ctypes.c_uint8 * size).from_buffer(opaque, offset)
  def _as_buffer(self, opaque: Any) -> memoryview | None: return None if isinstance(opaque, WGBuffer) else memoryview(opaque).cast("B")
  def _copyin(self, dest: Any, src: memoryview) -> None:
    src = src.cast("B")
    if not isinstance(dest, WGBuffer):
      memoryview(dest).cast("B")[:] = src
      return
    write_bytes(self.gpu, dest, src)
  def _copyout(self, dest: memoryview, src: Any) -> None:
    if not isinstance(src, WGBuffer):
      dest.cast("B")[:] = memoryview(src).cast("B")
      return
    lo, n = _span(src.offset, dest.nbytes)
    dest.cast("B")[:] = read_words(self.gpu, src.buf, lo, n)[src.offset - lo:src.offset - lo + dest.nbytes]

def write_bytes(g: GPU, dest: WGBuffer, src: memoryview) -> None:
  """Writes `src` at dest's offset, ordered on the queue after everything submitted before."""
  lo, n = _span(dest.offset, src.nbytes)
  if lo == dest.offset and n == src.nbytes: data: Any = src
  else:   # not whole words: read the words around it, patch, write them back (ordered on the queue like everything else)
    data = read_words(g, dest.buf, lo, n)
    data[dest.offset - lo:dest.offset - lo + src.nbytes] = src
  with g.lock: g.device.queue.write_buffer(dest.buf, lo, data)

def bind_entries(g: GPU, meta: dict[str, Any], bufs: tuple[WGBuffer, ...], vals: tuple[int, ...]) -> tuple[list[dict[str, Any]], bytes]:
  """The bind group entries for `bufs` (each bound at its offset aligned down to the adapter's storage offset alignment) and
  the argument words: each variable, then each buffer's element offset past its binding's start."""
  align, words = g.offset_alignment, [v & 0xffffffff for v in vals]
  entries: list[dict[str, Any]] = []
  for binding, dt, itemsize, _ in meta["bufs"]:
    h = bufs[binding]
    base = h.offset - h.offset % align
    entries.append({"binding": binding, "resource": {"buffer": h.buf, "offset": base, "size": ((h.offset + h.size + 3) & ~3) - base}})
    words.append((h.offset - base) // itemsize)
  words += [0] * (-len(words) % 4 or (4 if not words else 0))
  return entries, b"".join(w.to_bytes(4, "little") for w in words)

class WebGPUProgram:
  """A kernel: its compute pipeline; a call binds the buffers and the argument uniform, dispatches, submits."""
  def __init__(self, name: str, lib: bytes, g: GPU | None = None):
    self.name, self.gpu = name, g or gpu()
    self.handle = 0   # what a LAUNCH packet names it by (iface_hcq's load_program numbers it)
    self.p = pipeline(lib.decode())
    self.meta = self.p.meta

  def bind_group(self, bufs: tuple[WGBuffer, ...], vals: tuple[int, ...]) -> Any:
    """The bind group of one launch: the buffers and a uniform of the argument words."""
    g, wgpu = self.gpu, self.gpu.wgpu
    entries, args = bind_entries(g, self.meta, bufs, vals)
    ubuf = g.device.create_buffer_with_data(data=args, usage=wgpu.BufferUsage.UNIFORM)
    nbind = max((b[0] for b in self.meta["bufs"]), default=-1) + 1
    entries.append({"binding": nbind, "resource": {"buffer": ubuf, "offset": 0, "size": len(args)}})
    return g.device.create_bind_group(layout=self.p.layout, entries=entries)

  def encode(self, enc: Any, bufs: tuple[WGBuffer, ...], vals: tuple[int, ...], bg: Any = None, timestamp_writes: Any = None) -> Any:
    """Records the dispatch into the command encoder `enc` (a compute pass of its own, its start and end written into a
    timestamp query set when `timestamp_writes` says where); returns the bind group."""
    if bg is None: bg = self.bind_group(bufs, vals)
    cp = enc.begin_compute_pass(timestamp_writes=timestamp_writes) if timestamp_writes is not None else enc.begin_compute_pass()
    cp.set_pipeline(self.p.pipeline)
    cp.set_bind_group(0, bg)
    cp.dispatch_workgroups(*self.meta["dispatch"])
    cp.end()
    return bg

  def __call__(self, *bufs: WGBuffer, global_size: tuple[int, ...] = (1, 1, 1), local_size: tuple[int, ...] = (1, 1, 1),
               vals: tuple[int, ...] = (), wait: bool = False) -> float | None:
    g = self.gpu
    with g.lock:
      st = time.perf_counter()
      enc = g.device.create_command_encoder()
      self.encode(enc, bufs, vals)
      g.device.queue.submit([enc.finish()])
      if not wait: return None
      wait_idle(g)
      return time.perf_counter() - st

def make_renderer(g: GPU | None) -> WGSLRenderer:
  """The WGSL renderer for the adapter `g` (f16 and limits as granted), or with WebGPU's default limits when there is none."""
  return WGSLRenderer(f16=g.f16, limits=g.limits) if g is not None else WGSLRenderer()

def make_device(name: str, target: Target | None = None) -> Compiled:
  """The WEBGPU device: the process's wgpu device (lavapipe, or any adapter wgpu finds). Interface HCQ (the default): core's
  HCQ pipeline lowers whole schedules into packets that iface_hcq.py's command processor replays as command encoders;
  DIRECT: kernels are dispatched one by one, each a submitted command encoder."""
  iface = ((target.interface if target is not None else None) or "HCQ").upper()
  if iface not in ("HCQ", "DIRECT"): raise ValueError(f"{name} has no interface {iface!r}; choose HCQ (the default) or DIRECT (DEV=DIRECT+{name})")
  g = gpu()
  renderer = make_renderer(g)
  renderer.device = name
  def program(pname: str, lib: bytes) -> WebGPUProgram: return WebGPUProgram(pname, lib, g)
  from plugin_webgpu.iface_hcq import webgpu_hcq
  return Compiled(name, WebGPUAllocator(name, g), renderer, WGSLCompiler(), program, target, hcq=webgpu_hcq(name, g) if iface == "HCQ" else None)
