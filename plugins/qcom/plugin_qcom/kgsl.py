"""The Adreno kernel driver's user interface (/dev/kgsl-3d0): structure layouts and ioctl numbers as ctypes, from the public
header msm_kgsl.h (Linux msm tree; a copy ships with mesa as src/freedreno/vulkan/msm_kgsl.h). Untested on hardware: the
layouts are checked against that header (tests/test_kgsl_layout.py), nothing here has run on a phone."""
from __future__ import annotations
import ctypes

KGSL_IOC_TYPE = 0x09
# asm-generic/ioctl.h: dir in bits 30-31 (1 write, 2 read, 3 both), size 16-29, type 8-15, number 0-7
_IOC_WRITE, _IOC_READ = 1, 2

def _ioc(d: int, nr: int, struct: type) -> int: return d << 30 | ctypes.sizeof(struct) << 16 | KGSL_IOC_TYPE << 8 | nr

class kgsl_device_getproperty(ctypes.Structure):
  _fields_ = [("type", ctypes.c_uint), ("value", ctypes.c_void_p), ("sizebytes", ctypes.c_size_t)]

class kgsl_device_waittimestamp_ctxtid(ctypes.Structure):
  _fields_ = [("context_id", ctypes.c_uint), ("timestamp", ctypes.c_uint), ("timeout", ctypes.c_uint)]

class kgsl_drawctxt_create(ctypes.Structure):
  _fields_ = [("flags", ctypes.c_uint), ("drawctxt_id", ctypes.c_uint)]

class kgsl_drawctxt_destroy(ctypes.Structure):
  _fields_ = [("drawctxt_id", ctypes.c_uint)]

class kgsl_cmdstream_readtimestamp_ctxtid(ctypes.Structure):
  _fields_ = [("context_id", ctypes.c_uint), ("type", ctypes.c_uint), ("timestamp", ctypes.c_uint)]

class kgsl_gpuobj_alloc(ctypes.Structure):
  _fields_ = [("size", ctypes.c_uint64), ("flags", ctypes.c_uint64), ("va_len", ctypes.c_uint64), ("mmapsize", ctypes.c_uint64),
              ("id", ctypes.c_uint), ("metadata_len", ctypes.c_uint), ("metadata", ctypes.c_uint64)]

class kgsl_gpuobj_free(ctypes.Structure):
  _fields_ = [("flags", ctypes.c_uint64), ("priv", ctypes.c_uint64), ("id", ctypes.c_uint), ("type", ctypes.c_uint), ("len", ctypes.c_uint)]

class kgsl_gpuobj_info(ctypes.Structure):
  _fields_ = [("gpuaddr", ctypes.c_uint64), ("flags", ctypes.c_uint64), ("size", ctypes.c_uint64), ("va_len", ctypes.c_uint64),
              ("va_addr", ctypes.c_uint64), ("id", ctypes.c_uint)]

class kgsl_command_object(ctypes.Structure):
  _fields_ = [("offset", ctypes.c_uint64), ("gpuaddr", ctypes.c_uint64), ("size", ctypes.c_uint64), ("flags", ctypes.c_uint),
              ("id", ctypes.c_uint)]

class kgsl_command_syncpoint(ctypes.Structure):
  _fields_ = [("priv", ctypes.c_uint64), ("size", ctypes.c_uint64), ("type", ctypes.c_uint)]

class kgsl_gpu_command(ctypes.Structure):
  _fields_ = [("flags", ctypes.c_uint64), ("cmdlist", ctypes.c_uint64), ("cmdsize", ctypes.c_uint), ("numcmds", ctypes.c_uint),
              ("objlist", ctypes.c_uint64), ("objsize", ctypes.c_uint), ("numobjs", ctypes.c_uint), ("synclist", ctypes.c_uint64),
              ("syncsize", ctypes.c_uint), ("numsyncs", ctypes.c_uint), ("context_id", ctypes.c_uint), ("timestamp", ctypes.c_uint)]

STRUCTS = (kgsl_device_getproperty, kgsl_device_waittimestamp_ctxtid, kgsl_drawctxt_create, kgsl_drawctxt_destroy,
           kgsl_cmdstream_readtimestamp_ctxtid, kgsl_gpuobj_alloc, kgsl_gpuobj_free, kgsl_gpuobj_info, kgsl_command_object,
           kgsl_command_syncpoint, kgsl_gpu_command)

