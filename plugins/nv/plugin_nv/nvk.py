"""The NVIDIA kernel driver's resource manager (RM), as the NVK interface drives it: /dev/nvidiactl for every RM ioctl,
/dev/nvidia<N> for the GPU and for each CPU mapping. Structures and numbers are rm_abi.py's.

The object tree: a root client (NV01_ROOT_CLIENT) -> device (NV01_DEVICE_0) -> subdevice (NV20_SUBDEVICE_0, with the usermode
doorbell object VOLTA/HOPPER_USERMODE_A under it), a GPU virtual address space (FERMI_VASPACE_A) with one virtual memory object
spanning it (NV50_MEMORY_VIRTUAL, what MAP_MEMORY_DMA maps into), memory (NV01_MEMORY_LOCAL_USER video memory,
NV01_MEMORY_SYSTEM host memory), and per channel a KEPLER_CHANNEL_GROUP_A with a FERMI_CONTEXT_SHARE_A and the arch's GPFIFO
channel (AMPERE/HOPPER/BLACKWELL_CHANNEL_GPFIFO_A), which holds the compute or copy object.

Addresses: each allocation is mapped for the CPU at an address reserved first (an anonymous PROT_NONE mapping, then MAP_FIXED of
/dev/nvidia<N>), and for the GPU at the same address (MAP_MEMORY_DMA with DMA_OFFSET_FIXED), so a buffer's GPU address is its host
address, as core's patch cache expects. /dev/nvidia-uvm is not used: RM hands out the GPU addresses itself.

`DriverOS` is the seam: OSDriver is the kernel; nvk_sim.SimDriver (NVK_SIM=<arch>) serves the same calls in process."""
from __future__ import annotations
import bisect, ctypes, dataclasses, errno, os, threading
from typing import Any, Protocol
from core.device.hcq import node_open_error
from core.device.host_os import Syscalls
from plugin_nv import GPU_FILES, pushbuf as pb, rm_abi as R
from plugin_nv.qmd import ARCHS, arch_info

PAGE = 4096
PROT_NONE, PROT_READ, PROT_WRITE = 0, 1, 2
MAP_SHARED, MAP_PRIVATE, MAP_FIXED, MAP_ANONYMOUS, MAP_NORESERVE = 0x01, 0x02, 0x10, 0x20, 0x4000

def round_up(n: int, a: int) -> int: return (n + a - 1) // a * a

class DriverOS(Protocol):
  """What the RM code asks of the kernel: open(2), close(2), ioctl(2), mmap(2), munmap(2), and whether a device node exists.
  Failures raise OSError with the kernel's errno."""
  simulated: bool
  def open(self, path: str, flags: int) -> int: ...
  def close(self, fd: int) -> None: ...
  def ioctl(self, fd: int, request: int, arg: ctypes.Structure) -> None: ...
  def mmap(self, addr: int, length: int, prot: int, flags: int, fd: int, offset: int) -> int: ...
  def munmap(self, addr: int, length: int) -> None: ...
  def exists(self, path: str) -> bool: ...

class OSDriver(Syscalls):
  """The real kernel: core's system calls through libc."""

def default_os() -> DriverOS:
  """The kernel, or the simulated driver when NVK_SIM=<arch> is set (one per process and arch, as /dev/nvidiactl is)."""
  if (arch := os.environ.get("NVK_SIM")):
    from plugin_nv.nvk_sim import SimDriver
    return SimDriver.shared(arch)
  return OSDriver()

def gpu_present(drv: DriverOS | None = None) -> bool:
  """/dev/nvidiactl and /dev/nvidia0 exist (nothing is opened): what the hardware tests look for."""
  d = drv if drv is not None else OSDriver()
  return all(d.exists(f) for f in GPU_FILES)

class RMError(OSError):
  """An RM call failed: names the call, the object and the status (or errno)."""

def arch_of(architecture: int, implementation: int) -> str:
  """NV2080_CTRL_CMD_MC_GET_ARCH_INFO -> sm_XY: GA100 implementation 0 is sm_80, the other GA10x sm_86; AD10x sm_89; GH100 sm_90;
  GB10x sm_100; GB20x sm_120."""
  if architecture == R.ARCHITECTURE_GA100: return "sm_80" if implementation == 0 else "sm_86"
  arch = {R.ARCHITECTURE_AD100: "sm_89", R.ARCHITECTURE_GH100: "sm_90", R.ARCHITECTURE_GB100: "sm_100", R.ARCHITECTURE_GB200: "sm_120"}.get(architecture)
  if arch is None: raise RMError(errno.ENODEV, f"NVK+NV: GPU architecture {architecture:#x} is not one this plugin targets ({', '.join(ARCHS)})")
  return arch

