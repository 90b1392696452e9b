"""A simulated /dev/kfd: the OS seam of kfd.py (open, ioctl, mmap, sysfs) over host memory, so KFD+AMD runs in CI without a GPU.

Selected with AMD_KFD_SIM=<arch> (gfx90a, gfx942, gfx950, gfx1100, gfx1201). It serves a fake topology for that arch, and the ioctls
iface_kfd.py uses: GET_VERSION, ACQUIRE_VM, ALLOC/FREE/MAP/UNMAP memory, CREATE/DESTROY_QUEUE, and the doorbell slice (mmap of /dev/kfd).
Every argument struct is checked the way kfd_chardev.c and kfd_queue.c check it, failing with the same errno (the OSError's text
also says which check failed, which the kernel does not): queue percentage/priority, ring size a power of two, queue type,
gpu_id, the VM acquired, rptr/wptr/ring/EOP/context-save buffers each at the start of a GPU-mapped buffer object of exactly the
expected size, EOP/control-stack/CWSR sizes against the topology, doorbell mmap size, no host mmap of invisible VRAM, no free of a
mapped buffer or one a queue uses.

Memory: each buffer object is a memfd; MAP_MEMORY_TO_GPU maps it at its GPU address (which, as on the real driver as iface_kfd.py
uses it, is also its host address) and enters it in this GPU's page tables (`vm`, a HostMemory). The queues' command processors
are mock_cp.py's PM4 and SDMA processors on mock_cp.RingWorker threads, reading the doorbells in the units the hardware uses
(PM4 compute: dwords; SDMA: bytes) and writing the read pointer back; they touch only what `vm` maps (anything else is a fault, as
a GPU page fault would be). Kernels run as host builds (core.codegen.hostbuild) filed by register_program, as on MOCK+AMD.

Limits (what the simulation does not model): AQL queues, events/interrupts, scratch, and the driver's own memory-limit accounting
beyond a fixed VRAM budget. A buffer object's GPU address must be a host range reserved through this seam (the simulated GPU
reads host memory there)."""
from __future__ import annotations
import ctypes, dataclasses, errno, itertools, os, threading
from typing import Any
from plugin_amd import kfd
from plugin_amd.kfd import PAGE, round_up

# fake topology: the properties KFD's sysfs node files carry that kfd.py reads (plausible values for one board of each arch)
BOARDS: dict[str, dict[str, int]] = {
  "gfx90a": dict(gfx_target_version=90010, simd_count=416, simd_per_cu=4, array_count=8, simd_arrays_per_engine=1, num_xcc=1,
                 lds_size_in_kb=64, wave_front_size=64, device_id=0x740F),
  "gfx942": dict(gfx_target_version=90402, simd_count=1216, simd_per_cu=4, array_count=32, simd_arrays_per_engine=1, num_xcc=8,
                 lds_size_in_kb=64, wave_front_size=64, device_id=0x74A1),
  "gfx950": dict(gfx_target_version=90500, simd_count=1024, simd_per_cu=4, array_count=32, simd_arrays_per_engine=1, num_xcc=8,
                 lds_size_in_kb=160, wave_front_size=64, device_id=0x75A3),
  "gfx1100": dict(gfx_target_version=110000, simd_count=192, simd_per_cu=2, array_count=12, simd_arrays_per_engine=2, num_xcc=1,
                  lds_size_in_kb=64, wave_front_size=32, device_id=0x744C),
  "gfx1201": dict(gfx_target_version=120001, simd_count=128, simd_per_cu=2, array_count=8, simd_arrays_per_engine=2, num_xcc=1,
                  lds_size_in_kb=64, wave_front_size=32, device_id=0x7550),
}
GPU_ID = 0x3D1A
RENDER_MINOR = 128
VERSION = (1, 14)
DOORBELL_TYPE = 0x3 << 62   # the driver's mmap offset type bits for the doorbell slice; the gpu_id hash sits at bit 46

def _fail(err: int, why: str) -> OSError: return OSError(err, why)

