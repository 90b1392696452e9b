"""The Linux /dev/kfd interface: ioctl structures and numbers from include/uapi/linux/kfd_ioctl.h, the OS seam (`OSBackend`: open,
ioctl, mmap, sysfs) and a driver class over it. The layouts and numbers are unit-tested against the header; the KFD class runs in CI
over the simulated driver (kfd_sim.py, selected with AMD_KFD_SIM=<arch>) and has NEVER RUN ON AMD HARDWARE."""
from __future__ import annotations
import ctypes, dataclasses, errno, os
from typing import Any
from core.device.hcq import node_open_error
from core.device.host_os import Syscalls

# Linux asm-generic/ioctl.h: nr bits [7:0], type [15:8], size [29:16] (14 bits), direction [31:30]
_IOC_NONE, _IOC_WRITE, _IOC_READ = 0, 1, 2
def _IOC(direction: int, typ: int, nr: int, size: int) -> int:
  if not 0 <= size < 1 << 14: raise ValueError(f"ioctl argument of {size} bytes does not fit the 14-bit size field")
  return direction << 30 | size << 16 | typ << 8 | nr
def _IOR(typ: int, nr: int, struct: type) -> int: return _IOC(_IOC_READ, typ, nr, ctypes.sizeof(struct))
def _IOW(typ: int, nr: int, struct: type) -> int: return _IOC(_IOC_WRITE, typ, nr, ctypes.sizeof(struct))
def _IOWR(typ: int, nr: int, struct: type) -> int: return _IOC(_IOC_READ | _IOC_WRITE, typ, nr, ctypes.sizeof(struct))

AMDKFD_IOCTL_BASE = ord("K")
u32, u64 = ctypes.c_uint32, ctypes.c_uint64

class _S(ctypes.Structure):
  def __repr__(self) -> str: return f"{type(self).__name__}(" + ", ".join(f"{n}={getattr(self, n)}" for n, *_ in self._fields_) + ")"

class GetVersionArgs(_S): _fields_ = [("major_version", u32), ("minor_version", u32)]
class CreateQueueArgs(_S):
  _fields_ = [("ring_base_address", u64), ("write_pointer_address", u64), ("read_pointer_address", u64), ("doorbell_offset", u64),
              ("ring_size", u32), ("gpu_id", u32), ("queue_type", u32), ("queue_percentage", u32), ("queue_priority", u32),
              ("queue_id", u32), ("eop_buffer_address", u64), ("eop_buffer_size", u64), ("ctx_save_restore_address", u64),
              ("ctx_save_restore_size", u32), ("ctl_stack_size", u32)]
class DestroyQueueArgs(_S): _fields_ = [("queue_id", u32), ("pad", u32)]
class ProcessDeviceApertures(_S):
  _fields_ = [("lds_base", u64), ("lds_limit", u64), ("scratch_base", u64), ("scratch_limit", u64), ("gpuvm_base", u64),
              ("gpuvm_limit", u64), ("gpu_id", u32), ("pad", u32)]
class GetProcessAperturesNewArgs(_S): _fields_ = [("kfd_process_device_apertures_ptr", u64), ("num_of_nodes", u32), ("pad", u32)]
class CreateEventArgs(_S):
  _fields_ = [("event_page_offset", u64), ("event_trigger_data", u32), ("event_type", u32), ("auto_reset", u32), ("node_id", u32),
              ("event_id", u32), ("event_slot_index", u32)]
