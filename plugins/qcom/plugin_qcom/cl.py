"""OpenCL through libOpenCL (the ICD loader) via ctypes: the handful of entry points the CL interface and the compiler use.

Constants and signatures are those of the Khronos OpenCL headers (CL/cl.h, OpenCL 1.2 API, which every driver offers)."""
from __future__ import annotations
import atexit, ctypes, dataclasses, functools, hashlib, os, shutil, tempfile, threading
from typing import Any
from core.device.host_os import loadable_library
from core.helpers import LRUCache

# CL/cl.h
CL_SUCCESS, CL_BUILD_PROGRAM_FAILURE = 0, -11
CL_PLATFORM_VERSION, CL_PLATFORM_NAME = 0x0901, 0x0902
CL_DEVICE_TYPE_ALL = 0xFFFFFFFF
CL_DEVICE_MAX_WORK_GROUP_SIZE, CL_DEVICE_MAX_WORK_ITEM_SIZES, CL_DEVICE_MAX_MEM_ALLOC_SIZE = 0x1004, 0x1005, 0x1010
CL_DEVICE_IMAGE2D_MAX_WIDTH, CL_DEVICE_IMAGE2D_MAX_HEIGHT, CL_DEVICE_IMAGE_SUPPORT = 0x1011, 0x1012, 0x1016
CL_DEVICE_MEM_BASE_ADDR_ALIGN, CL_DEVICE_LOCAL_MEM_SIZE = 0x1019, 0x1023
CL_DEVICE_NAME, CL_DRIVER_VERSION, CL_DEVICE_VERSION, CL_DEVICE_EXTENSIONS, CL_DEVICE_DOUBLE_FP_CONFIG = 0x102B, 0x102D, 0x102F, 0x1030, 0x1032
CL_QUEUE_PROFILING_ENABLE = 1 << 1
CL_MEM_READ_WRITE, CL_MEM_USE_HOST_PTR, CL_MEM_COPY_HOST_PTR = 1 << 0, 1 << 3, 1 << 5
CL_MAP_READ, CL_MAP_WRITE = 1 << 0, 1 << 1
CL_PROGRAM_BINARY_SIZES, CL_PROGRAM_BINARIES, CL_PROGRAM_BUILD_LOG = 0x1165, 0x1166, 0x1183
CL_BUFFER_CREATE_TYPE_REGION = 0x1220
CL_PROFILING_COMMAND_START, CL_PROFILING_COMMAND_END = 0x1282, 0x1283
CL_KERNEL_NUM_ARGS, CL_KERNEL_ARG_NAME = 0x1191, 0x119A
CL_RGBA, CL_HALF_FLOAT, CL_FLOAT, CL_MEM_OBJECT_IMAGE2D = 0x10B5, 0x10DD, 0x10DE, 0x10F1
BUILD_OPTIONS = b"-cl-kernel-arg-info"   # argument names: a kernel's dataN parameters say which buffer slot each is

# the error names of CL/cl.h, so a failure says what it was
ERRORS = {0: "CL_SUCCESS", -1: "CL_DEVICE_NOT_FOUND", -2: "CL_DEVICE_NOT_AVAILABLE", -3: "CL_COMPILER_NOT_AVAILABLE",
          -4: "CL_MEM_OBJECT_ALLOCATION_FAILURE", -5: "CL_OUT_OF_RESOURCES", -6: "CL_OUT_OF_HOST_MEMORY",
          -7: "CL_PROFILING_INFO_NOT_AVAILABLE", -8: "CL_MEM_COPY_OVERLAP", -9: "CL_IMAGE_FORMAT_MISMATCH",
          -10: "CL_IMAGE_FORMAT_NOT_SUPPORTED", -11: "CL_BUILD_PROGRAM_FAILURE", -12: "CL_MAP_FAILURE",
          -13: "CL_MISALIGNED_SUB_BUFFER_OFFSET", -14: "CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST", -19: "CL_KERNEL_ARG_INFO_NOT_AVAILABLE", -30: "CL_INVALID_VALUE",
          -32: "CL_INVALID_PLATFORM", -33: "CL_INVALID_DEVICE", -34: "CL_INVALID_CONTEXT", -36: "CL_INVALID_COMMAND_QUEUE",
          -37: "CL_INVALID_HOST_PTR", -38: "CL_INVALID_MEM_OBJECT", -42: "CL_INVALID_BINARY", -44: "CL_INVALID_PROGRAM",
          -45: "CL_INVALID_PROGRAM_EXECUTABLE", -46: "CL_INVALID_KERNEL_NAME", -48: "CL_INVALID_KERNEL", -49: "CL_INVALID_ARG_INDEX",
          -50: "CL_INVALID_ARG_VALUE", -51: "CL_INVALID_ARG_SIZE", -52: "CL_INVALID_KERNEL_ARGS", -53: "CL_INVALID_WORK_DIMENSION",
          -54: "CL_INVALID_WORK_GROUP_SIZE", -55: "CL_INVALID_WORK_ITEM_SIZE", -56: "CL_INVALID_GLOBAL_OFFSET",
          -58: "CL_INVALID_EVENT", -61: "CL_INVALID_BUFFER_SIZE", -63: "CL_INVALID_GLOBAL_WORK_SIZE"}

