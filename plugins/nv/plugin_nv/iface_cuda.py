"""The CUDA+NV device: NVIDIA's CUDA driver API (libcuda.so.1, installed with the NVIDIA driver) through ctypes, the shortest path
to running on any NVIDIA machine. NEVER RUN: there is no libcuda where this was written; the argument packing and the errors are
unit-tested (tests/test_cuda_iface.py), the rest has not run.

Kernels are the same cubins the PTX (ptxas) or CUDA (NVRTC) path builds for the GPU's arch (cuModuleLoadData, cuModuleGetFunction)
and run one call at a time (core's direct path, no HCQ): cuLaunchKernel with the parameters in one buffer laid out at the offsets
the cubin's .nv.info gives (CU_LAUNCH_PARAM_BUFFER_POINTER/SIZE), timed with events when the caller waits. Memory is cuMemAlloc,
copies cuMemcpyHtoD/DtoH."""
from __future__ import annotations
import ctypes, os, struct
from typing import Any, Callable
from core.device.allocator import BufferSpec, LRUAllocator
from core.device.host_os import loadable_library
from core.device.compiled import Compiled
from plugin_nv.cubin import Cubin

CUDA_SUCCESS, CUDA_ERROR_OUT_OF_MEMORY = 0, 2
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 75, 76
CU_LAUNCH_PARAM_END, CU_LAUNCH_PARAM_BUFFER_POINTER, CU_LAUNCH_PARAM_BUFFER_SIZE = 0, 1, 2
CU_EVENT_DEFAULT = 0

INSTALL_HINT = ("CUDA+NV needs libcuda.so.1, the CUDA driver library the NVIDIA driver installs (Debian/Ubuntu: the nvidia-driver or "
                "libnvidia-compute-<version> package; set CUDA_LIB to its path if it is elsewhere). Without an NVIDIA GPU use DEV=MOCK+NV "
                "(software GPU), NVK_SIM=sm_90 DEV=NVK+NV (simulated kernel driver) or DEV=NULL:NV:PTX:sm_90 (compile only)")

class CUDAError(RuntimeError):
  """A CUDA driver call failed (names the call and the CUresult), or there is no libcuda."""

def find_libcuda() -> str | None:
  """$CUDA_LIB, else the loader's libcuda.so.1 (or what ldconfig calls libcuda)."""
  if (p := os.environ.get("CUDA_LIB")): return p if os.path.exists(p) else None
  return loadable_library("libcuda.so.1", "cuda")

def load_libcuda() -> ctypes.CDLL:
  if (path := find_libcuda()) is None: raise CUDAError(INSTALL_HINT)
  return ctypes.CDLL(path)