IOCTL_KGSL_DEVICE_GETPROPERTY = _ioc(_IOC_READ | _IOC_WRITE, 0x02, kgsl_device_getproperty)
IOCTL_KGSL_DEVICE_WAITTIMESTAMP_CTXTID = _ioc(_IOC_WRITE, 0x07, kgsl_device_waittimestamp_ctxtid)
IOCTL_KGSL_DRAWCTXT_CREATE = _ioc(_IOC_READ | _IOC_WRITE, 0x13, kgsl_drawctxt_create)
IOCTL_KGSL_DRAWCTXT_DESTROY = _ioc(_IOC_WRITE, 0x14, kgsl_drawctxt_destroy)
IOCTL_KGSL_CMDSTREAM_READTIMESTAMP_CTXTID = _ioc(_IOC_READ | _IOC_WRITE, 0x16, kgsl_cmdstream_readtimestamp_ctxtid)
IOCTL_KGSL_GPUOBJ_ALLOC = _ioc(_IOC_READ | _IOC_WRITE, 0x45, kgsl_gpuobj_alloc)
IOCTL_KGSL_GPUOBJ_FREE = _ioc(_IOC_WRITE, 0x46, kgsl_gpuobj_free)
IOCTL_KGSL_GPUOBJ_INFO = _ioc(_IOC_READ | _IOC_WRITE, 0x47, kgsl_gpuobj_info)
IOCTL_KGSL_GPU_COMMAND = _ioc(_IOC_READ | _IOC_WRITE, 0x4A, kgsl_gpu_command)
IOCTLS = {n: v for n, v in globals().items() if n.startswith("IOCTL_KGSL_")}

# flags (msm_kgsl.h)
KGSL_CONTEXT_NO_GMEM_ALLOC, KGSL_CONTEXT_PREAMBLE = 0x2, 0x10
KGSL_CONTEXT_PRIORITY_SHIFT, KGSL_CONTEXT_TYPE_SHIFT, KGSL_CONTEXT_TYPE_CL = 12, 20, 2
KGSL_CONTEXT_PREEMPT_STYLE_SHIFT, KGSL_CONTEXT_PREEMPT_STYLE_FINEGRAIN = 25, 0x2
KGSL_CMDBATCH_PROFILING = 0x10
KGSL_CMDLIST_IB, KGSL_OBJLIST_MEMOBJ = 0x1, 0x8
KGSL_MEMFLAGS_USE_CPU_MAP, KGSL_MEMFLAGS_IOCOHERENT = 0x10000000, 0x80000000
KGSL_CACHEMODE_SHIFT, KGSL_CACHEMODE_WRITECOMBINE, KGSL_CACHEMODE_WRITEBACK = 26, 0, 3
KGSL_TIMESTAMP_RETIRED = 2

def context_flags(priority: int = 8) -> int:
  """DRAWCTXT_CREATE flags for an OpenCL-type context with a preamble, no GMEM, fine-grained preemption."""
  return (KGSL_CONTEXT_PREAMBLE | KGSL_CONTEXT_NO_GMEM_ALLOC | KGSL_CONTEXT_TYPE_CL << KGSL_CONTEXT_TYPE_SHIFT |
          priority << KGSL_CONTEXT_PRIORITY_SHIFT | KGSL_CONTEXT_PREEMPT_STYLE_FINEGRAIN << KGSL_CONTEXT_PREEMPT_STYLE_SHIFT)

def ib_command(gpuaddr: int, size: int) -> kgsl_command_object:
  """One indirect buffer of `size` bytes at `gpuaddr` for IOCTL_KGSL_GPU_COMMAND's cmdlist."""
  return kgsl_command_object(offset=0, gpuaddr=gpuaddr, size=size, flags=KGSL_CMDLIST_IB, id=0)

def memobj(gpuaddr: int, size: int, obj_id: int) -> kgsl_command_object:
  """One memory object a submission uses, for IOCTL_KGSL_GPU_COMMAND's objlist (the driver keeps it alive until retired)."""
  return kgsl_command_object(offset=0, gpuaddr=gpuaddr, size=size, flags=KGSL_OBJLIST_MEMOBJ, id=obj_id)

def gpu_command(context_id: int, ibs: list[kgsl_command_object], objs: list[kgsl_command_object] | None = None,
                timestamp: int = 0) -> tuple[kgsl_gpu_command, tuple[ctypes.Array, ...]]:
  """The IOCTL_KGSL_GPU_COMMAND argument submitting `ibs` (cmdlist) that use the memory objects `objs` (objlist) on a context;
  the arrays are returned to keep them alive until the ioctl returns."""
  arr = (kgsl_command_object * len(ibs))(*ibs)
  objs = objs or []
  objarr = (kgsl_command_object * len(objs))(*objs)
  cmd = kgsl_gpu_command(flags=0, cmdlist=ctypes.addressof(arr), cmdsize=ctypes.sizeof(kgsl_command_object), numcmds=len(ibs),
                         objlist=ctypes.addressof(objarr) if objs else 0, objsize=ctypes.sizeof(kgsl_command_object), numobjs=len(objs),
                         synclist=0, syncsize=ctypes.sizeof(kgsl_command_syncpoint), numsyncs=0, context_id=context_id, timestamp=timestamp)
  return cmd, (arr, objarr)
