"""A simulated NVIDIA kernel driver: nvk.DriverOS (open, ioctl, mmap) served in process over host memory, so NVK+NV runs in CI
without a GPU. Selected with NVK_SIM=<arch> (sm_80, sm_86, sm_89, sm_90, sm_100, sm_120).

It serves the RM ioctls nvk.py uses the way the resource manager checks them: the request's size field and argument type per
escape (EINVAL otherwise, as the kernel's ioctl entry fails), RM ioctls only on /dev/nvidiactl and REGISTER_FD only on a
/dev/nvidia<N> file; then, as a status in the argument (NV_ERR_*): the client and parent handles exist, the new handle is unused,
the class is one RM knows and this arch supports, the parent's class is one the class may live under, paramsSize equals the
class's (or control's) parameter structure, and per class: the device id is the attached GPU's, memory sizes and locations,
virtual memory on this device's VA space, a GPFIFO channel's ring at a mapped GPU address inside its memory object with a
power-of-two entry count, USERD and error notifier memory objects and a context share of its group; per control, the object's
class. `explain()` says which check failed (RM itself only returns the status).

Memory objects are memfds. RM_MAP_MEMORY binds one to a /dev/nvidia<N> file, whose mmap maps it; MAP_MEMORY_DMA enters it in
the GPU's page tables (mock_gpu.VASpace) at the fixed GPU address asked for; host memory described by its pages
(NV01_MEMORY_SYSTEM_OS_DESCRIPTOR through RM_ALLOC_MEMORY) is mapped where the simulation chooses. Limits of the simulation: GPU addresses must be below
2**39 and equal to a CPU mapping of the same memory made through this driver (what nvk.RM does) for video and system memory, one engine object per channel,
no UVM, events, or unmapping of single mappings (RM_FREE of the memory drops them).

Channels: once its group is scheduled, each GPFIFO channel is served by mock_gpu.Channel (iface_mock's software GPU) on its own
thread: it fetches entries from GP_GET to the GP_PUT in its USERD memory, decodes the pushbuffer segments and writes GP_GET back.
The usermode page's doorbell (NOTIFY_CHANNEL_PENDING) must hold work-submit tokens this driver issued; a channel is served
when its GP_PUT moves (the doorbell's per-channel pending state is not modelled)."""
from __future__ import annotations
import ctypes, dataclasses, errno, itertools, os, threading, time
from typing import Any
from plugin_nv import pushbuf as pb, rm_abi as R
from plugin_nv.mock_gpu import PROGRAMS, Channel, MockFault, VASpace, run_launch
from plugin_nv.nvk import MAP_FIXED, MAP_SHARED, PAGE, PROT_READ, PROT_WRITE, OSDriver, round_up, usermode_class
from plugin_nv.qmd import ARCHS, arch_info

GPU_ID, DEVICE_INSTANCE = 0x100, 0
ARCH_INFO = {"sm_80": (R.ARCHITECTURE_GA100, 0), "sm_86": (R.ARCHITECTURE_GA100, 2), "sm_89": (R.ARCHITECTURE_AD100, 2),
             "sm_90": (R.ARCHITECTURE_GH100, 0), "sm_100": (R.ARCHITECTURE_GB100, 0), "sm_120": (R.ARCHITECTURE_GB200, 2)}
ST = R.STATUS_CODE

class Refused(Exception):
  def __init__(self, status: str, why: str):
    self.status, self.why = ST[status], why
    super().__init__(f"{status}: {why}")

@dataclasses.dataclass(eq=False)
class Obj:
  handle: int
  cls: int
  parent: Obj | None
  client: int
  extra: dict[str, Any] = dataclasses.field(default_factory=dict)

@dataclasses.dataclass
class DevFile:
  """An open file: its kind (ctl, dev, uvm), the control file it was registered with and the object RM_MAP_MEMORY bound to it."""
  kind: str
  registered: int = -1
  mapping: tuple[Obj, int] | None = None   # (memory object, length)

ESCAPES: dict[int, tuple[type[ctypes.Structure], ...]] = {
  R.NV_ESC_RM_ALLOC: (R.NVOS21_PARAMETERS, R.NVOS64_PARAMETERS), R.NV_ESC_RM_FREE: (R.NVOS00_PARAMETERS,),
  R.NV_ESC_RM_CONTROL: (R.NVOS54_PARAMETERS,), R.NV_ESC_RM_MAP_MEMORY: (R.nv_ioctl_nvos33_parameters_with_fd,),
  R.NV_ESC_RM_MAP_MEMORY_DMA: (R.NVOS46_PARAMETERS,), R.NV_ESC_REGISTER_FD: (R.nv_ioctl_register_fd_t,),
  R.NV_ESC_RM_ALLOC_MEMORY: (R.nv_ioctl_nvos02_parameters_with_fd,)}

