"""The KGSL+QCOM interface: the Adreno kernel driver (/dev/kgsl-3d0). UNTESTED ON HARDWARE (no Adreno here): the calls follow
the public msm_kgsl.h and run in tests against a fake driver (tests/test_kgsl.py) that checks every ioctl's number and argument.

Memory: GPU objects (IOCTL_KGSL_GPUOBJ_ALLOC, CPU-mapped write-back), mapped into this process at the object id's page offset
of the device file; the allocator's handles are the host mappings and `KGSLHCQ.addr` turns a host address into the object's
GPU address (IOCTL_KGSL_GPUOBJ_INFO).
Queue: COMPUTE:0, a ring in a GPU object. Core's submit program writes the words and the doorbell (host memory); the driver has no
doorbell, so every wait, synchronize and submit nobody waits for publishes (`_kick`): the ring's words from what was submitted to the doorbell go to
IOCTL_KGSL_GPU_COMMAND as indirect buffers (two when they wrap at the ring's end, which only CP_NOP fill crosses), the ring's object in the objlist; the context timestamp that
call returns retires when they are done (IOCTL_KGSL_CMDSTREAM_READTIMESTAMP_CTXTID, IOCTL_KGSL_DEVICE_WAITTIMESTAMP_CTXTID).
Signals are memory the command processor writes (lower.py), read by the host through the mapping.
Programs: the compiler is the device's OpenCL driver (Qualcomm's on a phone); its binaries are read by prep.prep_adreno."""
from __future__ import annotations
import bisect, ctypes, fcntl, mmap, os, threading
from typing import Any, Protocol
from core.device.allocator import BufferSpec, LRUAllocator
from core.device.buffer import Buffer
from core.device.compiled import Compiled
from core.device.hcq import RingLayout, handle_addr
from core.device.target import Target
from plugin_qcom import kgsl, pm4
from plugin_qcom.runtime import QCOMHCQ, no_direct_path

NODE = "/dev/kgsl-3d0"
PAGE = 4096

class Syscalls(Protocol):
  """The kernel calls the driver makes (a fake in tests)."""
  def open(self, path: str) -> int: ...
  def ioctl(self, fd: int, request: int, arg: ctypes.Structure) -> None: ...
  def mmap(self, fd: int, size: int, offset: int) -> Any: ...   # a writable buffer
  def close(self, fd: int) -> None: ...

class OSCalls:
  def open(self, path: str) -> int: return os.open(path, os.O_RDWR | os.O_CLOEXEC)
  def ioctl(self, fd: int, request: int, arg: ctypes.Structure) -> None: fcntl.ioctl(fd, request, arg)   # type: ignore[call-overload]
  def mmap(self, fd: int, size: int, offset: int) -> Any: return mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE, offset=offset)
  def close(self, fd: int) -> None: os.close(fd)

class GPUObject:
  """A GPU object: its id, GPU address, size and host mapping."""
  __slots__ = ("id", "gpuaddr", "size", "mapping", "host")
  def __init__(self, obj_id: int, gpuaddr: int, size: int, mapping: Any):
    self.id, self.gpuaddr, self.size, self.mapping = obj_id, gpuaddr, size, mapping
    self.host = ctypes.addressof(ctypes.c_uint8.from_buffer(mapping))