class CLError(RuntimeError):
  """An OpenCL call failed; the message names the call and the error."""
  def __init__(self, what: str, code: int):
    super().__init__(f"OpenCL {what} failed: {ERRORS.get(code, 'error')} ({code})")
    self.code = code

P, SZ, U32, U64, I32 = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_int32
PI32 = ctypes.POINTER(I32)
# name -> (restype, argtypes); functions returning a handle take a trailing cl_int* error code
_SIGS: dict[str, tuple[Any, list[Any]]] = {
  "clGetPlatformIDs": (I32, [U32, P, ctypes.POINTER(U32)]),
  "clGetPlatformInfo": (I32, [P, U32, SZ, P, ctypes.POINTER(SZ)]),
  "clGetDeviceIDs": (I32, [P, U64, U32, P, ctypes.POINTER(U32)]),
  "clGetDeviceInfo": (I32, [P, U32, SZ, P, ctypes.POINTER(SZ)]),
  "clCreateContext": (P, [P, U32, P, P, P, PI32]),
  "clCreateCommandQueue": (P, [P, P, U64, PI32]),
  "clCreateBuffer": (P, [P, U64, SZ, P, PI32]),
  "clCreateSubBuffer": (P, [P, U64, U32, P, PI32]),
  "clReleaseMemObject": (I32, [P]),
  "clEnqueueWriteBuffer": (I32, [P, P, U32, SZ, SZ, P, U32, P, P]),
  "clEnqueueReadBuffer": (I32, [P, P, U32, SZ, SZ, P, U32, P, P]),
  "clEnqueueCopyBuffer": (I32, [P, P, P, SZ, SZ, SZ, U32, P, P]),
  "clCreateImage": (P, [P, U64, P, P, P, PI32]),
  "clEnqueueWriteImage": (I32, [P, P, U32, ctypes.POINTER(SZ), ctypes.POINTER(SZ), SZ, SZ, P, U32, P, P]),
  "clEnqueueReadImage": (I32, [P, P, U32, ctypes.POINTER(SZ), ctypes.POINTER(SZ), SZ, SZ, P, U32, P, P]),
  "clEnqueueCopyBufferToImage": (I32, [P, P, P, SZ, ctypes.POINTER(SZ), ctypes.POINTER(SZ), U32, P, P]),
  "clEnqueueCopyImageToBuffer": (I32, [P, P, P, ctypes.POINTER(SZ), ctypes.POINTER(SZ), SZ, U32, P, P]),
  "clEnqueueMapBuffer": (P, [P, P, U32, U64, SZ, SZ, U32, P, P, PI32]),
  "clEnqueueUnmapMemObject": (I32, [P, P, P, U32, P, P]),
  "clCreateProgramWithSource": (P, [P, U32, ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(SZ), PI32]),
  "clCreateProgramWithBinary": (P, [P, U32, P, ctypes.POINTER(SZ), ctypes.POINTER(ctypes.c_char_p), PI32, PI32]),
  "clBuildProgram": (I32, [P, U32, P, ctypes.c_char_p, P, P]),
  "clGetProgramBuildInfo": (I32, [P, P, U32, SZ, P, ctypes.POINTER(SZ)]),
  "clGetProgramInfo": (I32, [P, U32, SZ, P, ctypes.POINTER(SZ)]),
  "clReleaseProgram": (I32, [P]),
  "clCreateKernel": (P, [P, ctypes.c_char_p, PI32]),
  "clReleaseKernel": (I32, [P]),
  "clGetKernelInfo": (I32, [P, U32, SZ, P, ctypes.POINTER(SZ)]),
  "clGetKernelArgInfo": (I32, [P, U32, U32, SZ, P, ctypes.POINTER(SZ)]),
  "clSetKernelArg": (I32, [P, U32, SZ, P]),
  "clEnqueueNDRangeKernel": (I32, [P, P, U32, P, ctypes.POINTER(SZ), ctypes.POINTER(SZ), U32, P, P]),
  "clWaitForEvents": (I32, [U32, P]),
  "clGetEventProfilingInfo": (I32, [P, U32, SZ, P, ctypes.POINTER(SZ)]),
  "clReleaseEvent": (I32, [P]),
  "clFinish": (I32, [P]),
}