MEMORY_CLASSES = (R.NV01_MEMORY_SYSTEM, R.NV01_MEMORY_LOCAL_USER, R.NV01_MEMORY_SYSTEM_OS_DESCRIPTOR)

class SimChannel:
  """A GPFIFO channel the simulated GPU serves: its memory, token, engine (mock_gpu.Channel once an engine object exists)."""
  def __init__(self, drv: SimDriver, obj: Obj, p: R.NV_CHANNEL_ALLOC_PARAMS, userd: Obj, token: int):
    self.drv, self.obj, self.token = drv, obj, token
    self.gpfifo_va, self.entries = p.gpFifoOffset, p.gpFifoEntries
    self.userd = userd.extra["sim_addr"] + p.userdOffset[0]
    self.gpu: Channel | None = None
    self.get, self.closed = 0, False
    self.thread: threading.Thread | None = None
    self.kick = threading.Event()

  def start(self) -> None:
    if self.thread is None:
      t = self.thread = threading.Thread(target=self._loop, name=f"nvk-sim channel {self.obj.handle:#x}", daemon=True)
      t.start()

  def gp_put(self) -> int: return ctypes.c_uint32.from_address(self.userd + pb.USERD_GP_PUT).value
  def busy(self) -> bool: return self.gpu is not None and self.get % self.entries != self.gp_put()

  def _run(self) -> None:
    assert self.gpu is not None
    put = self.gp_put()
    if put >= self.entries: raise MockFault(f"GP_PUT {put} is past the channel's {self.entries}-entry GPFIFO")
    while self.get % self.entries != put:
      raw = self.drv.vm.u64(self.gpfifo_va + 8 * (self.get % self.entries))
      addr, n, level, _ = pb.gp_decode(raw & 0xFFFFFFFF, raw >> 32)
      if level: raise MockFault(f"GPFIFO entry {self.get} is a subroutine entry, which the simulated GPU does not implement")
      if n: self.gpu.segment(addr, n)
      self.get += 1
      ctypes.c_uint32.from_address(self.userd + pb.USERD_GP_GET).value = self.get % self.entries

  def _loop(self) -> None:
    idle = time.monotonic()
    while not self.closed:
      if self.busy():
        try:
          self.drv.check_doorbell()
          self._run()
        except Exception as e:   # a fault: report it, skip what the channel was given, keep serving
          self.drv.faults.append(f"NVK sim channel {self.obj.handle:#x} ({self.gpu.name if self.gpu else '?'}): {type(e).__name__}: {e}")
          self.get = self.gp_put()
          ctypes.c_uint32.from_address(self.userd + pb.USERD_GP_GET).value = self.get
        idle = time.monotonic()
        continue
      self.kick.wait(0.001 if time.monotonic() - idle < 0.5 else 0.02)
      self.kick.clear()

