"""The MOCK+QCOM device: host memory as device memory, the Adreno command stream run by mock_cp.CommandProcessor, and each
CP_EXEC_CS launched as the same kernel's OpenCL C on the CL interface.

Memory: 256-byte aligned host allocations whose device address is their host address, registered with the processor (an
address outside them is a fault). Copies from other devices go through a staging buffer here (`needs_staging`).
Queue: COMPUTE:0, a ring whose write pointer counts dwords. Core's submit program copies the words into the ring and stores the
write pointer into the doorbell; the processor runs on the thread that waits (`wait_signal`, `synchronize`), from its read
pointer to the doorbell, and stops at a CP_WAIT_REG_MEM that is not satisfied yet.
Programs: the compiler writes a program image (prep.py) whose code is the kernel's OpenCL C; a dispatch reads that code from the
address CP_LOAD_STATE6 loaded, its arguments from the constants, builds it with the CL compiler (cached) and runs it over
the grid in HLSQ_CS_NDRANGE / CP_EXEC_CS, each buffer wrapped as a cl_mem over its host memory (CL_MEM_USE_HOST_PTR)."""
from __future__ import annotations
import ctypes, hashlib, struct
from typing import Any
from core.codegen.access_guard import GUARD_NAME, guard_fault, guard_table
from core.device.allocator import BufferSpec
from core.device.host_memory import HostArrayAllocator, aligned_array
from core.device.compiled import Compiled
from core.device.compiler import Compiler
from core.device.hcq import handle_addr, PerDevice
from core.device.target import Target
from core.helpers import LRUCache
from plugin_qcom import cl
from plugin_qcom.compiler import CLCompiler
from plugin_qcom.iface_cl import CLImage, CLProgram, caps_of, create_image, image_region
from plugin_qcom.mock_cp import CommandProcessor, Memory, PacketError
from plugin_qcom.prep import build_image, image_args, signature
from plugin_qcom.descriptors import Image
from plugin_qcom.renderer import OpenCLRenderer
from plugin_qcom.runtime import QCOMHCQ, no_direct_path

ALIGN = 256   # every allocation starts and ends on 256 bytes (lower.lower_copy rounds copies up to whole dwords)
MEMORY = Memory()