class DestroyEventArgs(_S): _fields_ = [("event_id", u32), ("pad", u32)]
class SetEventArgs(_S): _fields_ = [("event_id", u32), ("pad", u32)]
class ResetEventArgs(_S): _fields_ = [("event_id", u32), ("pad", u32)]
class MemoryExceptionFailure(_S): _fields_ = [("NotPresent", u32), ("ReadOnly", u32), ("NoExecute", u32), ("imprecise", u32)]
class HsaMemoryExceptionData(_S): _fields_ = [("failure", MemoryExceptionFailure), ("va", u64), ("gpu_id", u32), ("pad", u32)]
class HsaHwExceptionData(_S): _fields_ = [("reset_type", u32), ("reset_cause", u32), ("memory_lost", u32), ("gpu_id", u32)]
class _EventDataUnion(ctypes.Union): _fields_ = [("memory_exception_data", HsaMemoryExceptionData), ("hw_exception_data", HsaHwExceptionData)]
class EventData(_S): _anonymous_ = ("u",); _fields_ = [("u", _EventDataUnion), ("kfd_event_data_ext", u64), ("event_id", u32), ("pad", u32)]
class WaitEventsArgs(_S): _fields_ = [("events_ptr", u64), ("num_events", u32), ("wait_for_all", u32), ("timeout", u32), ("wait_result", u32)]
class AcquireVmArgs(_S): _fields_ = [("drm_fd", u32), ("gpu_id", u32)]
class AllocMemoryOfGpuArgs(_S):
  _fields_ = [("va_addr", u64), ("size", u64), ("handle", u64), ("mmap_offset", u64), ("gpu_id", u32), ("flags", u32)]
class FreeMemoryOfGpuArgs(_S): _fields_ = [("handle", u64)]
class MapMemoryToGpuArgs(_S): _fields_ = [("handle", u64), ("device_ids_array_ptr", u64), ("n_devices", u32), ("n_success", u32)]
class UnmapMemoryFromGpuArgs(_S): _fields_ = [("handle", u64), ("device_ids_array_ptr", u64), ("n_devices", u32), ("n_success", u32)]

# ioctl numbers, as the header's AMDKFD_IOR/IOW/IOWR(nr, struct) lines define them
IOC = {
  "GET_VERSION": _IOR(AMDKFD_IOCTL_BASE, 0x01, GetVersionArgs),
  "CREATE_QUEUE": _IOWR(AMDKFD_IOCTL_BASE, 0x02, CreateQueueArgs),
  "DESTROY_QUEUE": _IOWR(AMDKFD_IOCTL_BASE, 0x03, DestroyQueueArgs),
  "CREATE_EVENT": _IOWR(AMDKFD_IOCTL_BASE, 0x08, CreateEventArgs),
  "DESTROY_EVENT": _IOW(AMDKFD_IOCTL_BASE, 0x09, DestroyEventArgs),
  "SET_EVENT": _IOW(AMDKFD_IOCTL_BASE, 0x0A, SetEventArgs),
  "RESET_EVENT": _IOW(AMDKFD_IOCTL_BASE, 0x0B, ResetEventArgs),
  "WAIT_EVENTS": _IOWR(AMDKFD_IOCTL_BASE, 0x0C, WaitEventsArgs),
  "GET_PROCESS_APERTURES_NEW": _IOWR(AMDKFD_IOCTL_BASE, 0x14, GetProcessAperturesNewArgs),
  "ACQUIRE_VM": _IOW(AMDKFD_IOCTL_BASE, 0x15, AcquireVmArgs),
  "ALLOC_MEMORY_OF_GPU": _IOWR(AMDKFD_IOCTL_BASE, 0x16, AllocMemoryOfGpuArgs),
  "FREE_MEMORY_OF_GPU": _IOW(AMDKFD_IOCTL_BASE, 0x17, FreeMemoryOfGpuArgs),
  "MAP_MEMORY_TO_GPU": _IOWR(AMDKFD_IOCTL_BASE, 0x18, MapMemoryToGpuArgs),
  "UNMAP_MEMORY_FROM_GPU": _IOWR(AMDKFD_IOCTL_BASE, 0x19, UnmapMemoryFromGpuArgs),
}
IOC_NAME = {v: k for k, v in IOC.items()}
ARGS = {"GET_VERSION": GetVersionArgs, "CREATE_QUEUE": CreateQueueArgs, "DESTROY_QUEUE": DestroyQueueArgs, "CREATE_EVENT": CreateEventArgs,
        "DESTROY_EVENT": DestroyEventArgs, "SET_EVENT": SetEventArgs, "RESET_EVENT": ResetEventArgs, "WAIT_EVENTS": WaitEventsArgs,
        "GET_PROCESS_APERTURES_NEW": GetProcessAperturesNewArgs, "ACQUIRE_VM": AcquireVmArgs, "ALLOC_MEMORY_OF_GPU": AllocMemoryOfGpuArgs,
        "FREE_MEMORY_OF_GPU": FreeMemoryOfGpuArgs, "MAP_MEMORY_TO_GPU": MapMemoryToGpuArgs, "UNMAP_MEMORY_FROM_GPU": UnmapMemoryFromGpuArgs}