class SimDriver:
  """The simulated driver for one GPU of `arch`; `missing` / `denied`: the device nodes are absent / not accessible."""
  simulated = True
  _shared: dict[str, SimDriver] = {}
  _lock = threading.Lock()

  def __init__(self, arch: str, missing: bool = False, denied: bool = False, vidmem: int = 8 << 30):
    if arch not in ARCHS: raise ValueError(f"NVK_SIM={arch!r}: the simulated driver has GPUs for {', '.join(ARCHS)}")
    self.arch, self.info, self.missing, self.denied, self.vidmem = arch, arch_info(arch), missing, denied, vidmem
    self.host = OSDriver()
    self.vm = VASpace()
    self.faults: list[str] = []
    self.lock = threading.RLock()
    self.files: dict[int, DevFile] = {}
    self._fd = itertools.count(0x6E00)
    self._client = itertools.count(0xC1D00001)
    self.objs: dict[tuple[int, int], Obj] = {}   # (client, handle) -> object; a client is its own object
    self.attached: set[int] = set()
    self.cpu_maps: dict[int, tuple[Obj, int]] = {}   # host address -> (memory object, length)
    self.channels: list[SimChannel] = []
    self._token = itertools.count(1)
    self.vidmem_used = 0
    self.reason = ""

  @classmethod
  def shared(cls, arch: str) -> SimDriver:
    with cls._lock:
      if (d := cls._shared.get(arch)) is None: d = cls._shared[arch] = cls(arch)
    return d

  def explain(self) -> str: return f"simulated driver: {self.reason}"

  # *** files ***

  def exists(self, path: str) -> bool: return not self.missing and path in ("/dev/nvidiactl", "/dev/nvidia0", "/dev/nvidia-uvm")

  def open(self, path: str, flags: int) -> int:
    if not self.exists(path): raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)
    if self.denied: raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)
    fd = next(self._fd)
    self.files[fd] = DevFile({"/dev/nvidiactl": "ctl", "/dev/nvidia-uvm": "uvm"}.get(path, "dev"))
    return fd

  def close(self, fd: int) -> None:
    if self.files.pop(fd, None) is None: raise OSError(errno.EBADF, f"fd {fd} is not open")

  # *** ioctls ***

  def ioctl(self, fd: int, request: int, arg: Any) -> None:
    f = self.files.get(fd)
    if f is None: raise OSError(errno.EBADF, f"ioctl on fd {fd}, which is not open")
    nr, size, typ, d = request & 0xFF, (request >> 16) & 0x3FFF, (request >> 8) & 0xFF, request >> 30
    if typ != R.NV_IOCTL_MAGIC or d != 3: raise OSError(errno.ENOTTY, f"ioctl {request:#x} is not an NVIDIA _IOWR('F', ...) request")
    if (want := ESCAPES.get(nr)) is None: raise OSError(errno.EINVAL, f"escape {nr:#x} is not one the simulated driver serves")
    if not isinstance(arg, want) or ctypes.sizeof(arg) != size:
      raise OSError(errno.EINVAL, f"escape {nr:#x} takes {' or '.join(f'{w.__name__} ({ctypes.sizeof(w)} bytes)' for w in want)}; "
                                  f"got {type(arg).__name__} with a size field of {size}")
    if nr == R.NV_ESC_REGISTER_FD:
      if f.kind != "dev": raise OSError(errno.EINVAL, "REGISTER_FD is an ioctl of a /dev/nvidia<N> file")
      if self.files.get(arg.ctl_fd, DevFile("")).kind != "ctl": raise OSError(errno.EINVAL, f"REGISTER_FD: fd {arg.ctl_fd} is not /dev/nvidiactl")
      f.registered = arg.ctl_fd
      return
    if f.kind != "ctl": raise OSError(errno.EINVAL, f"escape {nr:#x} on a {f.kind} file: the simulated driver takes RM ioctls on /dev/nvidiactl")
    st = arg.params if nr in (R.NV_ESC_RM_MAP_MEMORY, R.NV_ESC_RM_ALLOC_MEMORY) else arg
    with self.lock:
      try:
        {R.NV_ESC_RM_ALLOC: self._alloc, R.NV_ESC_RM_FREE: self._free, R.NV_ESC_RM_CONTROL: self._control,
         R.NV_ESC_RM_MAP_MEMORY: self._map_memory, R.NV_ESC_RM_MAP_MEMORY_DMA: self._map_dma, R.NV_ESC_RM_ALLOC_MEMORY: self._alloc_os_memory}[nr](arg)
        st.status = 0
      except Refused as e:
        self.reason, st.status = e.why, e.status

  def _client_of(self, h: int) -> Obj:
    if (c := self.objs.get((h, h))) is None or c.cls != R.NV01_ROOT_CLIENT: raise Refused("NV_ERR_INVALID_OBJECT_HANDLE", f"client {h:#x} does not exist")
    return c

  def _obj(self, client: int, h: int, what: str, classes: tuple[int, ...] | None = None) -> Obj:
    if (o := self.objs.get((client, h))) is None: raise Refused("NV_ERR_INVALID_OBJECT_HANDLE", f"{what} {h:#x} is not an object of client {client:#x}")
    if classes is not None and o.cls not in classes:
      raise Refused("NV_ERR_INVALID_OBJECT", f"{what} {h:#x} is of class {o.cls:#x}, not {' or '.join(f'{c:#x}' for c in classes)}")
    return o

  def _device_of(self, o: Obj) -> Obj:
    while o.cls != R.NV01_DEVICE_0:
      if o.parent is None: raise Refused("NV_ERR_INVALID_OBJECT_PARENT", f"object {o.handle:#x} is not under a device")
      o = o.parent
    return o

  def class_rules(self) -> dict[int, tuple[tuple[int, ...], type[ctypes.Structure] | None]]:
    """class -> (the classes its parent may have, its parameter structure) for the classes this arch supports."""
    i = self.info
    return {R.NV01_DEVICE_0: ((R.NV01_ROOT_CLIENT,), R.NV0080_ALLOC_PARAMETERS),
            R.NV20_SUBDEVICE_0: ((R.NV01_DEVICE_0,), R.NV2080_ALLOC_PARAMETERS),
            usermode_class(self.arch): ((R.NV20_SUBDEVICE_0,), None),
            R.FERMI_VASPACE_A: ((R.NV01_DEVICE_0,), R.NV_VASPACE_ALLOCATION_PARAMETERS),
            R.NV50_MEMORY_VIRTUAL: ((R.NV01_DEVICE_0,), R.NV_MEMORY_VIRTUAL_ALLOCATION_PARAMS),
            R.NV01_MEMORY_SYSTEM: ((R.NV01_DEVICE_0,), R.NV_MEMORY_ALLOCATION_PARAMS),
            R.NV01_MEMORY_LOCAL_USER: ((R.NV01_DEVICE_0,), R.NV_MEMORY_ALLOCATION_PARAMS),
            R.KEPLER_CHANNEL_GROUP_A: ((R.NV01_DEVICE_0,), R.NV_CHANNEL_GROUP_ALLOCATION_PARAMETERS),
            R.FERMI_CONTEXT_SHARE_A: ((R.KEPLER_CHANNEL_GROUP_A,), R.NV_CTXSHARE_ALLOCATION_PARAMETERS),
            i.host_class: ((R.KEPLER_CHANNEL_GROUP_A,), R.NV_CHANNEL_ALLOC_PARAMS),
            i.compute_class: ((i.host_class,), None), i.copy_class: ((i.host_class,), None)}

  def _known_elsewhere(self, cls: int) -> bool:
    return cls in (R.VOLTA_USERMODE_A, R.HOPPER_USERMODE_A) or any(cls in (a.host_class, a.compute_class, a.copy_class) for a in ARCHS.values())

  def _alloc(self, a: Any) -> None:
    if a.hClass == R.NV01_ROOT_CLIENT:
      if a.hObjectParent or a.hRoot: raise Refused("NV_ERR_INVALID_OBJECT_PARENT", "a root client is allocated with hRoot = hObjectParent = 0")
      if a.paramsSize: raise Refused("NV_ERR_INVALID_PARAM_STRUCT", f"NV01_ROOT_CLIENT takes no parameters here, paramsSize {a.paramsSize}")
      h = a.hObjectNew or next(self._client)
      if (h, h) in self.objs: raise Refused("NV_ERR_INSERT_DUPLICATE_NAME", f"client handle {h:#x} is in use")
      self.objs[(h, h)] = Obj(h, R.NV01_ROOT_CLIENT, None, h)
      a.hObjectNew = h
      return
    self._client_of(a.hRoot)
    parent = self._obj(a.hRoot, a.hObjectParent, "parent")
    rules = self.class_rules()
    if a.hClass not in rules:
      if self._known_elsewhere(a.hClass): raise Refused("NV_ERR_NOT_SUPPORTED", f"class {a.hClass:#x} is not supported on this GPU ({self.arch})")
      raise Refused("NV_ERR_INVALID_CLASS", f"class {a.hClass:#x} is not a class the simulated driver knows")
    parents, ptype = rules[a.hClass]
    if parent.cls not in parents:
      raise Refused("NV_ERR_INVALID_OBJECT_PARENT", f"class {a.hClass:#x} lives under {' or '.join(f'{c:#x}' for c in parents)}, "
                                                    f"not under {parent.handle:#x} (class {parent.cls:#x})")
    want = ctypes.sizeof(ptype) if ptype is not None else 0
    if a.paramsSize != want or (want and not a.pAllocParms):
      raise Refused("NV_ERR_INVALID_PARAM_STRUCT", f"class {a.hClass:#x} takes {ptype.__name__ if ptype else 'no parameters'} ({want} bytes), "
                                                   f"paramsSize is {a.paramsSize}")
    if a.hObjectNew == 0: raise Refused("NV_ERR_INVALID_OBJECT_NEW", "hObjectNew 0: name the new object")
    if (a.hRoot, a.hObjectNew) in self.objs: raise Refused("NV_ERR_INSERT_DUPLICATE_NAME", f"handle {a.hObjectNew:#x} is in use")
    p = ptype.from_address(a.pAllocParms) if ptype is not None else None
    o = Obj(a.hObjectNew, a.hClass, parent, a.hRoot)
    getattr(self, f"_new_{self._kind(a.hClass)}", lambda o, p: None)(o, p)
    self.objs[(a.hRoot, a.hObjectNew)] = o

  def _kind(self, cls: int) -> str:
    i = self.info
    return {R.NV01_DEVICE_0: "device", R.NV20_SUBDEVICE_0: "subdevice", R.NV01_MEMORY_SYSTEM: "memory", R.NV01_MEMORY_LOCAL_USER: "memory",
            R.NV50_MEMORY_VIRTUAL: "virtual", R.KEPLER_CHANNEL_GROUP_A: "group", R.FERMI_CONTEXT_SHARE_A: "ctxshare",
            i.host_class: "channel", i.compute_class: "engine", i.copy_class: "engine"}.get(cls, "usermode" if cls == usermode_class(self.arch) else "")

  def _new_device(self, o: Obj, p: R.NV0080_ALLOC_PARAMETERS) -> None:
    if p.deviceId != DEVICE_INSTANCE or GPU_ID not in self.attached:
      raise Refused("NV_ERR_INVALID_ARGUMENT", f"deviceId {p.deviceId}: the attached GPUs' device instances are "
                                               f"{[DEVICE_INSTANCE] if GPU_ID in self.attached else []} (attach with NV0000_CTRL_CMD_GPU_ATTACH_IDS)")

  def _new_subdevice(self, o: Obj, p: R.NV2080_ALLOC_PARAMETERS) -> None:
    if p.subDeviceId != 0: raise Refused("NV_ERR_INVALID_ARGUMENT", f"subDeviceId {p.subDeviceId}: the device has subdevice 0 only")

  def _backing(self, o: Obj, size: int) -> None:
    memfd = os.memfd_create("nvk-sim-mem")
    os.ftruncate(memfd, size)
    o.extra.update(memfd=memfd, size=size, sim_addr=self.host.mmap(0, size, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0), gpu=[])

  def _new_memory(self, o: Obj, p: R.NV_MEMORY_ALLOCATION_PARAMS) -> None:
    if p.size == 0: raise Refused("NV_ERR_INVALID_ARGUMENT", "memory of 0 bytes")
    loc = (p.attr >> 25) & 3
    if o.cls == R.NV01_MEMORY_LOCAL_USER and loc != 0: raise Refused("NV_ERR_INVALID_ARGUMENT", f"NV01_MEMORY_LOCAL_USER with attr LOCATION {loc}, not VIDMEM")
    if o.cls == R.NV01_MEMORY_SYSTEM and loc != 1: raise Refused("NV_ERR_INVALID_ARGUMENT", f"NV01_MEMORY_SYSTEM with attr LOCATION {loc}, not PCI")
    size = round_up(p.size, max(p.alignment, PAGE))
    if o.cls == R.NV01_MEMORY_LOCAL_USER:
      if self.vidmem_used + size > self.vidmem: raise Refused("NV_ERR_NO_MEMORY", f"out of video memory: {self.vidmem_used:#x} of {self.vidmem:#x} in use")
      self.vidmem_used += size
    self._backing(o, size)
    p.size = size

  def _new_usermode(self, o: Obj, p: None) -> None: self._backing(o, R.USERMODE_SIZE)

  def _new_virtual(self, o: Obj, p: R.NV_MEMORY_VIRTUAL_ALLOCATION_PARAMS) -> None:
    vas = self._obj(o.client, p.hVASpace, "hVASpace", (R.FERMI_VASPACE_A,))
    if vas.parent is not o.parent: raise Refused("NV_ERR_INVALID_OBJECT_PARENT", f"VA space {p.hVASpace:#x} is another device's")
    p.limit = p.limit or VASpace.LIMIT - 1

  def _new_group(self, o: Obj, p: R.NV_CHANNEL_GROUP_ALLOCATION_PARAMETERS) -> None:
    if p.hVASpace: self._obj(o.client, p.hVASpace, "hVASpace", (R.FERMI_VASPACE_A,))
    if p.engineType not in (R.NV2080_ENGINE_TYPE_GRAPHICS, R.NV2080_ENGINE_TYPE_COPY0):
      raise Refused("NV_ERR_INVALID_ARGUMENT", f"channel group engineType {p.engineType}: the simulated GPU has GRAPHICS (1) and COPY0 (9)")
    o.extra.update(vaspace=p.hVASpace, scheduled=False)

  def _new_ctxshare(self, o: Obj, p: R.NV_CTXSHARE_ALLOCATION_PARAMETERS) -> None:
    assert o.parent is not None
    if p.hVASpace not in (0, o.parent.extra["vaspace"]):
      raise Refused("NV_ERR_INVALID_ARGUMENT", f"context share VA space {p.hVASpace:#x} is not its group's ({o.parent.extra['vaspace']:#x})")

  def _new_channel(self, o: Obj, p: R.NV_CHANNEL_ALLOC_PARAMS) -> None:
    mem = (R.NV01_MEMORY_SYSTEM, R.NV01_MEMORY_LOCAL_USER)
    self._obj(o.client, p.hObjectError, "hObjectError (the error notifier)", mem)
    buf = self._obj(o.client, p.hObjectBuffer, "hObjectBuffer (the GPFIFO memory)", mem)
    ctx = self._obj(o.client, p.hContextShare, "hContextShare", (R.FERMI_CONTEXT_SHARE_A,))
    if ctx.parent is not o.parent: raise Refused("NV_ERR_INVALID_OBJECT_PARENT", f"context share {p.hContextShare:#x} is not of this channel's group")
    n = p.gpFifoEntries
    if n < 2 or n & (n - 1): raise Refused("NV_ERR_INVALID_ARGUMENT", f"gpFifoEntries {n} is not a power of two >= 2")
    if not any(va <= p.gpFifoOffset and p.gpFifoOffset + 8 * n <= va + size for va, size in buf.extra["gpu"]):
      raise Refused("NV_ERR_INVALID_OFFSET", f"gpFifoOffset {p.gpFifoOffset:#x} + {8 * n} bytes is not inside a GPU mapping of hObjectBuffer")
    userd = self._obj(o.client, p.hUserdMemory[0], "hUserdMemory[0]", mem)
    if p.userdOffset[0] % 512 or p.userdOffset[0] + pb.USERD_SIZE > userd.extra["size"]:
      raise Refused("NV_ERR_INVALID_OFFSET", f"userdOffset[0] {p.userdOffset[0]:#x}: USERD ({pb.USERD_SIZE:#x} bytes, 512-aligned) must fit its memory")
    ch = SimChannel(self, o, p, userd, next(self._token))
    o.extra["channel"] = ch
    self.channels.append(ch)

  def _new_engine(self, o: Obj, p: None) -> None:
    assert o.parent is not None
    ch: SimChannel = o.parent.extra["channel"]
    if ch.gpu is not None: raise Refused("NV_ERR_NOT_SUPPORTED", f"channel {o.parent.handle:#x} has an engine object already (the simulation runs one per channel)")
    from core.helpers import HCQ_TIMEOUT
    engine = "compute" if o.cls == self.info.compute_class else "copy"
    ch.gpu = Channel(f"NVK sim {engine} channel {o.parent.handle:#x}", self.arch, engine, self.vm, on_launch=lambda launch: run_launch(launch, self.vm),
                     timeout_s=3 * float(HCQ_TIMEOUT.value), stop=lambda: ch.closed)

  def _free(self, a: R.NVOS00_PARAMETERS) -> None:
    self._client_of(a.hRoot)
    o = self._obj(a.hRoot, a.hObjectOld, "hObjectOld")
    doomed = [o] + [x for x in self.objs.values() if x.client == a.hRoot and self._under(x, o)]
    for x in doomed:
      if (ch := x.extra.get("channel")) is not None:
        ch.closed = True
        self.channels.remove(ch)
      for va, _ in x.extra.get("gpu", []): self.vm.unmap(va)
      if "memfd" in x.extra:
        self.host.munmap(x.extra["sim_addr"], x.extra["size"])
        os.close(x.extra["memfd"])
        if x.cls == R.NV01_MEMORY_LOCAL_USER: self.vidmem_used -= x.extra["size"]
      self.objs.pop((x.client, x.handle), None)

  def _under(self, x: Obj, o: Obj) -> bool:
    p = x.parent
    while p is not None:
      if p is o: return True
      p = p.parent
    return False

  def _control(self, a: R.NVOS54_PARAMETERS) -> None:
    self._client_of(a.hClient)
    o = self._obj(a.hClient, a.hObject, "hObject")
    cmds: dict[int, tuple[tuple[int, ...], type[ctypes.Structure]]] = {
      R.NV0000_CTRL_CMD_GPU_GET_PROBED_IDS: ((R.NV01_ROOT_CLIENT,), R.NV0000_CTRL_GPU_GET_PROBED_IDS_PARAMS),
      R.NV0000_CTRL_CMD_GPU_ATTACH_IDS: ((R.NV01_ROOT_CLIENT,), R.NV0000_CTRL_GPU_ATTACH_IDS_PARAMS),
      R.NV0000_CTRL_CMD_GPU_GET_ID_INFO_V2: ((R.NV01_ROOT_CLIENT,), R.NV0000_CTRL_GPU_GET_ID_INFO_V2_PARAMS),
      R.NV2080_CTRL_CMD_MC_GET_ARCH_INFO: ((R.NV20_SUBDEVICE_0,), R.NV2080_CTRL_MC_GET_ARCH_INFO_PARAMS),
      R.NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN: ((self.info.host_class,), R.NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN_PARAMS),
      R.NVA06C_CTRL_CMD_GPFIFO_SCHEDULE: ((R.KEPLER_CHANNEL_GROUP_A,), R.NVA06C_CTRL_GPFIFO_SCHEDULE_PARAMS)}
    if (c := cmds.get(a.cmd)) is None: raise Refused("NV_ERR_NOT_SUPPORTED", f"control {a.cmd:#x} is not one the simulated driver serves")
    classes, ptype = c
    if o.cls not in classes: raise Refused("NV_ERR_INVALID_OBJECT", f"control {a.cmd:#x} is for class {classes[0]:#x}, object {o.handle:#x} is {o.cls:#x}")
    if a.paramsSize != ctypes.sizeof(ptype) or not a.params:
      raise Refused("NV_ERR_INVALID_PARAM_STRUCT", f"control {a.cmd:#x} takes {ptype.__name__} ({ctypes.sizeof(ptype)} bytes), paramsSize is {a.paramsSize}")
    p: Any = ptype.from_address(a.params)
    if a.cmd == R.NV0000_CTRL_CMD_GPU_GET_PROBED_IDS:
      for i in range(R.NV0000_CTRL_GPU_MAX_PROBED_GPUS): p.gpuIds[i] = p.excludedGpuIds[i] = 0xFFFFFFFF
      p.gpuIds[0] = GPU_ID
    elif a.cmd == R.NV0000_CTRL_CMD_GPU_ATTACH_IDS:
      for g in p.gpuIds:
        if g == 0xFFFFFFFF: break
        if g != GPU_ID:
          p.failedId = g
          raise Refused("NV_ERR_INVALID_ARGUMENT", f"GPU id {g:#x} was not probed (the probed GPU is {GPU_ID:#x})")
        self.attached.add(g)
    elif a.cmd == R.NV0000_CTRL_CMD_GPU_GET_ID_INFO_V2:
      if p.gpuId not in self.attached: raise Refused("NV_ERR_INVALID_ARGUMENT", f"GPU id {p.gpuId:#x} is not attached")
      p.deviceInstance, p.subDeviceInstance = DEVICE_INSTANCE, 0
    elif a.cmd == R.NV2080_CTRL_CMD_MC_GET_ARCH_INFO: p.architecture, p.implementation = ARCH_INFO[self.arch]
    elif a.cmd == R.NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN: p.workSubmitToken = o.extra["channel"].token
    else:
      chans = [x.extra["channel"] for x in self.objs.values() if x.parent is o and "channel" in x.extra]
      if p.bEnable and not any(ch.gpu is not None for ch in chans):
        raise Refused("NV_ERR_INVALID_STATE", f"channel group {o.handle:#x} has no channel with an engine object to schedule")
      if p.bEnable:
        for ch in chans: ch.start()

  def _map_memory(self, a: R.nv_ioctl_nvos33_parameters_with_fd) -> None:
    p = a.params
    self._client_of(p.hClient)
    f = self.files.get(a.fd)
    if f is None or f.kind != "dev" or f.registered not in self.files:
      raise Refused("NV_ERR_INVALID_ARGUMENT", f"fd {a.fd} is not a /dev/nvidia<N> file registered (REGISTER_FD) with a control file")
    if f.mapping is not None: raise Refused("NV_ERR_INVALID_STATE", f"fd {a.fd} maps an object already (one per file)")
    mem = self._obj(p.hClient, p.hMemory, "hMemory")
    if "memfd" not in mem.extra: raise Refused("NV_ERR_INVALID_OBJECT", f"object {p.hMemory:#x} (class {mem.cls:#x}) has no memory to map")
    if mem.parent is None or mem.parent.handle != p.hDevice:
      raise Refused("NV_ERR_INVALID_OBJECT_PARENT", f"hDevice {p.hDevice:#x} is not the parent of memory {p.hMemory:#x}")
    if p.offset or not 0 < p.length <= mem.extra["size"]:
      raise Refused("NV_ERR_INVALID_LIMIT", f"mapping [{p.offset:#x}, +{p.length:#x}) of a {mem.extra['size']:#x}-byte object")
    f.mapping = (mem, p.length)

  def _alloc_os_memory(self, a: R.nv_ioctl_nvos02_parameters_with_fd) -> None:
    p = a.params
    self._client_of(p.hRoot)
    parent = self._obj(p.hRoot, p.hObjectParent, "parent", (R.NV01_DEVICE_0,))
    if p.hClass != R.NV01_MEMORY_SYSTEM_OS_DESCRIPTOR:
      raise Refused("NV_ERR_INVALID_CLASS", f"RM_ALLOC_MEMORY of class {p.hClass:#x}: the simulated driver describes host memory only (0x71)")
    if p.hObjectNew == 0 or (p.hRoot, p.hObjectNew) in self.objs: raise Refused("NV_ERR_INVALID_OBJECT_NEW", f"handle {p.hObjectNew:#x} is 0 or in use")
    if p.pMemory % PAGE or (p.limit + 1) % PAGE: raise Refused("NV_ERR_INVALID_ARGUMENT", f"host memory {p.pMemory:#x} + {p.limit + 1:#x} is not whole pages")
    o = Obj(p.hObjectNew, p.hClass, parent, p.hRoot)
    o.extra.update(host=p.pMemory, size=p.limit + 1, gpu=[])
    self.objs[(p.hRoot, p.hObjectNew)] = o

  def _map_dma(self, a: R.NVOS46_PARAMETERS) -> None:
    self._client_of(a.hClient)
    dev = self._obj(a.hClient, a.hDevice, "hDevice", (R.NV01_DEVICE_0,))
    dma = self._obj(a.hClient, a.hDma, "hDma", (R.NV50_MEMORY_VIRTUAL,))
    mem = self._obj(a.hClient, a.hMemory, "hMemory", MEMORY_CLASSES)
    if dma.parent is not dev or mem.parent is not dev: raise Refused("NV_ERR_INVALID_OBJECT_PARENT", f"hDma and hMemory must be objects of device {a.hDevice:#x}")
    if a.offset % PAGE or a.length == 0 or a.offset + a.length > mem.extra["size"]:
      raise Refused("NV_ERR_INVALID_LIMIT", f"[{a.offset:#x}, +{a.length:#x}) is not a page-aligned range of the {mem.extra['size']:#x}-byte memory")
    if mem.cls == R.NV01_MEMORY_SYSTEM_OS_DESCRIPTOR:   # host memory: mapped where the driver chooses
      if a.flags & R.NVOS46_FLAGS_DMA_OFFSET_FIXED: raise Refused("NV_ERR_NOT_SUPPORTED", "the simulated driver maps host memory where it chooses only")
      a.dmaOffset = self.vm.map(mem.extra["host"] + a.offset, a.length, mem)
      mem.extra["gpu"].append((a.dmaOffset, a.length))
      return
    if not a.flags & R.NVOS46_FLAGS_DMA_OFFSET_FIXED:
      raise Refused("NV_ERR_NOT_SUPPORTED", "the simulated driver maps video and system memory at fixed GPU addresses only (NVOS46_FLAGS_DMA_OFFSET_FIXED)")
    va = a.dmaOffset
    if va % PAGE or va + a.length > VASpace.ALIAS_BASE: raise Refused("NV_ERR_INVALID_OFFSET", f"GPU address {va:#x}: page aligned, below 2**39 here")
    cpu = self.cpu_maps.get(va)
    if cpu is None or cpu[0] is not mem or a.offset != 0 or cpu[1] < a.length:
      raise Refused("NV_ERR_NOT_SUPPORTED", f"GPU address {va:#x} must be where this memory is mapped for the CPU (a limit of the simulation)")
    if self.vm.va_of(va) is not None: raise Refused("NV_ERR_INVALID_OFFSET", f"GPU address {va:#x} is mapped already")
    self.vm.map(va, a.length, mem, identity=True)
    mem.extra["gpu"].append((va, a.length))

  # *** mmap ***

  def mmap(self, addr: int, length: int, prot: int, flags: int, fd: int, offset: int) -> int:
    if fd == -1: return self.host.mmap(addr, length, prot, flags, -1, offset)
    f = self.files.get(fd)
    if f is None: raise OSError(errno.EBADF, f"mmap of fd {fd}, which is not open")
    if f.kind != "dev" or f.mapping is None: raise OSError(errno.EINVAL, f"mmap of fd {fd}: RM_MAP_MEMORY bound no memory to it")
    mem, n = f.mapping
    if offset or length != n: raise OSError(errno.EINVAL, f"mmap of {length:#x} bytes at offset {offset:#x}; RM_MAP_MEMORY mapped {n:#x} at 0")
    if not flags & MAP_SHARED: raise OSError(errno.EINVAL, "mappings of /dev/nvidia<N> are MAP_SHARED")
    got = self.host.mmap(addr, length, prot, flags & (MAP_SHARED | MAP_FIXED), mem.extra["memfd"], 0)
    with self.lock: self.cpu_maps[got] = (mem, length)
    return got

  def munmap(self, addr: int, length: int) -> None:
    with self.lock: self.cpu_maps.pop(addr, None)
    self.host.munmap(addr, length)

  # *** the GPU ***

  def check_doorbell(self) -> None:
    """The usermode pages' doorbell words must hold tokens this driver issued (0: not rung yet)."""
    tokens = {ch.token for ch in self.channels}
    for o in list(self.objs.values()):
      if o.cls in (R.VOLTA_USERMODE_A, R.HOPPER_USERMODE_A) and "sim_addr" in o.extra:
        t = ctypes.c_uint32.from_address(o.extra["sim_addr"] + pb.NOTIFY_CHANNEL_PENDING).value
        if t and t not in tokens: raise MockFault(f"the doorbell holds {t:#x}, which is no channel's work-submit token ({sorted(tokens)})")

  def kick(self) -> None:
    for ch in list(self.channels): ch.kick.set()

  def busy(self) -> list[str]:
    return [f"channel {ch.obj.handle:#x}: GP_GET {ch.get % ch.entries}, GP_PUT {ch.gp_put()}" for ch in list(self.channels) if ch.busy()]

  def register_program(self, name: str, uops: Any, data: Any, image: bytes) -> None:
    """A host build of each prepared kernel, filed under its code (the simulated GPU runs launches with it)."""
    from plugin_nv.hostrun import build_kernel
    PROGRAMS.add(image[data.code_offset:data.code_offset + data.code_size], data, build_kernel(name, uops))