def usermode_class(arch: str) -> int: return R.HOPPER_USERMODE_A if arch_info(arch).sm >= 90 else R.VOLTA_USERMODE_A

@dataclasses.dataclass
class GPUMemory:
  """One RM memory object: its address (GPU virtual == host), size, handle, whether it is video memory."""
  va: int
  size: int
  handle: int
  vidmem: bool

@dataclasses.dataclass
class GPFIFOChannel:
  """A channel: its group, context share, GPFIFO channel object, engine object and class, GPFIFO ring and USERD memory, work-submit
  token."""
  group: int
  ctxshare: int
  handle: int
  engine: int
  engine_class: int
  gpfifo: GPUMemory
  entries: int
  userd: GPUMemory
  token: int

def _open_error(path: str, e: OSError) -> RMError:
  return node_open_error(RMError, "NVK+NV", path, e, "the NVIDIA kernel driver, open or proprietary",
                         "Use MOCK+NV for the software GPU, NVK_SIM=sm_90 for the simulated driver, or NULL:NV:PTX:sm_90 to compile only",
                         "the device nodes must be readable and writable by your user (check the nvidia driver's "
                         "NVreg_DeviceFileMode/NVreg_DeviceFileGID, or the 'video' group)")

class RM:
  """One process's RM client on GPU `index`. `os_`: the DriverOS (default: the kernel, or the simulated driver under NVK_SIM)."""
  VA_BASE = 1 << 37   # where host reservations start (below 2**39: the GPU's 40-bit GPFIFO addresses reach them)

  def __init__(self, index: int = 0, os_: DriverOS | None = None):
    self.os = os_ if os_ is not None else default_os()
    self.simulated = self.os.simulated
    self.index, self.lock = index, threading.Lock()
    self._next_handle, self._hint = 0xCF000000, self.VA_BASE
    self._starts: list[int] = []           # sorted addresses of this client's memory (GPU address == host address)
    self._sizes: dict[int, int] = {}
    self._host: dict[int, tuple[int, int]] = {}   # host page range start -> (size, GPU address) of host memory mapped for the GPU
    try: self.ctl = self.os.open("/dev/nvidiactl", os.O_RDWR | os.O_CLOEXEC)
    except OSError as e: raise _open_error("/dev/nvidiactl", e) from None
    self.dev_fd = -1
    self.root = self.alloc(0, R.NV01_ROOT_CLIENT, handle=0)
    probed = self.control(self.root, R.NV0000_CTRL_CMD_GPU_GET_PROBED_IDS, R.NV0000_CTRL_GPU_GET_PROBED_IDS_PARAMS())
    ids = [g for g in probed.gpuIds if g != 0xFFFFFFFF]
    if not 0 <= index < len(ids): raise RMError(errno.ENODEV, f"NVK+NV: GPU {index} asked for, the driver probed {len(ids)}")
    self.gpu_id = ids[index]
    attach = R.NV0000_CTRL_GPU_ATTACH_IDS_PARAMS()
    attach.gpuIds[0] = self.gpu_id
    for i in range(1, R.NV0000_CTRL_GPU_MAX_PROBED_GPUS): attach.gpuIds[i] = 0xFFFFFFFF
    self.control(self.root, R.NV0000_CTRL_CMD_GPU_ATTACH_IDS, attach)
    info = self.control(self.root, R.NV0000_CTRL_CMD_GPU_GET_ID_INFO_V2, R.NV0000_CTRL_GPU_GET_ID_INFO_V2_PARAMS(gpuId=self.gpu_id))
    self.dev_path = f"/dev/nvidia{info.deviceInstance}"
    try: self.dev_fd = self.os.open(self.dev_path, os.O_RDWR | os.O_CLOEXEC)
    except OSError as e: raise _open_error(self.dev_path, e) from None
    self.device = self.alloc(self.root, R.NV01_DEVICE_0, R.NV0080_ALLOC_PARAMETERS(deviceId=info.deviceInstance, hClientShare=self.root))
    self.subdevice = self.alloc(self.device, R.NV20_SUBDEVICE_0, R.NV2080_ALLOC_PARAMETERS(subDeviceId=0))
    ai = self.control(self.subdevice, R.NV2080_CTRL_CMD_MC_GET_ARCH_INFO, R.NV2080_CTRL_MC_GET_ARCH_INFO_PARAMS())
    self.arch = arch_of(ai.architecture, ai.implementation)
    self.usermode = self.alloc(self.subdevice, usermode_class(self.arch))
    self.usermode_addr = self.map_cpu(self.usermode, R.USERMODE_SIZE, parent=self.subdevice)
    self.vaspace = self.alloc(self.device, R.FERMI_VASPACE_A, R.NV_VASPACE_ALLOCATION_PARAMETERS())
    self.virtual = self.alloc(self.device, R.NV50_MEMORY_VIRTUAL, R.NV_MEMORY_VIRTUAL_ALLOCATION_PARAMS(hVASpace=self.vaspace))

  # *** ioctls ***

  def _ioctl(self, esc: int, arg: ctypes.Structure, what: str) -> None:
    try: self.os.ioctl(self.ctl, R.ioctl_request(esc, ctypes.sizeof(arg)), arg)
    except OSError as e: raise RMError(e.errno or errno.EIO, f"NVK+NV: {what}: {e.strerror or e}") from None
    if (st := getattr(arg, "status", 0) or getattr(getattr(arg, "params", None), "status", 0)):
      why = f"; {self.os.explain()}" if self.simulated else ""   # type: ignore[attr-defined]
      raise RMError(errno.EIO, f"NVK+NV: {what}: status {st:#x} ({R.STATUS.get(st, 'unknown')}){why}")

  def _handle(self) -> int:
    with self.lock:
      self._next_handle += 1
      return self._next_handle

  def alloc(self, parent: int, cls: int, params: ctypes.Structure | None = None, handle: int | None = None) -> int:
    """NV_ESC_RM_ALLOC of an object of class `cls` under `parent` (the root client: parent 0, RM picks its handle)."""
    h = self._handle() if handle is None else handle
    a = R.NVOS21_PARAMETERS(hRoot=parent and self.root, hObjectParent=parent, hObjectNew=h, hClass=cls,
                            pAllocParms=ctypes.addressof(params) if params is not None else 0,
                            paramsSize=ctypes.sizeof(params) if params is not None else 0)
    self._ioctl(R.NV_ESC_RM_ALLOC, a, f"RM_ALLOC of class {cls:#x} under {parent:#x}")
    return a.hObjectNew

  def free(self, handle: int, parent: int = 0) -> None:
    a = R.NVOS00_PARAMETERS(hRoot=self.root, hObjectParent=parent or self.root, hObjectOld=handle)
    self._ioctl(R.NV_ESC_RM_FREE, a, f"RM_FREE of {handle:#x}")

  def control(self, obj: int, cmd: int, params: Any) -> Any:
    a = R.NVOS54_PARAMETERS(hClient=self.root, hObject=obj, cmd=cmd, params=ctypes.addressof(params), paramsSize=ctypes.sizeof(params))
    self._ioctl(R.NV_ESC_RM_CONTROL, a, f"RM_CONTROL {cmd:#x} on {obj:#x}")
    return params

  # *** memory ***

  def reserve(self, size: int) -> int:
    """Host address space for a mapping: PROT_NONE, at increasing hints from VA_BASE."""
    with self.lock:
      hint = self._hint
      self._hint += size + PAGE   # a guard page
    return self.os.mmap(hint, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)

  def map_cpu(self, handle: int, size: int, addr: int = 0, parent: int = 0, wc: bool = False) -> int:
    """NV_ESC_RM_MAP_MEMORY of an object through a fresh /dev/nvidia<N> file (registered with the control file), then mmap of
    that file: at `addr` (inside a reservation) or where the kernel puts it."""
    try: fd = self.os.open(self.dev_path, os.O_RDWR | os.O_CLOEXEC)
    except OSError as e: raise _open_error(self.dev_path, e) from None
    self.os.ioctl(fd, R.ioctl_request(R.NV_ESC_REGISTER_FD, ctypes.sizeof(R.nv_ioctl_register_fd_t)), R.nv_ioctl_register_fd_t(ctl_fd=self.ctl))
    p = R.nv_ioctl_nvos33_parameters_with_fd(fd=fd)
    p.params.hClient, p.params.hDevice, p.params.hMemory, p.params.length = self.root, parent or self.device, handle, size
    p.params.pLinearAddress = addr
    p.params.flags = R.NVOS33_FLAGS_CACHING_TYPE_WRITECOMBINED if wc else R.NVOS33_FLAGS_CACHING_TYPE_CACHED
    try:
      self._ioctl(R.NV_ESC_RM_MAP_MEMORY, p, f"RM_MAP_MEMORY of {handle:#x} ({size:#x} bytes)")
      return self.os.mmap(addr, size, PROT_READ | PROT_WRITE, MAP_SHARED | (MAP_FIXED if addr else 0), fd, 0)
    finally: self.os.close(fd)   # the mapping keeps what it needs of the file

  def map_gpu(self, handle: int, size: int, va: int | None) -> int:
    """NV_ESC_RM_MAP_MEMORY_DMA of memory into the virtual memory object: at GPU address `va` (DMA_OFFSET_FIXED), or where RM
    places it (None); returns the GPU address."""
    flags = R.NVOS46_FLAGS_CACHE_SNOOP_ENABLE | R.NVOS46_FLAGS_PAGE_SIZE_4KB | (R.NVOS46_FLAGS_DMA_OFFSET_FIXED if va is not None else 0)
    p = R.NVOS46_PARAMETERS(hClient=self.root, hDevice=self.device, hDma=self.virtual, hMemory=handle, offset=0, length=size,
                            dmaOffset=va or 0, flags=flags)
    self._ioctl(R.NV_ESC_RM_MAP_MEMORY_DMA, p, f"RM_MAP_MEMORY_DMA of {handle:#x}" + (f" at {va:#x}" if va is not None else ""))
    return p.dmaOffset

  def alloc_memory(self, size: int, vidmem: bool = False) -> GPUMemory:
    """Video memory (NV01_MEMORY_LOCAL_USER, CPU access through BAR1, write-combined) or host memory (NV01_MEMORY_SYSTEM, cached),
    mapped for the CPU and the GPU at one address."""
    size = round_up(max(size, 1), PAGE)
    attr = R.NVOS32_ATTR_PAGE_SIZE_4KB | R.NVOS32_ATTR_PHYSICALITY_ALLOW_NONCONTIGUOUS
    attr |= R.NVOS32_ATTR_LOCATION_VIDMEM | R.NVOS32_ATTR_COHERENCY_WRITE_COMBINE if vidmem else R.NVOS32_ATTR_LOCATION_PCI | R.NVOS32_ATTR_COHERENCY_CACHED
    params = R.NV_MEMORY_ALLOCATION_PARAMS(owner=self.root, type=R.NVOS32_TYPE_IMAGE, flags=R.NVOS32_ALLOC_FLAGS_ALIGNMENT_FORCE, size=size,
                                           alignment=PAGE, attr=attr, attr2=R.NVOS32_ATTR2_GPU_CACHEABLE_YES if vidmem else R.NVOS32_ATTR2_GPU_CACHEABLE_NO)
    handle = self.alloc(self.device, R.NV01_MEMORY_LOCAL_USER if vidmem else R.NV01_MEMORY_SYSTEM, params)
    addr = self.reserve(size)
    try:
      self.map_cpu(handle, size, addr, wc=vidmem)
      self.map_gpu(handle, size, addr)
    except BaseException:
      self.os.munmap(addr, size)
      self.free(handle, self.device)
      raise
    with self.lock:
      bisect.insort(self._starts, addr)
      self._sizes[addr] = size
    return GPUMemory(addr, size, handle, vidmem)

  def free_memory(self, mem: GPUMemory) -> None:
    """Frees the object (RM drops its CPU and GPU mappings with it) and the host range."""
    with self.lock:
      self._starts.pop(bisect.bisect_left(self._starts, mem.va))
      del self._sizes[mem.va]
    self.free(mem.handle, self.device)
    self.os.munmap(mem.va, mem.size)

  def owns(self, addr: int) -> bool:
    """Whether `addr` lies in memory this client allocated (whose GPU address is its host address)."""
    with self.lock:
      i = bisect.bisect_right(self._starts, addr) - 1
      return i >= 0 and addr < self._starts[i] + self._sizes[self._starts[i]]

  def gpu_address(self, addr: int, size: int) -> int:
    """The GPU address of host memory [addr, addr + size): the host address for this client's memory; other memory (another
    device's semaphore) is described to RM by its pages (NV01_MEMORY_SYSTEM_OS_DESCRIPTOR through NV_ESC_RM_ALLOC_MEMORY) and
    mapped where RM places it, once per page range."""
    if self.owns(addr): return addr
    start, end = addr // PAGE * PAGE, round_up(addr + size, PAGE)
    with self.lock:
      for s, (n, va) in self._host.items():
        if s <= start and end <= s + n: return va + addr - s
    p = R.nv_ioctl_nvos02_parameters_with_fd(fd=-1)
    p.params.hRoot, p.params.hObjectParent, p.params.hObjectNew = self.root, self.device, self._handle()
    p.params.hClass, p.params.pMemory, p.params.limit = R.NV01_MEMORY_SYSTEM_OS_DESCRIPTOR, start, end - start - 1
    p.params.flags = R.NVOS02_FLAGS_PHYSICALITY_NONCONTIGUOUS | R.NVOS02_FLAGS_LOCATION_PCI | R.NVOS02_FLAGS_COHERENCY_CACHED
    self._ioctl(R.NV_ESC_RM_ALLOC_MEMORY, p, f"RM_ALLOC_MEMORY of host memory [{start:#x}, {end:#x})")
    va = self.map_gpu(p.params.hObjectNew, end - start, None)
    with self.lock: self._host[start] = (end - start, va)
    return va + addr - start

  # *** channels ***

  def channel(self, engine: str, entries: int = 1024) -> GPFIFOChannel:
    """A channel group with one GPFIFO channel holding the arch's compute (`engine` "compute") or copy object, scheduled; its
    work-submit token for the usermode doorbell."""
    info = arch_info(self.arch)
    cls = info.compute_class if engine == "compute" else info.copy_class
    group = self.alloc(self.device, R.KEPLER_CHANNEL_GROUP_A, R.NV_CHANNEL_GROUP_ALLOCATION_PARAMETERS(
      hVASpace=self.vaspace, engineType=R.NV2080_ENGINE_TYPE_GRAPHICS if engine == "compute" else R.NV2080_ENGINE_TYPE_COPY0))
    ctxshare = self.alloc(group, R.FERMI_CONTEXT_SHARE_A, R.NV_CTXSHARE_ALLOCATION_PARAMETERS(hVASpace=self.vaspace))
    gpfifo, userd = self.alloc_memory(entries * 8), self.alloc_memory(PAGE)
    notifier = self.alloc_memory(PAGE)
    p = R.NV_CHANNEL_ALLOC_PARAMS(hObjectError=notifier.handle, hObjectBuffer=gpfifo.handle, gpFifoOffset=gpfifo.va, gpFifoEntries=entries,
                                  hContextShare=ctxshare, hVASpace=self.vaspace)
    p.hUserdMemory[0], p.userdOffset[0] = userd.handle, 0
    ch = self.alloc(group, info.host_class, p)
    obj = self.alloc(ch, cls)
    token = self.control(ch, R.NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN, R.NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN_PARAMS()).workSubmitToken
    self.control(group, R.NVA06C_CTRL_CMD_GPFIFO_SCHEDULE, R.NVA06C_CTRL_GPFIFO_SCHEDULE_PARAMS(bEnable=1))
    return GPFIFOChannel(group, ctxshare, ch, obj, cls, gpfifo, entries, userd, token)

  def ring_doorbell(self, token: int) -> None:
    """Tells the GPU a channel has new GPFIFO entries: its work-submit token to NOTIFY_CHANNEL_PENDING in the usermode page."""
    ctypes.c_uint32.from_address(self.usermode_addr + pb.NOTIFY_CHANNEL_PENDING).value = token

  def close(self) -> None:
    try:
      if self.dev_fd >= 0: self.os.close(self.dev_fd)
      self.os.close(self.ctl)
    except OSError: pass