def pack_params(params: list[tuple[int, int]], bufs: tuple[int, ...], vals: tuple[int, ...]) -> bytes:
  """The kernel's parameter buffer: `params` is (offset, size) of each parameter in order (the cubin's KParam), filled with the
  buffer addresses (8 bytes) and then the int32 variables; the buffer is as long as the last parameter's end, 8-byte padded."""
  values = list(bufs) + list(vals)
  if len(values) != len(params): raise ValueError(f"the kernel takes {len(params)} parameters, got {len(bufs)} buffers and {len(vals)} variables")
  size = max((o + s for o, s in params), default=0)
  out = bytearray((size + 7) // 8 * 8)
  for (off, sz), v in zip(params, values):
    if sz == 8: struct.pack_into("<Q", out, off, v)
    elif sz == 4: struct.pack_into("<i", out, off, v)
    else: raise ValueError(f"parameter at {off} of {sz} bytes: kernels here take 8-byte addresses and 4-byte ints")
  return bytes(out)

class CUDA:
  """One device's context: cuInit, cuDeviceGet, the primary context made current."""
  def __init__(self, index: int = 0, lib: ctypes.CDLL | None = None):
    self.lib = lib if lib is not None else load_libcuda()
    self.call("cuInit", 0)
    dev = ctypes.c_int()
    self.call("cuDeviceGet", ctypes.byref(dev), index)
    self.dev = dev.value
    major, minor = ctypes.c_int(), ctypes.c_int()
    self.call("cuDeviceGetAttribute", ctypes.byref(major), CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, self.dev)
    self.call("cuDeviceGetAttribute", ctypes.byref(minor), CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, self.dev)
    self.arch = f"sm_{major.value}{minor.value}"
    self.ctx = ctypes.c_void_p()
    self.call("cuDevicePrimaryCtxRetain", ctypes.byref(self.ctx), self.dev)
    self.call("cuCtxSetCurrent", self.ctx)

  def call(self, fn: str, *args: Any) -> None:
    if (r := getattr(self.lib, fn)(*args)) != CUDA_SUCCESS:
      name = ctypes.c_char_p()
      self.lib.cuGetErrorName(r, ctypes.byref(name))
      raise CUDAError(f"CUDA+NV: {fn} failed: CUresult {r} ({(name.value or b'?').decode()})")

class CUDAAllocator(LRUAllocator):
  """cuMemAlloc device pointers (ints); copies through cuMemcpyHtoD/DtoH."""
  def __init__(self, device: str, cu: CUDA):
    super().__init__(device)
    self.cu = cu
  def _alloc(self, size: int, options: BufferSpec) -> Any:
    ptr = ctypes.c_uint64()
    try: self.cu.call("cuMemAlloc_v2", ctypes.byref(ptr), ctypes.c_size_t(max(size, 1)))
    except CUDAError as e:
      if "OUT_OF_MEMORY" in str(e): raise MemoryError(str(e)) from e
      raise
    return ptr.value
  def _free(self, opaque: Any, options: BufferSpec) -> None: self.cu.call("cuMemFree_v2", ctypes.c_uint64(opaque))
  def _offset(self, opaque: Any, size: int, offset: int) -> Any: return opaque + offset
  def _copyin(self, dest: Any, src: memoryview) -> None:
    host = (ctypes.c_char * src.nbytes).from_buffer_copy(src)
    self.cu.call("cuMemcpyHtoD_v2", ctypes.c_uint64(dest), host, ctypes.c_size_t(src.nbytes))
  def _copyout(self, dest: memoryview, src: Any) -> None:
    host = (ctypes.c_char * dest.nbytes)()
    self.cu.call("cuMemcpyDtoH_v2", host, ctypes.c_uint64(src), ctypes.c_size_t(dest.nbytes))
    dest.cast("B")[:] = memoryview(host).cast("B")

class CUDAProgram:
  """A cubin loaded with cuModuleLoadData; calls are cuLaunchKernel with the packed parameter buffer."""
  def __init__(self, cu: CUDA, name: str, lib: bytes):
    self.cu, self.name = cu, name
    k = Cubin(lib).kernel(name)
    self.params = [(p.offset, p.size) for p in k.params]
    self.module, self.func = ctypes.c_void_p(), ctypes.c_void_p()
    cu.call("cuModuleLoadData", ctypes.byref(self.module), ctypes.create_string_buffer(lib, len(lib)))   # the driver copies the image
    cu.call("cuModuleGetFunction", ctypes.byref(self.func), self.module, name.encode())

  def __call__(self, *bufs: Any, global_size: tuple[int, ...] = (1, 1, 1), local_size: tuple[int, ...] = (1, 1, 1),
               vals: tuple[int, ...] = (), wait: bool = False) -> float | None:
    blob = pack_params(self.params, tuple(int(b) for b in bufs), tuple(vals))
    arg = ctypes.create_string_buffer(blob, len(blob))
    size = ctypes.c_size_t(len(blob))
    extra = (ctypes.c_void_p * 5)(CU_LAUNCH_PARAM_BUFFER_POINTER, ctypes.addressof(arg), CU_LAUNCH_PARAM_BUFFER_SIZE,
                                  ctypes.addressof(size), CU_LAUNCH_PARAM_END)
    g, lo = (tuple(global_size) + (1, 1, 1))[:3], (tuple(local_size) + (1, 1, 1))[:3]
    start, end = ctypes.c_void_p(), ctypes.c_void_p()
    if wait:
      for e in (start, end): self.cu.call("cuEventCreate", ctypes.byref(e), CU_EVENT_DEFAULT)
      self.cu.call("cuEventRecord", start, None)
    self.cu.call("cuLaunchKernel", self.func, *[ctypes.c_uint(x) for x in g + lo], ctypes.c_uint(0), None, None, extra)
    if not wait:
      self.cu.call("cuCtxSynchronize")   # the direct path is synchronous: buffers are read back right after
      return None
    self.cu.call("cuEventRecord", end, None)
    self.cu.call("cuEventSynchronize", end)
    ms = ctypes.c_float()
    self.cu.call("cuEventElapsedTime", ctypes.byref(ms), start, end)
    for e in (start, end): self.cu.call("cuEventDestroy_v2", e)
    return ms.value / 1e3

_cuda: dict[int, CUDA] = {}

def make_cuda_device(name: str, target: Any, rname: str, arch: str | None) -> Compiled:
  """The Compiled device for DEV=CUDA+NV[:PTX|CUDA[:ARCH]]: a CUDAError naming what to install when libcuda is missing."""
  from plugin_nv import make_cuda, make_ptx
  if (cu := _cuda.get(0)) is None: cu = _cuda[0] = CUDA(0)
  if arch and arch != cu.arch: raise ValueError(f"DEV asks for CUDA+NV {arch}, but CUDA device 0 is {cu.arch}")
  renderer, compiler = (make_ptx if rname == "PTX" else make_cuda)(cu.arch)
  renderer.device = name
  runtime: Callable[[str, bytes], CUDAProgram] = lambda n, lib: CUDAProgram(cu, n, lib)
  return Compiled(name, CUDAAllocator(name, cu), renderer, compiler, runtime, target)