def driver_sizes(p: dict[str, int]) -> dict[str, int]:
  """The queue buffer sizes the driver derives at boot (kfd_queue_ctx_save_restore_size), written here as the driver states them,
  independently of kfd.queue_sizes (what iface_kfd.py uses), which must agree with them."""
  v = p["gfx_target_version"]
  cus = p["simd_count"] // p["simd_per_cu"] // p["num_xcc"]
  if v < 100100: waves = min(cus * 40, p["array_count"] // p["simd_arrays_per_engine"] * 512)
  else: waves = cus * 32
  vgprs = {90402: 0x80000, 90010: 0x80000, 90008: 0x80000, 90500: 0x80000, 110000: 0x60000, 110001: 0x60000,
           120000: 0x60000, 120001: 0x60000}.get(v, 0x40000)
  per_cu = vgprs + 0x4000 + ((p["lds_size_in_kb"] << 10) if v == 90500 else 0x10000) + 0x1000
  ctl_entries = waves * (12 if v >= 100100 else 8) + 8
  ctl = round_up(40 + ctl_entries, PAGE)
  if v // 10000 == 10: ctl = min(ctl, 0x7000)
  return {"ctl_stack_size": ctl, "cwsr_size": round_up(ctl + round_up(cus * per_cu, PAGE), PAGE),
          "debug_memory_size": round_up(waves * 32, 64), "eop_buffer_size": 4096}

@dataclasses.dataclass(eq=False)
class BO:
  """A buffer object: its GPU address, size, flags, backing memfd (None for USERPTR), whether the GPU maps it, queues using it."""
  va: int
  size: int
  flags: int
  memfd: int | None
  mmap_offset: int
  gpu_mapped: bool = False
  queue_refs: int = 0

class SimDriver:
  """The simulated kernel driver for one GPU of `arch`. `missing` / `denied`: /dev/kfd is absent / not accessible (to test the
  errors kfd.py gives). `export_sizes`: the topology carries cwsr_size and ctl_stack_size (recent kernels) or not (older
  ones: kfd.queue_sizes works them out). `vram`: bytes of VRAM it hands out before ENOMEM."""
  simulated = True
  _shared: dict[str, SimDriver] = {}
  _lock = threading.Lock()

  def __init__(self, arch: str, missing: bool = False, denied: bool = False, export_sizes: bool = True, vram: int = 4 << 30):
    if arch not in BOARDS: raise ValueError(f"AMD_KFD_SIM={arch!r}: the simulated driver has boards for {', '.join(BOARDS)}")
    from plugin_amd.mock_cp import HostMemory
    self.arch, self.missing, self.denied, self.vram = arch, missing, denied, vram
    self.host = kfd.OSBackend()   # real anonymous mappings: the simulated GPU reads host memory at its GPU addresses
    self.props = dict(BOARDS[arch], drm_render_minor=RENDER_MINOR, vendor_id=0x1002)
    sizes = driver_sizes(self.props)
    self.sizes = sizes
    if export_sizes: self.props.update(cwsr_size=sizes["cwsr_size"], ctl_stack_size=sizes["ctl_stack_size"])
    self.vm = HostMemory("memory mapped in the simulated GPU's page tables")
    self.faults: list[str] = []
    self.lock = threading.RLock()
    self._fds: dict[int, str] = {}
    self._next_fd = itertools.count(0x7F00)
    self.drm_acquired: int | None = None
    self.bos: dict[int, BO] = {}
    self._next_handle = itertools.count(1)
    self.vram_used = 0
    self.reserved: dict[int, int] = {}   # host ranges reserved through this seam: start -> size
    self.queues: dict[int, Any] = {}
    self.doorbell_fd = os.memfd_create("kfd-sim-doorbells")
    os.ftruncate(self.doorbell_fd, kfd.DOORBELL_SLICE)
    self.doorbells = self.host.mmap(0, kfd.DOORBELL_SLICE, kfd.PROT_READ | kfd.PROT_WRITE, kfd.MAP_SHARED, self.doorbell_fd, 0)
    self.slots: dict[int, int] = {}      # queue id -> doorbell slot (8 bytes each)

  @classmethod
  def shared(cls, arch: str) -> SimDriver:
    """The process's simulated driver for `arch` (a process opens /dev/kfd once: its VM and queues are per process)."""
    with cls._lock:
      if (d := cls._shared.get(arch)) is None: d = cls._shared[arch] = cls(arch)
    return d

  # *** files ***

  def open(self, path: str, flags: int) -> int:
    if path == "/dev/kfd" or path.startswith("/dev/dri/renderD"):
      if self.missing: raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)
      if self.denied: raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)
      if path != "/dev/kfd" and path != f"/dev/dri/renderD{RENDER_MINOR}": raise FileNotFoundError(errno.ENOENT, "no such render node", path)
      fd = next(self._next_fd)
      self._fds[fd] = "kfd" if path == "/dev/kfd" else "drm"
      return fd
    raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)

  def close(self, fd: int) -> None:
    if self._fds.pop(fd, None) is None: raise _fail(errno.EBADF, f"fd {fd} is not open")

  def _tree(self) -> dict[str, str]:
    base = kfd.TOPOLOGY
    cpu = "\n".join(f"{k} {v}" for k, v in dict(cpu_cores_count=16, simd_count=0, gfx_target_version=0).items())
    gpu = "\n".join(f"{k} {v}" for k, v in self.props.items())
    return {f"{base}/0/gpu_id": "0\n", f"{base}/0/properties": cpu + "\n", f"{base}/1/gpu_id": f"{GPU_ID}\n", f"{base}/1/properties": gpu + "\n"}

  def exists(self, path: str) -> bool:
    if path in ("/dev/kfd", f"/dev/dri/renderD{RENDER_MINOR}"): return not self.missing
    return not self.missing and (path == kfd.TOPOLOGY or any(k.startswith(path.rstrip("/") + "/") or k == path for k in self._tree()))
  def listdir(self, path: str) -> list[str]:
    if path.rstrip("/") != kfd.TOPOLOGY or self.missing: raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)
    return ["0", "1"]
  def read_text(self, path: str) -> str:
    if self.missing or (text := self._tree().get(path)) is None: raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)
    return text

  # *** mmap ***

  def mmap(self, addr: int, length: int, prot: int, flags: int, fd: int, offset: int) -> int:
    with self.lock:
      if fd == -1:
        got = self.host.mmap(addr, length, prot, flags, -1, offset)
        self.reserved[got] = length
        return got
      kind = self._fds.get(fd)
      if kind is None: raise _fail(errno.EBADF, f"mmap of fd {fd}, which is not open")
      if offset % PAGE: raise _fail(errno.EINVAL, f"mmap offset {offset:#x} is not page aligned")
      if kind == "kfd":
        if offset >> 62 != DOORBELL_TYPE >> 62 or (offset >> 46) & 0xFFFF != GPU_ID & 0xFFFF:
          raise _fail(errno.EINVAL, f"/dev/kfd mmap offset {offset:#x} is not this GPU's doorbell slice")
        if length != kfd.DOORBELL_SLICE:
          raise _fail(errno.EINVAL, f"the doorbell slice is mapped whole ({kfd.DOORBELL_SLICE:#x} bytes), not {length:#x}")
        return self._map_fd(addr, length, prot, flags, self.doorbell_fd)
      bo = next((b for b in self.bos.values() if b.mmap_offset == offset and b.memfd is not None), None)
      if bo is None: raise _fail(errno.EINVAL, f"render node mmap offset {offset:#x} names no buffer object")
      if bo.flags & kfd.MEM_VRAM and not bo.flags & kfd.MEM_PUBLIC:
        raise _fail(errno.EPERM, "host mapping of VRAM allocated without KFD_IOC_ALLOC_MEM_FLAGS_PUBLIC (no CPU access)")
      if length > bo.size: raise _fail(errno.EINVAL, f"mapping {length:#x} bytes of a {bo.size:#x}-byte buffer object")
      return self._map_fd(addr, length, prot, flags, bo.memfd)

  def _map_fd(self, addr: int, length: int, prot: int, flags: int, memfd: int | None) -> int:
    if flags & kfd.MAP_FIXED and not self._inside_reservation(addr, length):
      raise _fail(errno.EINVAL, f"MAP_FIXED at [{addr:#x}, {addr + length:#x}), a range not reserved through the simulated driver")
    return self.host.mmap(addr, length, prot, flags, memfd if memfd is not None else -1, 0)

  def _inside_reservation(self, addr: int, n: int) -> bool: return any(s <= addr and addr + n <= s + z for s, z in self.reserved.items())

  def munmap(self, addr: int, length: int) -> None:
    with self.lock:
      self.host.munmap(addr, length)
      if self.reserved.get(addr) == length: del self.reserved[addr]

  # *** ioctls ***

  def ioctl(self, fd: int, request: int, arg: Any) -> None:
    if self._fds.get(fd) != "kfd": raise _fail(errno.ENOTTY, f"ioctl {request:#x} on fd {fd}, which is not /dev/kfd")
    name = kfd.IOC_NAME.get(request)
    if name is None or name not in self.HANDLED: raise _fail(errno.EINVAL, f"ioctl {request:#x} is not a KFD ioctl the simulated driver serves")
    want = kfd.ARGS[name]
    if not isinstance(arg, want) or ctypes.sizeof(arg) != (request >> 16) & 0x3FFF:
      raise _fail(errno.EFAULT, f"{name} takes a {want.__name__} of {ctypes.sizeof(want)} bytes, got {type(arg).__name__}")
    with self.lock: getattr(self, f"_{name.lower()}")(arg)

  HANDLED = ("GET_VERSION", "ACQUIRE_VM", "ALLOC_MEMORY_OF_GPU", "FREE_MEMORY_OF_GPU", "MAP_MEMORY_TO_GPU", "UNMAP_MEMORY_FROM_GPU",
             "CREATE_QUEUE", "DESTROY_QUEUE")

  def _get_version(self, a: kfd.GetVersionArgs) -> None: a.major_version, a.minor_version = VERSION

  def _gpu(self, gpu_id: int, what: str) -> None:
    if gpu_id != GPU_ID: raise _fail(errno.EINVAL, f"{what}: gpu_id {gpu_id:#x} is not a GPU of this system ({GPU_ID:#x})")

  def _vm(self, what: str) -> None:
    if self.drm_acquired is None: raise _fail(errno.EINVAL, f"{what} before ACQUIRE_VM")

  def _acquire_vm(self, a: kfd.AcquireVmArgs) -> None:
    if self._fds.get(a.drm_fd) != "drm": raise _fail(errno.EINVAL, f"ACQUIRE_VM: drm_fd {a.drm_fd} is not an open render node")
    self._gpu(a.gpu_id, "ACQUIRE_VM")
    if self.drm_acquired is not None and self.drm_acquired != a.drm_fd:
      raise _fail(errno.EBUSY, "ACQUIRE_VM: this process's VM was acquired through another render node file")
    self.drm_acquired = a.drm_fd

  def _alloc_memory_of_gpu(self, a: kfd.AllocMemoryOfGpuArgs) -> None:
    self._gpu(a.gpu_id, "ALLOC_MEMORY_OF_GPU")
    self._vm("ALLOC_MEMORY_OF_GPU")
    if a.size == 0: raise _fail(errno.EINVAL, "ALLOC_MEMORY_OF_GPU of 0 bytes")
    domains = a.flags & (kfd.MEM_VRAM | kfd.MEM_GTT | kfd.MEM_USERPTR | kfd.MEM_DOORBELL)
    if domains & kfd.MEM_DOORBELL: raise _fail(errno.EINVAL, "doorbell/MMIO buffer objects are not simulated")
    if not domains: raise _fail(errno.EINVAL, "ALLOC_MEMORY_OF_GPU flags name no memory domain (VRAM, GTT, USERPTR)")
    size = round_up(a.size, PAGE)
    if a.flags & kfd.MEM_USERPTR:
      if a.mmap_offset % PAGE: raise _fail(errno.EINVAL, f"unaligned userptr address {a.mmap_offset:#x}")
      if a.va_addr != a.mmap_offset:   # the simulated GPU reads host memory at its GPU address
        raise _fail(errno.EINVAL, "the simulated driver maps a USERPTR range only at its own host address (va_addr == mmap_offset)")
      bo = BO(a.va_addr, size, a.flags, None, 0)
    else:
      if a.flags & kfd.MEM_VRAM:
        if self.vram_used + size > self.vram: raise _fail(errno.ENOMEM, f"out of VRAM: {self.vram_used:#x} of {self.vram:#x} bytes in use")
        self.vram_used += size
      memfd = os.memfd_create("kfd-sim-bo")
      os.ftruncate(memfd, size)
      bo = BO(a.va_addr, size, a.flags, memfd, 0)
    handle = GPU_ID << 32 | next(self._next_handle)   # the driver's handles carry the gpu_id in their high half
    bo.mmap_offset = (handle & 0xFFFFFFFF) << 20 if bo.memfd is not None else 0
    self.bos[handle] = bo
    a.handle, a.mmap_offset = handle, (bo.mmap_offset if bo.memfd is not None else a.mmap_offset)

  def _bo(self, handle: int, what: str) -> BO:
    if handle >> 32 != GPU_ID: raise _fail(errno.EINVAL, f"{what}: handle {handle:#x} is not of this GPU")
    if (bo := self.bos.get(handle)) is None: raise _fail(errno.EINVAL, f"{what}: no buffer object with handle {handle:#x}")
    return bo

  def _devices(self, a: Any, what: str) -> None:
    if a.n_devices == 0: raise _fail(errno.EINVAL, f"{what}: device IDs array empty")
    if a.n_success > a.n_devices: raise _fail(errno.EINVAL, f"{what}: n_success {a.n_success} exceeds n_devices {a.n_devices}")
    ids = (ctypes.c_uint32 * a.n_devices).from_address(a.device_ids_array_ptr)
    for i in range(a.n_success, a.n_devices): self._gpu(ids[i], what)

  def _map_memory_to_gpu(self, a: kfd.MapMemoryToGpuArgs) -> None:
    bo = self._bo(a.handle, "MAP_MEMORY_TO_GPU")
    self._devices(a, "MAP_MEMORY_TO_GPU")
    if bo.va % PAGE: raise _fail(errno.EINVAL, f"MAP_MEMORY_TO_GPU: GPU address {bo.va:#x} is not page aligned")
    for other in self.bos.values():
      if other is not bo and other.gpu_mapped and bo.va < other.va + other.size and other.va < bo.va + bo.size:
        raise _fail(errno.EINVAL, f"MAP_MEMORY_TO_GPU: [{bo.va:#x}, {bo.va + bo.size:#x}) conflicts with [{other.va:#x}, {other.va + other.size:#x})")
    if not bo.gpu_mapped:
      if bo.memfd is not None: self._map_fd(bo.va, bo.size, kfd.PROT_READ | kfd.PROT_WRITE, kfd.MAP_SHARED | kfd.MAP_FIXED, bo.memfd)
      self.vm.register(bo.va, bo.size, bo)
      bo.gpu_mapped = True
    a.n_success = a.n_devices

  def _unmap_memory_from_gpu(self, a: kfd.UnmapMemoryFromGpuArgs) -> None:
    bo = self._bo(a.handle, "UNMAP_MEMORY_FROM_GPU")
    self._devices(a, "UNMAP_MEMORY_FROM_GPU")
    if bo.queue_refs: raise _fail(errno.EBUSY, "UNMAP_MEMORY_FROM_GPU of a buffer object a queue uses")
    if bo.gpu_mapped: self.vm.unregister(bo.va)
    bo.gpu_mapped = False
    a.n_success = a.n_devices

  def _free_memory_of_gpu(self, a: kfd.FreeMemoryOfGpuArgs) -> None:
    bo = self._bo(a.handle, "FREE_MEMORY_OF_GPU")
    if bo.gpu_mapped or bo.queue_refs: raise _fail(errno.EBUSY, f"FREE_MEMORY_OF_GPU of {bo.va:#x}, which is still mapped or used by a queue")
    if bo.memfd is not None: os.close(bo.memfd)
    if bo.flags & kfd.MEM_VRAM: self.vram_used -= bo.size
    del self.bos[a.handle]

  # *** queues ***

  def _mapping(self, addr: int, size: int, what: str) -> BO:
    """The GPU-mapped buffer object `addr` starts (its first page) and whose size is exactly `size` (kfd_queue_buffer_get)."""
    bo = next((b for b in self.bos.values() if b.gpu_mapped and b.va <= addr < b.va + b.size), None)
    if bo is None: raise _fail(errno.EINVAL, f"CREATE_QUEUE: the {what} at {addr:#x} is in no buffer object mapped to the GPU")
    if addr // PAGE != bo.va // PAGE or bo.size != size:
      raise _fail(errno.EINVAL, f"CREATE_QUEUE: the {what} at {addr:#x} must lie in the first page of a {size:#x}-byte buffer object; "
                                f"it is in [{bo.va:#x}, {bo.va + bo.size:#x})")
    return bo

  def _create_queue(self, a: kfd.CreateQueueArgs) -> None:
    if a.queue_percentage > kfd.KFD_MAX_QUEUE_PERCENTAGE: raise _fail(errno.EINVAL, f"queue percentage {a.queue_percentage} above 100")
    if a.queue_priority > kfd.KFD_MAX_QUEUE_PRIORITY: raise _fail(errno.EINVAL, f"queue priority {a.queue_priority} above 15")
    if a.ring_size & (a.ring_size - 1): raise _fail(errno.EINVAL, f"ring size {a.ring_size:#x} is not a power of two")
    if a.queue_type not in (kfd.QUEUE_TYPE_COMPUTE, kfd.QUEUE_TYPE_SDMA, kfd.QUEUE_TYPE_COMPUTE_AQL, 3):
      raise _fail(kfd.ENOTSUPP, f"queue type {a.queue_type} is not one of compute (0), SDMA (1), compute AQL (2), SDMA XGMI (3)")
    self._gpu(a.gpu_id, "CREATE_QUEUE")
    self._vm("CREATE_QUEUE")
    used = [self._mapping(a.write_pointer_address, PAGE, "write pointer"), self._mapping(a.read_pointer_address, PAGE, "read pointer"),
            self._mapping(a.ring_base_address, round_up(a.ring_size, PAGE), "ring")]
    compute = a.queue_type in (kfd.QUEUE_TYPE_COMPUTE, kfd.QUEUE_TYPE_COMPUTE_AQL)
    if compute:
      s = self.sizes
      if a.eop_buffer_address:
        if a.eop_buffer_size < s["eop_buffer_size"]:
          raise _fail(errno.EINVAL, f"EOP buffer of {a.eop_buffer_size:#x} bytes, the node needs {s['eop_buffer_size']:#x}")
        used.append(self._mapping(a.eop_buffer_address, round_up(a.eop_buffer_size, PAGE), "EOP buffer"))
      if a.ctl_stack_size != s["ctl_stack_size"]:
        raise _fail(errno.EINVAL, f"control stack size {a.ctl_stack_size:#x}, the node's is {s['ctl_stack_size']:#x}")
      if a.ctx_save_restore_size < s["cwsr_size"]:
        raise _fail(errno.EINVAL, f"CWSR area of {a.ctx_save_restore_size:#x} bytes, the node needs {s['cwsr_size']:#x}")
      total = round_up((a.ctx_save_restore_size + s["debug_memory_size"]) * self.props["num_xcc"], PAGE)
      used.append(self._mapping(a.ctx_save_restore_address, total, "context save area"))
    if a.queue_type == kfd.QUEUE_TYPE_COMPUTE_AQL or a.queue_type == 3:
      raise _fail(kfd.ENOTSUPP, "the simulated driver serves PM4 compute and SDMA queues only (AQL and XGMI SDMA are not simulated)")
    slot = next(i for i in itertools.count(0 if compute else 512) if i not in self.slots.values())
    qid = next(i for i in itertools.count() if i not in self.queues)
    for bo in used: bo.queue_refs += 1
    self.queues[qid] = self._start_queue(qid, compute, a, slot, used)
    self.slots[qid] = slot
    a.queue_id = qid
    a.doorbell_offset = DOORBELL_TYPE | (GPU_ID & 0xFFFF) << 46 | slot * 8

  def _start_queue(self, qid: int, compute: bool, a: kfd.CreateQueueArgs, slot: int, used: list[BO]) -> Any:
    from core.helpers import HCQ_TIMEOUT
    from plugin_amd.mock_cp import MockActions, PM4Processor, RingWorker, SDMAProcessor
    actions = MockActions(3 * float(HCQ_TIMEOUT.value), self.vm)   # a wait outlasts the host's, which reports first
    proc = (PM4Processor if compute else SDMAProcessor)(self.arch, self.vm, actions)
    ring = (ctypes.c_uint8 * a.ring_size).from_address(a.ring_base_address)
    # PM4 compute write pointers count dwords, SDMA ones bytes: the doorbell carries the write pointer in those units
    w = RingWorker(f"KFD+AMD(sim {self.arch}) {'COMPUTE' if compute else 'SDMA'} queue {qid}", proc, ring, self.doorbells + slot * 8,
                   self.faults, unit=4 if compute else 1, rptr_addr=a.read_pointer_address)
    w.used = used   # type: ignore[attr-defined]
    return w

  def _destroy_queue(self, a: kfd.DestroyQueueArgs) -> None:
    if (w := self.queues.pop(a.queue_id, None)) is None: raise _fail(errno.EINVAL, f"DESTROY_QUEUE: no queue {a.queue_id}")
    w.close()
    for bo in w.used: bo.queue_refs -= 1
    del self.slots[a.queue_id]

  # *** what the simulated GPU does besides the ioctls ***

  def register_program(self, name: str, uops: tuple[Any, ...], data: Any, image: bytes) -> None:
    """The simulated GPU runs a host build of each kernel (as MOCK+AMD does), found by the code a dispatch points at."""
    from plugin_amd.mock_cp import register_program
    register_program(name, uops, data, image)

  def kick(self) -> None:
    """Wake the queue threads now (they poll their doorbells; the host is about to wait)."""
    for w in list(self.queues.values()): w.kick.set()

  def describe(self) -> str: return "; ".join(w.label.split(") ")[-1] + " " + w.describe() for w in list(self.queues.values()))
