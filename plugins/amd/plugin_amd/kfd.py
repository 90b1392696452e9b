"""The Linux /dev/kfd interface: ioctl structures and numbers from include/uapi/linux/kfd_ioctl.h, and a thin driver class.
UNTESTED WITHOUT AMD HARDWARE: the layouts and numbers are unit-tested against the header; the KFD class never ran here."""
from __future__ import annotations
import ctypes, ctypes.util, mmap, os, pathlib
from typing import Any

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

QUEUE_TYPE_COMPUTE, QUEUE_TYPE_SDMA, QUEUE_TYPE_COMPUTE_AQL = 0, 1, 2
KFD_MAX_QUEUE_PERCENTAGE, KFD_MAX_QUEUE_PRIORITY = 100, 15
EVENT_SIGNAL = 0
MEM_VRAM, MEM_GTT, MEM_USERPTR, MEM_DOORBELL = 1 << 0, 1 << 1, 1 << 2, 1 << 3
MEM_WRITABLE, MEM_EXECUTABLE, MEM_PUBLIC, MEM_NO_SUBSTITUTE, MEM_AQL_QUEUE_MEM, MEM_COHERENT = 1 << 31, 1 << 30, 1 << 29, 1 << 28, 1 << 27, 1 << 26

TOPOLOGY = pathlib.Path("/sys/devices/virtual/kfd/kfd/topology/nodes")

class KFDError(OSError):
  """An ioctl on /dev/kfd failed; names the ioctl and the errno."""

class KFD:
  """A thin /dev/kfd driver: open, VM, memory, queues with doorbells, events. UNTESTED WITHOUT AMD HARDWARE."""
  def __init__(self, node: int | None = None):
    self.libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    self.fd = os.open("/dev/kfd", os.O_RDWR | os.O_CLOEXEC)
    nodes = [n for n in sorted(TOPOLOGY.iterdir(), key=lambda p: int(p.name)) if int((n / "gpu_id").read_text() or 0)] if TOPOLOGY.exists() else []
    if not nodes: raise KFDError(f"no GPU node under {TOPOLOGY}")
    self.node = nodes[node or 0]
    self.gpu_id = int((self.node / "gpu_id").read_text())
    props = dict(line.split() for line in (self.node / "properties").read_text().splitlines() if len(line.split()) == 2)
    self.properties = {k: int(v) for k, v in props.items()}
    render = self.properties.get("drm_render_minor")
    self.drm_fd = os.open(f"/dev/dri/renderD{render}", os.O_RDWR | os.O_CLOEXEC)
    self.ioctl("ACQUIRE_VM", AcquireVmArgs(drm_fd=self.drm_fd, gpu_id=self.gpu_id))
    self.doorbell_page: mmap.mmap | None = None

  def ioctl(self, name: str, args: ctypes.Structure) -> Any:
    if self.libc.ioctl(self.fd, ctypes.c_ulong(IOC[name]), ctypes.byref(args)) < 0:
      err = ctypes.get_errno()
      raise KFDError(err, f"KFD ioctl {name} ({IOC[name]:#x}) failed: {os.strerror(err)}")
    return args

  def version(self) -> tuple[int, int]:
    v = self.ioctl("GET_VERSION", GetVersionArgs())
    return v.major_version, v.minor_version

  def alloc(self, size: int, flags: int, va_addr: int = 0, map_to_gpu: bool = True) -> AllocMemoryOfGpuArgs:
    """Allocate GPU memory at va_addr (the caller reserves the range), mapping it into this GPU's page tables."""
    mem = self.ioctl("ALLOC_MEMORY_OF_GPU", AllocMemoryOfGpuArgs(va_addr=va_addr, size=size, gpu_id=self.gpu_id, flags=flags))
    if map_to_gpu:
      ids = (u32 * 1)(self.gpu_id)
      self.ioctl("MAP_MEMORY_TO_GPU", MapMemoryToGpuArgs(handle=mem.handle, device_ids_array_ptr=ctypes.addressof(ids), n_devices=1))
    return mem

  def free(self, mem: AllocMemoryOfGpuArgs) -> None:
    ids = (u32 * 1)(self.gpu_id)
    self.ioctl("UNMAP_MEMORY_FROM_GPU", UnmapMemoryFromGpuArgs(handle=mem.handle, device_ids_array_ptr=ctypes.addressof(ids), n_devices=1))
    self.ioctl("FREE_MEMORY_OF_GPU", FreeMemoryOfGpuArgs(handle=mem.handle))

  def create_queue(self, queue_type: int, ring_addr: int, ring_size: int, rptr_addr: int, wptr_addr: int, eop_addr: int = 0,
                   eop_size: int = 0, ctx_save_addr: int = 0, ctx_save_size: int = 0, ctl_stack_size: int = 0) -> tuple[CreateQueueArgs, int]:
    """Create a compute (PM4) or SDMA queue; returns the args and the host address of its doorbell (a 64-bit slot)."""
    q = self.ioctl("CREATE_QUEUE", CreateQueueArgs(
      ring_base_address=ring_addr, ring_size=ring_size, gpu_id=self.gpu_id, queue_type=queue_type,
      queue_percentage=KFD_MAX_QUEUE_PERCENTAGE, queue_priority=7, write_pointer_address=wptr_addr, read_pointer_address=rptr_addr,
      eop_buffer_address=eop_addr, eop_buffer_size=eop_size, ctx_save_restore_address=ctx_save_addr,
      ctx_save_restore_size=ctx_save_size, ctl_stack_size=ctl_stack_size))
    page = mmap.PAGESIZE
    if self.doorbell_page is None:   # the doorbell page of this process, mapped from /dev/kfd at the returned offset
      self.doorbell_page = mmap.mmap(self.fd, 0x2000, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE, offset=q.doorbell_offset & ~(page - 1))
    base = ctypes.addressof(ctypes.c_char.from_buffer(self.doorbell_page))
    return q, base + (q.doorbell_offset & (page - 1) & 0x1FFF)

  def destroy_queue(self, queue_id: int) -> None: self.ioctl("DESTROY_QUEUE", DestroyQueueArgs(queue_id=queue_id))

  def create_event(self, auto_reset: bool = True) -> CreateEventArgs:
    return self.ioctl("CREATE_EVENT", CreateEventArgs(event_type=EVENT_SIGNAL, auto_reset=int(auto_reset)))

  def wait_event(self, event_id: int, timeout_ms: int) -> int:
    data = EventData(event_id=event_id)
    return self.ioctl("WAIT_EVENTS", WaitEventsArgs(events_ptr=ctypes.addressof(data), num_events=1, wait_for_all=1, timeout=timeout_ms)).wait_result

  def close(self) -> None:
    if self.doorbell_page is not None: self.doorbell_page.close()
    os.close(self.drm_fd)
    os.close(self.fd)