QUEUE_TYPE_COMPUTE, QUEUE_TYPE_SDMA, QUEUE_TYPE_COMPUTE_AQL = 0, 1, 2
KFD_MAX_QUEUE_PERCENTAGE, KFD_MAX_QUEUE_PRIORITY = 100, 15
EVENT_SIGNAL = 0
MEM_VRAM, MEM_GTT, MEM_USERPTR, MEM_DOORBELL = 1 << 0, 1 << 1, 1 << 2, 1 << 3
MEM_WRITABLE, MEM_EXECUTABLE, MEM_PUBLIC, MEM_NO_SUBSTITUTE, MEM_AQL_QUEUE_MEM, MEM_COHERENT = 1 << 31, 1 << 30, 1 << 29, 1 << 28, 1 << 27, 1 << 26
MEM_UNCACHED = 1 << 25

TOPOLOGY = "/sys/devices/virtual/kfd/kfd/topology/nodes"
PAGE = 4096
DOORBELL_SLICE = 0x2000   # a process's doorbells on one GPU (SOC15: 1024 queues x 8 bytes); mmap'd whole, as the driver requires
ENOTSUPP = 524            # the kernel's "operation not supported" (include/linux/errno.h), what CREATE_QUEUE returns for a bad type

PROT_NONE, PROT_READ, PROT_WRITE = 0, 1, 2
MAP_SHARED, MAP_PRIVATE, MAP_FIXED, MAP_ANONYMOUS, MAP_NORESERVE = 0x01, 0x02, 0x10, 0x20, 0x4000

def round_up(n: int, a: int) -> int: return (n + a - 1) // a * a

class KFDError(OSError):
  """A /dev/kfd operation failed; names the ioctl (or step) and the errno."""

# *** the OS seam: everything the driver class asks of the kernel ***

class OSBackend(Syscalls):
  """core's system calls on the real kernel, and sysfs reads. kfd_sim.SimDriver implements the same methods over host memory;
  `KFD(backend=...)` takes either. Failures raise OSError with the kernel's errno."""
  def __init__(self) -> None:
    super().__init__()
    self.faults: list[str] = []   # queue faults the backend saw itself (the simulated driver's; the kernel reports none here)

  def read_text(self, path: str) -> str:
    with open(path) as f: return f.read()
  def listdir(self, path: str) -> list[str]: return os.listdir(path)

def default_backend() -> Any:
  """The real kernel, or the simulated driver when AMD_KFD_SIM=<arch> is set (one per process and arch, like /dev/kfd)."""
  if (arch := os.environ.get("AMD_KFD_SIM")):
    from plugin_amd.kfd_sim import SimDriver
    return SimDriver.shared(arch)
  return OSBackend()

# *** topology ***

def arch_of_version(v: int) -> str:
  """gfx_target_version (major*10000 + minor*100 + stepping, as KFD's topology writes it) -> the LLVM arch name, e.g. 90010 ->
  gfx90a, 110000 -> gfx1100."""
  major, minor, step = v // 10000, v // 100 % 100, v % 100
  return f"gfx{major}{minor:x}{step:x}"

@dataclasses.dataclass(frozen=True)
class QueueSizes:
  """Per-queue buffer sizes the driver checks at CREATE_QUEUE (kfd_queue.c): EOP buffer, control stack, context save area."""
  eop: int
  ctl_stack: int
  cwsr: int
  debug_memory: int
  num_xcc: int

  @property
  def cwsr_total(self) -> int:
    """Bytes of the context save BO: the save area plus the debugger's per-wave memory, per XCC, page aligned."""
    return round_up((self.cwsr + self.debug_memory) * self.num_xcc, PAGE)