class cl_image_format(ctypes.Structure):
  _fields_ = [("image_channel_order", U32), ("image_channel_data_type", U32)]

class cl_image_desc(ctypes.Structure):
  _fields_ = [("image_type", U32), ("image_width", SZ), ("image_height", SZ), ("image_depth", SZ), ("image_array_size", SZ),
              ("image_row_pitch", SZ), ("image_slice_pitch", SZ), ("num_mip_levels", U32), ("num_samples", U32), ("buffer", P)]

def find_library() -> str | None:
  """libOpenCL's file name: the ICD loader (Debian: ocl-icd-libopencl1), None when it is not installed."""
  return loadable_library("libOpenCL.so.1", "OpenCL")

INSTALL = "install an OpenCL driver and the ICD loader (Debian/Ubuntu: apt-get install pocl-opencl-icd ocl-icd-libopencl1)"

@functools.cache
def lib() -> Any:
  """libOpenCL with the signatures above set; raises RuntimeError with the fix when it is missing."""
  name = find_library()
  if name is None: raise RuntimeError(f"QCOM's CL interface needs libOpenCL, which was not found: {INSTALL}")
  # pocl's kernel cache is not safe for processes compiling at the same time (pocl issues #430, #1480: nondeterministic crashes,
  # which pytest-xdist workers hit): unless told otherwise, each process gets its own, removed at exit. Other drivers ignore it.
  if "POCL_CACHE_DIR" not in os.environ and "POCL_KERNEL_CACHE" not in os.environ:
    d = os.environ["POCL_CACHE_DIR"] = tempfile.mkdtemp(prefix="core-pocl-")
    atexit.register(shutil.rmtree, d, True)
  cl = ctypes.CDLL(name)
  for fn, (res, args) in _SIGS.items():
    f = getattr(cl, fn)
    f.restype, f.argtypes = res, args
  return cl

def check(what: str, code: int) -> None:
  if code != CL_SUCCESS: raise CLError(what, code)

def call_handle(fn: str, *args: Any) -> int:
  """Calls an entry point returning a handle with a trailing error-code argument; raises on failure."""
  err = I32()
  h = getattr(lib(), fn)(*args, ctypes.byref(err))
  check(fn, err.value)
  return h

def _info(getter: Any, what: str, handle: Any, param: int, extra: tuple[Any, ...] = ()) -> bytes:
  n = SZ()
  check(what, getter(handle, *extra, param, 0, None, ctypes.byref(n)))
  buf = ctypes.create_string_buffer(n.value)
  check(what, getter(handle, *extra, param, n.value, buf, None))
  return buf.raw[:n.value]

def _str(raw: bytes) -> str: return raw.rstrip(b"\0").decode(errors="replace")

@dataclasses.dataclass(frozen=True)
class DeviceInfo:
  """What the renderer and the allocator need to know about one OpenCL device."""
  platform: str
  name: str
  version: str
  driver: str
  extensions: frozenset[str]
  max_work_group: int
  max_work_items: tuple[int, ...]
  local_mem: int
  base_align: int          # bytes a sub-buffer's offset must be a multiple of
  max_alloc: int
  image_support: bool
  image2d_max: tuple[int, int]   # (width, height)
  @property
  def fp16(self) -> bool: return "cl_khr_fp16" in self.extensions
  @property
  def fp64(self) -> bool: return "cl_khr_fp64" in self.extensions

def _u(raw: bytes) -> int: return int.from_bytes(raw, "little")