class MockAllocator(HostArrayAllocator):
  """Host memory as ctypes arrays, 256-byte aligned and padded, registered as MOCK+QCOM device memory."""
  def _alloc(self, size: int, options: BufferSpec) -> Any:
    if options.external_ptr is not None: return (ctypes.c_uint8 * size).from_address(options.external_ptr)
    padded = -(-size // ALIGN) * ALIGN
    buf, raw = aligned_array(size, ALIGN, padded)
    MEMORY.register(ctypes.addressof(buf), padded, raw)
    return buf
  def _free(self, opaque: Any, options: BufferSpec) -> None: MEMORY.unregister(ctypes.addressof(opaque))

class MockCompiler(Compiler):
  """OpenCL C -> a program image (prep.py) holding the source as its code. The source is built by the CL compiler first, so
  an error shows at compile time with the build log, and the driver binary the dispatch needs is in the cache already."""
  def __init__(self, clc: CLCompiler):
    self.cl = clc
    super().__init__(f"qcom_mock_img2_{clc.cachekey}")
  def compile(self, src: str) -> bytes:
    self.cl.compile_cached(src)
    name, nbufs, nvars = signature(src)
    return build_image(name, src.encode(), nbufs, nvars, image_args(src))

class CLLauncher:
  """Runs a dispatch's OpenCL C on the CL interface: programs cached by code (the most recent 512, as the CL interface keeps;
  CORE_CACHE_QCOM_MOCK_PROGRAMS_<name> changes it), buffers as cl_mem over the host memory."""
  def __init__(self, ctx: cl.CLContext, compiler: CLCompiler, name: str = "QCOM"):
    self.ctx, self.compiler = ctx, compiler
    self._programs = LRUCache(f"qcom_mock_programs_{name.replace(':', '_')}", 512)

  def __call__(self, code: bytes, bufs: list[int], vals: list[int], groups: tuple[int, int, int], local: tuple[int, int, int],
               images: dict[int, Image] | None = None) -> None:
    src = code.rstrip(b"\0").decode()
    key = hashlib.sha256(code).digest()
    if (prg := self._programs.get(key)) is None:
      prg = self._programs[key] = CLProgram(self.ctx, signature(src)[0], self.compiler.compile_cached(src))
    c = cl.lib()
    mems: dict[int, int] = {}
    imgs: dict[int, CLImage] = {}
    # a kernel rendered with guard_accesses (all of MOCK+QCOM's): its accesses not proven in range are checked against the
    # allocation each buffer argument points into, through a table it takes after its buffers
    table = guard_table(bufs, [_span(b) for b in bufs]) if f" {GUARD_NAME}" in src else None
    try:
      if table is not None:
        mems[-1] = cl.call_handle("clCreateBuffer", self.ctx.context, cl.CL_MEM_READ_WRITE | cl.CL_MEM_USE_HOST_PTR, ctypes.sizeof(table),
                                  ctypes.addressof(table))
      # an image is made from the pixels at its descriptor's BASE, and a written one read back there afterwards
      for k, im in (images or {}).items(): imgs[k] = create_image(self.ctx, im.height, im.width, im.half, host_ptr=im.base)
      for k, b in enumerate(bufs):
        if k not in imgs and b not in mems:
          start, size = MEMORY.span(b)
          mems[b] = cl.call_handle("clCreateBuffer", self.ctx.context, cl.CL_MEM_READ_WRITE | cl.CL_MEM_USE_HOST_PTR, start + size - b, b)
      prg(*[imgs[k] if k in imgs else mems[b] for k, b in enumerate(bufs)], global_size=groups, local_size=local, vals=tuple(vals),
          extra=(mems[-1],) if table is not None else ())
      self.ctx.finish()
      for k, img in imgs.items():
        if prg.images.get(k, (None, False))[1]:
          org, reg = image_region(img)
          cl.check("clEnqueueReadImage", c.clEnqueueReadImage(self.ctx.queue, img.mem, 1, org, reg, 0, 0, ctypes.c_void_p((images or {})[k].base),
                                                              0, None, None))
      # mapping a CL_MEM_USE_HOST_PTR buffer makes the host memory hold what the kernel wrote
      err = ctypes.c_int32()
      for b, m in mems.items():
        p = c.clEnqueueMapBuffer(self.ctx.queue, m, 1, cl.CL_MAP_READ, 0, 1, 0, None, None, ctypes.byref(err))
        cl.check("clEnqueueMapBuffer", err.value)
        cl.check("clEnqueueUnmapMemObject", c.clEnqueueUnmapMemObject(self.ctx.queue, m, p, 0, None, None))
      self.ctx.finish()
    finally:
      for m in [*mems.values(), *(i.mem for i in imgs.values())]: c.clReleaseMemObject(m)
    if table is not None and (fault := guard_fault(signature(src)[0], table, bufs)) is not None: raise fault

def _span(addr: int) -> tuple[int, int]:
  """[lo, hi) of the MOCK+QCOM allocation holding `addr`; (addr, addr) for none (an image argument's unused entry)."""
  try: start, size = MEMORY.span(addr)
  except PacketError: return addr, addr
  return start, start + size

class MockHCQ(QCOMHCQ):
  """The HCQDevice of a MOCK+QCOM device (see the module docstring)."""
  kind = "MOCK"

  def __init__(self, device: str, launcher: CLLauncher, ring_size: int = 1 << 20):
    super().__init__(device, ring_size)
    self.cp = CommandProcessor(MEMORY, launcher)
    self.rptr = 0   # dwords consumed since the queue was created

  def _step(self) -> bool:
    """Runs every MOCK+QCOM device's ring (a queue here may wait on another instance's signal, and only waiting threads run
    the processors); True when something ran."""
    moved = False
    for h in _by_device.values(): moved = h._drain_own() or moved
    return moved

  def _drain_own(self) -> bool:
    """Runs this ring from the read pointer to the doorbell; True when something ran. A fault is recorded (and the rest of the
    submitted words skipped, as a hung GPU queue would never run them) for wait_signal to raise."""
    with self._lock:
      ring, bell = self.queue_buffer("ring", "COMPUTE:0"), self.queue_buffer("doorbell", "COMPUTE:0")
      wptr = ctypes.c_uint64.from_address(handle_addr(bell)).value
      if wptr <= self.rptr: return False
      n = self._ring_size // 4
      words = memoryview(ring._buf).cast("B").cast("I")
      todo = [words[(self.rptr + k) % n] for k in range(wptr - self.rptr)]
      try: done = self.cp.run(todo, base=4 * (self.rptr % n))
      except (PacketError, cl.CLError, RuntimeError) as e:
        self.faults.append(f"COMPUTE:0 at ring dword {self.rptr % n}: {type(e).__name__}: {e}")
        done = len(todo)
      self.rptr += done
      return done > 0

  def _describe(self) -> str:
    bell = ctypes.c_uint64.from_address(handle_addr(self.queue_buffer("doorbell", "COMPUTE:0"))).value
    return f"COMPUTE:0 read pointer {self.rptr} dwords, doorbell {bell}; last packets {self.cp.executed[-4:]}"

  def needs_staging(self, other_device: str) -> bool:
    # the processor reaches only MOCK+QCOM memory: another device's buffers are copied through a staging buffer here
    from core.device.registry import Device
    return not isinstance(Device[other_device].hcq, MockHCQ)

_by_device: PerDevice[MockHCQ] = PerDevice()

def open_device(name: str, target: Target | None) -> Compiled:
  """DEV=MOCK+QCOM: the renderer follows the OpenCL device the dispatches run on (its half and double support)."""
  ctx = cl.context()
  clc = CLCompiler(ctx)
  hcq = _by_device.get(name, lambda: MockHCQ(name, CLLauncher(ctx, clc, name)))
  renderer = OpenCLRenderer(caps_of(ctx), name)
  renderer.guard_accesses = True   # the OpenCL C runs on the host (pocl): accesses not proven in range are checked (access_guard)
  return Compiled(name, MockAllocator(name), renderer, MockCompiler(clc), no_direct_path, target, hcq=hcq)

def ring_words(hcq: MockHCQ) -> list[int]:
  """Every word written to the ring so far (tests read the stream the processor ran)."""
  ring = hcq.queue_buffer("ring", "COMPUTE:0")
  return list(struct.unpack(f"<{ring.size}I", bytes(memoryview(ring._buf).cast("B"))))