def queue_sizes(props: dict[str, int]) -> QueueSizes:
  """The sizes a compute queue's EOP buffer and CWSR area must have, from the node's properties. Recent kernels export cwsr_size and
  ctl_stack_size; otherwise they are worked out the way the driver works them out (from the CU count and the GFX version)."""
  gfxv, xcc = props["gfx_target_version"], max(props.get("num_xcc", 1), 1)
  cu = props["simd_count"] // max(props["simd_per_cu"], 1) // xcc
  waves = min(cu * 40, props["array_count"] // max(props["simd_arrays_per_engine"], 1) * 512) if gfxv < 100100 else cu * 32
  vgpr = 0x80000 if gfxv in (90402, 90010, 90008, 90500) else 0x60000 if gfxv in (110000, 110001, 120000, 120001) else 0x40000
  lds = props.get("lds_size_in_kb", 64) << 10 if gfxv == 90500 else 0x10000
  wg_data = round_up(cu * (vgpr + 0x4000 + lds + 0x1000), PAGE)   # VGPRs, SGPRs, LDS and hardware registers of every CU
  ctl = round_up(40 + waves * (12 if gfxv >= 100100 else 8) + 8, PAGE)   # save area header + per-wave control stack entries
  if gfxv // 10000 == 10: ctl = min(ctl, 0x7000)
  ctl = props.get("ctl_stack_size", ctl)
  cwsr = props.get("cwsr_size", round_up(ctl + wg_data, PAGE))
  return QueueSizes(eop=props.get("eop_buffer_size", 4096), ctl_stack=ctl, cwsr=cwsr, debug_memory=round_up(waves * 32, 64), num_xcc=xcc)

def gpu_present(backend: Any = None) -> bool:
  """/dev/kfd exists and the topology lists a GPU node (nothing is opened): what the hardware tests need."""
  b = backend if backend is not None else OSBackend()
  if not b.exists("/dev/kfd") or not b.exists(TOPOLOGY): return False
  try: return any(int(b.read_text(f"{TOPOLOGY}/{n}/gpu_id").strip() or 0) for n in b.listdir(TOPOLOGY))
  except (OSError, ValueError): return False

# *** the driver ***

@dataclasses.dataclass
class GPUMemory:
  """One buffer object: GPU virtual address == host address (the range is reserved with mmap first), size, KFD handle, flags."""
  va: int
  size: int
  handle: int
  flags: int
  cpu: bool   # mapped for the host

@dataclasses.dataclass(frozen=True)
class Queue:
  queue_id: int
  doorbell: int   # host address of the queue's 64-bit doorbell

def _open_error(path: str, e: OSError) -> KFDError:
  return node_open_error(KFDError, "KFD+AMD", path, e, "the amdgpu kernel driver with KFD",
                         "Use MOCK+AMD for the software GPU, or NULL:AMD:gfx1100 to compile only",
                         "your user must be in the group that owns it (usually 'render', on some systems 'video'): sudo usermod -aG "
                         "render,video $USER, then log in again")

class KFD:
  """A /dev/kfd driver: opens the GPU node named by the topology, acquires its VM, allocates and maps memory, creates PM4 compute and
  SDMA queues with doorbells. `backend`: the OS seam (default: the real kernel, or the simulated driver under AMD_KFD_SIM)."""
  def __init__(self, node: int | None = None, backend: Any = None):
    self.os = backend if backend is not None else default_backend()
    self.simulated: bool = self.os.simulated
    try: self.fd = self.os.open("/dev/kfd", os.O_RDWR | os.O_CLOEXEC)
    except OSError as e: raise _open_error("/dev/kfd", e) from None
    self.drm_fd = -1
    self.doorbell_page: int | None = None
    try: self._init(node)
    except BaseException:
      self.close()
      raise

  def _init(self, node: int | None) -> None:
    gpus = self.gpu_nodes()
    if not gpus: raise KFDError(errno.ENODEV, f"KFD+AMD: /dev/kfd exists but the topology ({TOPOLOGY}) lists no GPU node")
    if node is not None and not 0 <= node < len(gpus): raise KFDError(errno.ENODEV, f"KFD+AMD: GPU {node} asked for, there are {len(gpus)}")
    self.node, self.gpu_id, self.properties = gpus[node or 0]
    self.arch = arch_of_version(self.properties["gfx_target_version"])
    from plugin_amd.renderer import ARCHS
    if self.arch not in ARCHS:
      raise KFDError(errno.ENODEV, f"KFD+AMD: the GPU is {self.arch} (gfx_target_version {self.properties['gfx_target_version']}), which "
                                   f"this plugin does not target: it supports {', '.join(ARCHS)}")
    self.sizes = queue_sizes(self.properties)
    render = f"/dev/dri/renderD{self.properties['drm_render_minor']}"
    try: self.drm_fd = self.os.open(render, os.O_RDWR | os.O_CLOEXEC)
    except OSError as e: raise _open_error(render, e) from None
    major, minor = self.version()
    if major != 1: raise KFDError(errno.EPROTO, f"KFD+AMD: the driver's KFD ioctl interface is version {major}.{minor}, this plugin speaks 1.x")
    self.ioctl("ACQUIRE_VM", AcquireVmArgs(drm_fd=self.drm_fd, gpu_id=self.gpu_id))

  def gpu_nodes(self) -> list[tuple[int, int, dict[str, int]]]:
    """(node index, gpu_id, properties) of every GPU node in the topology (CPU nodes have gpu_id 0)."""
    if not self.os.exists(TOPOLOGY): return []
    out = []
    for name in sorted(self.os.listdir(TOPOLOGY), key=int):
      gpu_id = int(self.os.read_text(f"{TOPOLOGY}/{name}/gpu_id").strip() or 0)
      if not gpu_id: continue
      props = {}
      for line in self.os.read_text(f"{TOPOLOGY}/{name}/properties").splitlines():
        if len(kv := line.split()) == 2: props[kv[0]] = int(kv[1])
      out.append((int(name), gpu_id, props))
    return out

  def ioctl(self, name: str, args: ctypes.Structure) -> Any:
    try: self.os.ioctl(self.fd, IOC[name], args)
    except OSError as e:
      # the real kernel gives only the errno; the simulated driver also says which check failed
      why = f" ({e.strerror})" if e.strerror and e.strerror != os.strerror(e.errno or 0) else ""
      raise KFDError(e.errno, f"KFD ioctl {name} ({IOC[name]:#x}) failed: {os.strerror(e.errno or 0)}{why}; {args}") from None
    return args

  def version(self) -> tuple[int, int]:
    v = self.ioctl("GET_VERSION", GetVersionArgs())
    return v.major_version, v.minor_version

  # *** memory ***

  def alloc(self, size: int, flags: int, cpu: bool = True) -> GPUMemory:
    """A buffer object at a fresh address: the range is reserved with an inaccessible host mapping (so the GPU address equals the host
    address), allocated with ALLOC_MEMORY_OF_GPU at it, mapped for the host over the reservation when `cpu`, then into the GPU's page
    tables with MAP_MEMORY_TO_GPU."""
    size = round_up(max(size, 1), PAGE)
    va = self.os.mmap(0, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
    try:
      mem = self.ioctl("ALLOC_MEMORY_OF_GPU", AllocMemoryOfGpuArgs(va_addr=va, size=size, gpu_id=self.gpu_id, flags=flags))
    except BaseException:
      self.os.munmap(va, size)
      raise
    m = GPUMemory(va, size, mem.handle, flags, cpu)
    try:
      if cpu:
        try: self.os.mmap(va, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, self.drm_fd, mem.mmap_offset)
        except OSError as e: raise KFDError(e.errno, f"KFD: mapping buffer object {m.handle:#x} for the host failed: {e.strerror}") from None
      self._map(m)
    except BaseException:
      self.ioctl("FREE_MEMORY_OF_GPU", FreeMemoryOfGpuArgs(handle=m.handle))
      self.os.munmap(va, size)
      raise
    return m

  def map_host(self, addr: int, size: int) -> GPUMemory:
    """Host memory someone else allocated (another device's signal page), mapped into the GPU's page tables at the same address
    (USERPTR): the range is widened to whole pages."""
    start = addr // PAGE * PAGE
    n = round_up(addr + size, PAGE) - start
    mem = self.ioctl("ALLOC_MEMORY_OF_GPU", AllocMemoryOfGpuArgs(va_addr=start, size=n, gpu_id=self.gpu_id, mmap_offset=start,
                                                                  flags=MEM_USERPTR | MEM_WRITABLE | MEM_COHERENT))
    m = GPUMemory(start, n, mem.handle, MEM_USERPTR, cpu=False)
    self._map(m)
    return m

  def _map(self, m: GPUMemory) -> None:
    ids = (u32 * 1)(self.gpu_id)
    self.ioctl("MAP_MEMORY_TO_GPU", MapMemoryToGpuArgs(handle=m.handle, device_ids_array_ptr=ctypes.addressof(ids), n_devices=1))

  def free(self, m: GPUMemory) -> None:
    ids = (u32 * 1)(self.gpu_id)
    self.ioctl("UNMAP_MEMORY_FROM_GPU", UnmapMemoryFromGpuArgs(handle=m.handle, device_ids_array_ptr=ctypes.addressof(ids), n_devices=1))
    self.ioctl("FREE_MEMORY_OF_GPU", FreeMemoryOfGpuArgs(handle=m.handle))
    if not m.flags & MEM_USERPTR: self.os.munmap(m.va, m.size)   # the host mapping, or the reservation when there was none

  # *** queues ***

  def create_queue(self, queue_type: int, ring: GPUMemory, rw: GPUMemory, eop: GPUMemory | None = None, cwsr: GPUMemory | None = None) -> Queue:
    """A PM4 compute (QUEUE_TYPE_COMPUTE) or SDMA queue over `ring` (the whole buffer object), with the read pointer at rw+0 and the
    write pointer at rw+8 (the driver wants both in the first page of their buffer object), and for compute an EOP buffer and a
    context save area sized by `self.sizes`. Maps the process's doorbell slice once and returns the queue's doorbell address."""
    compute = queue_type != QUEUE_TYPE_SDMA
    q = self.ioctl("CREATE_QUEUE", CreateQueueArgs(
      ring_base_address=ring.va, ring_size=ring.size, gpu_id=self.gpu_id, queue_type=queue_type,
      queue_percentage=KFD_MAX_QUEUE_PERCENTAGE, queue_priority=7, read_pointer_address=rw.va, write_pointer_address=rw.va + 8,
      eop_buffer_address=eop.va if compute and eop else 0, eop_buffer_size=self.sizes.eop if compute and eop else 0,
      ctx_save_restore_address=cwsr.va if compute and cwsr else 0, ctx_save_restore_size=self.sizes.cwsr if compute and cwsr else 0,
      ctl_stack_size=self.sizes.ctl_stack if compute and cwsr else 0))
    if self.doorbell_page is None:
      self.doorbell_page = self.os.mmap(0, DOORBELL_SLICE, PROT_READ | PROT_WRITE, MAP_SHARED, self.fd, q.doorbell_offset & ~(DOORBELL_SLICE - 1))
    return Queue(q.queue_id, self.doorbell_page + (q.doorbell_offset & (DOORBELL_SLICE - 1)))

  def destroy_queue(self, queue_id: int) -> None: self.ioctl("DESTROY_QUEUE", DestroyQueueArgs(queue_id=queue_id))

  def close(self) -> None:
    if self.doorbell_page is not None: self.os.munmap(self.doorbell_page, DOORBELL_SLICE)
    self.doorbell_page = None
    if self.drm_fd >= 0: self.os.close(self.drm_fd)
    self.drm_fd = -1
    if self.fd >= 0: self.os.close(self.fd)
    self.fd = -1