def device_info(platform: int, dev: int) -> DeviceInfo:
  cl = lib()
  d = lambda p: _info(cl.clGetDeviceInfo, "clGetDeviceInfo", dev, p)  # noqa: E731
  items = d(CL_DEVICE_MAX_WORK_ITEM_SIZES)
  sz = ctypes.sizeof(SZ)
  return DeviceInfo(platform=_str(_info(cl.clGetPlatformInfo, "clGetPlatformInfo", platform, CL_PLATFORM_NAME)),
                    name=_str(d(CL_DEVICE_NAME)), version=_str(d(CL_DEVICE_VERSION)), driver=_str(d(CL_DRIVER_VERSION)),
                    extensions=frozenset(_str(d(CL_DEVICE_EXTENSIONS)).split()), max_work_group=_u(d(CL_DEVICE_MAX_WORK_GROUP_SIZE)),
                    max_work_items=tuple(_u(items[i:i + sz]) for i in range(0, len(items), sz)), local_mem=_u(d(CL_DEVICE_LOCAL_MEM_SIZE)),
                    base_align=_u(d(CL_DEVICE_MEM_BASE_ADDR_ALIGN)) // 8, max_alloc=_u(d(CL_DEVICE_MAX_MEM_ALLOC_SIZE)),
                    image_support=bool(_u(d(CL_DEVICE_IMAGE_SUPPORT))),
                    image2d_max=(_u(d(CL_DEVICE_IMAGE2D_MAX_WIDTH)), _u(d(CL_DEVICE_IMAGE2D_MAX_HEIGHT))))

@functools.cache
def devices() -> tuple[tuple[int, int], ...]:
  """(platform, device) handles of every OpenCL device, platforms in the loader's order; () when there is none."""
  cl = lib()
  n = U32()
  if cl.clGetPlatformIDs(0, None, ctypes.byref(n)) != CL_SUCCESS or n.value == 0: return ()
  plats = (P * n.value)()
  check("clGetPlatformIDs", cl.clGetPlatformIDs(n.value, plats, None))
  out = []
  for p in plats:
    m = U32()
    if cl.clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 0, None, ctypes.byref(m)) != CL_SUCCESS: continue
    devs = (P * m.value)()
    check("clGetDeviceIDs", cl.clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, m.value, devs, None))
    out += [(int(p or 0), int(dv or 0)) for dv in devs]
  return tuple(out)

class Program:
  """A built cl_program handle, released when its last holder (the context's cache, a CLProgram) lets go of it."""
  __slots__ = ("handle",)
  def __init__(self, handle: int): self.handle = handle
  def __del__(self) -> None:
    try: lib().clReleaseProgram(self.handle)
    except (AttributeError, TypeError, OSError): pass   # interpreter shutdown

class CLContext:
  """One OpenCL device with its context and an in-order command queue (profiling on, so a waited kernel reports its time)."""
  def __init__(self, index: int = 0):
    devs = devices()
    if not devs: raise RuntimeError(f"QCOM's CL interface: libOpenCL found no OpenCL device (no driver registered in /etc/OpenCL/vendors); {INSTALL}")
    if not 0 <= index < len(devs): raise RuntimeError(f"QCOM's CL interface: no OpenCL device {index}; there are {len(devs)}")
    self.platform, self.device = devs[index]
    self.info = device_info(self.platform, self.device)
    dev = P(self.device)
    self.context = call_handle("clCreateContext", None, 1, ctypes.byref(dev), None, None)
    self.queue = call_handle("clCreateCommandQueue", self.context, self.device, CL_QUEUE_PROFILING_ENABLE)
    self.lock = threading.Lock()
    # built programs by the sha256 of their binary: building (from source or binary) is the costly step on every driver (pocl:
    # ~0.1 s a kernel), and the compiler has just built the program whose binary a CLProgram then loads
    self.programs = LRUCache(f"cl_programs_{index}", 512)

  def built(self, binary: bytes) -> Program | None:
    with self.lock: return self.programs.get(hashlib.sha256(binary).digest())

  def keep(self, binary: bytes, prog: Program) -> None:
    with self.lock: self.programs[hashlib.sha256(binary).digest()] = prog

  def finish(self) -> None: check("clFinish", lib().clFinish(self.queue))

_contexts: dict[int, CLContext] = {}
_ctx_lock = threading.Lock()

def context(index: int = 0) -> CLContext:
  """The process's one CLContext per device index (compiler, allocator and programs share it: cl_mem and cl_program belong to it)."""
  with _ctx_lock:
    if (c := _contexts.get(index)) is None: c = _contexts[index] = CLContext(index)
  return c

def available() -> bool:
  """libOpenCL loads and lists at least one device (cheap: no context is created)."""
  try: return bool(devices())
  except (RuntimeError, OSError): return False