class KGSLDriver:
  """One open /dev/kgsl-3d0 with a draw context: allocate and map GPU objects, submit indirect buffers, read and wait for the
  context's timestamps."""
  def __init__(self, node: str = NODE, sys: Syscalls | None = None):
    self.sys = sys or OSCalls()
    self.fd = self.sys.open(node)
    req = kgsl.kgsl_drawctxt_create(flags=kgsl.context_flags())
    self.ioctl(kgsl.IOCTL_KGSL_DRAWCTXT_CREATE, req)
    self.context = req.drawctxt_id

  def ioctl(self, nr: int, arg: ctypes.Structure) -> None: self.sys.ioctl(self.fd, nr, arg)

  def alloc(self, size: int) -> GPUObject:
    """A new write-back, CPU-mapped GPU object of `size` bytes rounded up to whole pages."""
    size = -(-max(size, 1) // PAGE) * PAGE
    req = kgsl.kgsl_gpuobj_alloc(size=size, flags=kgsl.KGSL_MEMFLAGS_USE_CPU_MAP | kgsl.KGSL_CACHEMODE_WRITEBACK << kgsl.KGSL_CACHEMODE_SHIFT,
                                 mmapsize=size)
    self.ioctl(kgsl.IOCTL_KGSL_GPUOBJ_ALLOC, req)
    info = kgsl.kgsl_gpuobj_info(id=req.id)
    self.ioctl(kgsl.IOCTL_KGSL_GPUOBJ_INFO, info)
    # KGSL maps an object at the page offset of its id in the device file
    return GPUObject(req.id, info.gpuaddr, size, self.sys.mmap(self.fd, req.mmapsize or size, req.id * PAGE))

  def free(self, obj: GPUObject) -> None:
    self.ioctl(kgsl.IOCTL_KGSL_GPUOBJ_FREE, kgsl.kgsl_gpuobj_free(id=obj.id))
    try: obj.mapping.close()
    except BufferError: pass   # a view of it is still exported; the mapping goes with its last user

  def submit(self, ranges: list[tuple[int, int]], objs: list[GPUObject] | None = None) -> int:
    """Submits (GPU address, bytes) ranges of command words as indirect buffers that use `objs`; returns the context timestamp
    they retire at."""
    cmd, keep = kgsl.gpu_command(self.context, [kgsl.ib_command(a, n) for a, n in ranges], [kgsl.memobj(o.gpuaddr, o.size, o.id) for o in objs or []])
    self.ioctl(kgsl.IOCTL_KGSL_GPU_COMMAND, cmd)
    del keep
    return cmd.timestamp

  def retired(self) -> int:
    """The context's last retired timestamp."""
    req = kgsl.kgsl_cmdstream_readtimestamp_ctxtid(context_id=self.context, type=kgsl.KGSL_TIMESTAMP_RETIRED)
    self.ioctl(kgsl.IOCTL_KGSL_CMDSTREAM_READTIMESTAMP_CTXTID, req)
    return req.timestamp

  def wait(self, timestamp: int, timeout_ms: int) -> None:
    self.ioctl(kgsl.IOCTL_KGSL_DEVICE_WAITTIMESTAMP_CTXTID,
               kgsl.kgsl_device_waittimestamp_ctxtid(context_id=self.context, timestamp=timestamp, timeout=timeout_ms))

  def close(self) -> None:
    self.ioctl(kgsl.IOCTL_KGSL_DRAWCTXT_DESTROY, kgsl.kgsl_drawctxt_destroy(drawctxt_id=self.context))
    self.sys.close(self.fd)

class KGSLAllocator(LRUAllocator):
  """GPU objects; a handle is the host mapping as a ctypes array, so core reads and writes the memory directly."""
  def __init__(self, device: str, driver: KGSLDriver):
    super().__init__(device)
    self.driver = driver
    self.objects: dict[int, GPUObject] = {}   # host address -> object
    self.starts: list[int] = []
    self.lock = threading.Lock()
  def _alloc(self, size: int, options: BufferSpec) -> Any:
    if options.external_ptr is not None: raise NotImplementedError(f"{self.device}: KGSL+QCOM cannot map host memory (IOCTL_KGSL_MAP_USER_MEM is not used)")
    obj = self.driver.alloc(size)
    with self.lock:
      self.objects[obj.host] = obj
      bisect.insort(self.starts, obj.host)
    return (ctypes.c_uint8 * size).from_address(obj.host)
  def _free(self, opaque: Any, options: BufferSpec) -> None:
    with self.lock:
      obj = self.objects.pop(ctypes.addressof(opaque))
      self.starts.remove(obj.host)
    self.driver.free(obj)
  def _offset(self, opaque: Any, size: int, offset: int) -> Any: return (ctypes.c_uint8 * size).from_address(ctypes.addressof(opaque) + offset)
  def _as_buffer(self, opaque: Any) -> memoryview: return memoryview(opaque).cast("B")
  def _copyin(self, dest: Any, src: memoryview) -> None: memoryview(dest).cast("B")[:] = src.cast("B")
  def _copyout(self, dest: memoryview, src: Any) -> None: dest.cast("B")[:] = memoryview(src).cast("B")

  def object_at(self, host: int) -> GPUObject:
    """The object whose mapping holds host address `host`."""
    with self.lock:
      i = bisect.bisect_right(self.starts, host) - 1
      if i >= 0 and host < (o := self.objects[self.starts[i]]).host + o.size: return o
    raise ValueError(f"{self.device}: host address {host:#x} is in no GPU object")

  def gpu_address(self, host: int) -> int:
    o = self.object_at(host)
    return o.gpuaddr + host - o.host

class KGSLHCQ(QCOMHCQ):
  """The HCQDevice of a KGSL+QCOM device (see the module docstring)."""
  kind = "KGSL"

  def __init__(self, device: str, driver: KGSLDriver, allocator: KGSLAllocator, ring_size: int = 1 << 20):
    super().__init__(device, ring_size)
    self.driver, self.allocator = driver, allocator
    self.submitted = 0   # ring dwords handed to the driver
    self.last_ts = 0     # the timestamp the last submission retires at

  def ring_layout(self, queue: str) -> RingLayout:
    self._check(queue)
    # indirect buffers are read straight through: a submit that would not fit before the ring's end starts again at word 0,
    # the tail filled with one-dword CP_NOP packets, so no packet is cut where the two indirect buffers meet
    return RingLayout(unit=4, nop=pm4.nop()[0])

  def addr(self, buf: Buffer) -> int: return self.allocator.gpu_address(handle_addr(buf))

  def _kick(self) -> None:
    """Submits the ring's words from what was submitted to the doorbell (two indirect buffers when they wrap)."""
    with self._lock:
      ring, bell = self.queue_buffer("ring", "COMPUTE:0"), self.queue_buffer("doorbell", "COMPUTE:0")
      wptr = ctypes.c_uint64.from_address(handle_addr(bell)).value
      if wptr <= self.submitted: return
      n, base = self._ring_size // 4, self.addr(ring)
      start, count = self.submitted % n, wptr - self.submitted
      first = min(count, n - start)
      ranges = [(base + 4 * start, 4 * first)] + ([(base, 4 * (count - first))] if count > first else [])
      self.last_ts = self.driver.submit(ranges, [self.allocator.object_at(handle_addr(ring))])
      self.submitted = wptr

  def _step(self) -> bool:
    before = self.submitted
    self._kick()
    return self.submitted != before

  def _busy(self) -> list[str]:
    r = self.driver.retired()
    return [f"COMPUTE:0: timestamp {self.last_ts} submitted, {r} retired"] if (r - self.last_ts) % (1 << 32) >= 1 << 31 else []

  def _describe(self) -> str: return f"COMPUTE:0 submitted {self.submitted} dwords, timestamp {self.last_ts}, retired {self.driver.retired()}"

def open_device(name: str, target: Target | None, sys: Syscalls | None = None, node: str = NODE) -> Compiled:
  """DEV=KGSL+QCOM: the Adreno kernel driver for memory and submission, the device's OpenCL driver (Qualcomm's) as compiler.
  `sys`: the kernel calls (a fake driver in tests; then `node` need not exist)."""
  if sys is None and not os.path.exists(node):
    raise RuntimeError(f"{name}: no Adreno kernel driver ({node} does not exist). Use DEV=CL+QCOM (any OpenCL driver) or "
                       "DEV=MOCK+QCOM (the software command processor)")
  from plugin_qcom import cl
  from plugin_qcom.compiler import CLCompiler
  from plugin_qcom.iface_cl import caps_of
  from plugin_qcom.renderer import OpenCLRenderer
  ctx = cl.context()
  driver = KGSLDriver(node, sys)
  alloc = KGSLAllocator(name, driver)
  return Compiled(name, alloc, OpenCLRenderer(caps_of(ctx), name), CLCompiler(ctx), no_direct_path, target,
                  hcq=KGSLHCQ(name, driver, alloc))
