"""Metal through the Objective-C runtime with ctypes (no PyObjC): objc_msgSend called with each method's own C signature, and
the few Metal objects this plugin makes (device, libraries, pipelines, buffers, queues, command buffers, encoders, events).
macOS only; nothing here is imported elsewhere. NOT RUN YET: written from Apple's documented API, never executed on a Mac."""
from __future__ import annotations
import ctypes, functools
from typing import Any
from core.device.compiler import CompileError

MTLResourceStorageModeShared = 0          # CPU and GPU see the same memory: buffer addresses are host pointers
MTLBarrierScopeBuffers = 1
MTLCommandBufferStatusCompleted, MTLCommandBufferStatusError = 4, 5
MTLIndirectCommandTypeConcurrentDispatch = 1 << 5   # (MTLIndirectCommandBuffer.h) compute commands, grids of whole threadgroups
MTLResourceUsageRead, MTLResourceUsageWrite = 1, 2
MTLPipelineOptionNone = 0

class MTLSize(ctypes.Structure):
  _fields_ = [("width", ctypes.c_ulong), ("height", ctypes.c_ulong), ("depth", ctypes.c_ulong)]

class NSRange(ctypes.Structure):
  _fields_ = [("location", ctypes.c_ulong), ("length", ctypes.c_ulong)]

@functools.cache
def _libs() -> tuple[Any, Any]:
  objc = ctypes.CDLL("/usr/lib/libobjc.A.dylib")
  objc.objc_getClass.restype, objc.objc_getClass.argtypes = ctypes.c_void_p, [ctypes.c_char_p]
  objc.sel_registerName.restype, objc.sel_registerName.argtypes = ctypes.c_void_p, [ctypes.c_char_p]
  objc.objc_autoreleasePoolPush.restype, objc.objc_autoreleasePoolPush.argtypes = ctypes.c_void_p, []
  objc.objc_autoreleasePoolPop.restype, objc.objc_autoreleasePoolPop.argtypes = None, [ctypes.c_void_p]
  ctypes.CDLL("/System/Library/Frameworks/Foundation.framework/Foundation")   # NSString, NSError
  metal = ctypes.CDLL("/System/Library/Frameworks/Metal.framework/Metal")
  metal.MTLCreateSystemDefaultDevice.restype, metal.MTLCreateSystemDefaultDevice.argtypes = ctypes.c_void_p, []
  return objc, metal

@functools.cache
def _sel(name: str) -> int: return _libs()[0].sel_registerName(name.encode())

@functools.cache
def _cls(name: str) -> int: return _libs()[0].objc_getClass(name.encode())

@functools.cache
def _msg_fn(restype: Any, argtypes: tuple[Any, ...]) -> Any:
  # objc_msgSend is not variadic on arm64: each call goes through a prototype with the method's exact argument types
  if not (addr := ctypes.cast(_libs()[0].objc_msgSend, ctypes.c_void_p).value): raise RuntimeError("libobjc has no objc_msgSend")
  return ctypes.CFUNCTYPE(restype, ctypes.c_void_p, ctypes.c_void_p, *argtypes)(addr)

def msg(obj: Any, sel: str, *args: Any, restype: Any = ctypes.c_void_p, argtypes: tuple[Any, ...] = ()) -> Any:
  """[obj sel...] with the C types of its arguments and result (default: objects, as void pointers)."""
  if len(argtypes) != len(args): argtypes = tuple(argtypes) + (ctypes.c_void_p,) * (len(args) - len(argtypes))
  return _msg_fn(restype, tuple(argtypes))(obj, _sel(sel), *args)

def nsstring(s: str) -> int: return msg(_cls("NSString"), "stringWithUTF8String:", s.encode(), argtypes=(ctypes.c_char_p,))
def pystring(ns: int) -> str: return (msg(ns, "UTF8String", restype=ctypes.c_char_p) or b"").decode(errors="replace") if ns else ""
def release(obj: int) -> None:
  if obj: msg(obj, "release", restype=None)
def retain(obj: int) -> int: return msg(obj, "retain")
def error_text(err: ctypes.c_void_p) -> str: return pystring(msg(err.value, "localizedDescription")) if err.value else "no NSError given"

class AutoreleasePool:
  """Objects Metal returns autoreleased (command buffers, encoders) are freed when the pool ends; keep one with `retain`."""
  def __enter__(self) -> AutoreleasePool:
    self.pool = _libs()[0].objc_autoreleasePoolPush()
    return self
  def __exit__(self, *exc: Any) -> None: _libs()[0].objc_autoreleasePoolPop(self.pool)

@functools.cache
def metal_device() -> int:
  """The system's default MTLDevice; RuntimeError when there is none."""
  if not (dev := _libs()[1].MTLCreateSystemDefaultDevice()): raise RuntimeError("MTLCreateSystemDefaultDevice() returned nil: no Metal GPU here")
  return dev

def device_name(dev: int) -> str: return pystring(msg(dev, "name"))

def new_library(dev: int, src: str) -> int:
  """MSL -> MTLLibrary, fast math off (NaN and inf behave as IEEE); CompileError with Metal's message when it is rejected."""
  with AutoreleasePool():
    opts = msg(msg(_cls("MTLCompileOptions"), "alloc"), "init")
    msg(opts, "setFastMathEnabled:", False, restype=None, argtypes=(ctypes.c_bool,))
    err = ctypes.c_void_p()
    lib = msg(dev, "newLibraryWithSource:options:error:", nsstring(src), opts, ctypes.byref(err),
              argtypes=(ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)))
    release(opts)
    if not lib: raise CompileError(f"Metal rejected the MSL: {error_text(err)}\n--- source ---\n{src}")
  return lib

def new_pipeline(dev: int, src: str, name: str) -> int:
  """The MTLComputePipelineState of kernel `name` in the MSL `src`, usable in indirect command buffers (a Jit replay puts any
  kernel into one)."""
  lib = new_library(dev, src)
  with AutoreleasePool():
    fn = msg(lib, "newFunctionWithName:", nsstring(name))
    if not fn: raise CompileError(f"the MSL has no kernel function {name!r}")
    desc = msg(msg(_cls("MTLComputePipelineDescriptor"), "alloc"), "init")
    msg(desc, "setComputeFunction:", fn, restype=None)
    msg(desc, "setSupportIndirectCommandBuffers:", True, restype=None, argtypes=(ctypes.c_bool,))
    err = ctypes.c_void_p()
    pso = msg(dev, "newComputePipelineStateWithDescriptor:options:reflection:error:", desc, MTLPipelineOptionNone, None, ctypes.byref(err),
              argtypes=(ctypes.c_void_p, ctypes.c_ulong, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)))
    release(desc)
    release(fn)
    release(lib)
    if not pso: raise CompileError(f"Metal made no pipeline for {name}: {error_text(err)}")
  return pso

def max_threads(pso: int) -> int: return msg(pso, "maxTotalThreadsPerThreadgroup", restype=ctypes.c_ulong)

def new_buffer(dev: int, size: int) -> tuple[int, int]:
  """A shared-storage MTLBuffer of `size` bytes and its host address; MemoryError when Metal gives none."""
  buf = msg(dev, "newBufferWithLength:options:", size, MTLResourceStorageModeShared, argtypes=(ctypes.c_ulong, ctypes.c_ulong))
  if not buf: raise MemoryError(f"newBufferWithLength:{size} returned nil")
  return buf, msg(buf, "contents")

def new_queue(dev: int) -> int: return msg(dev, "newCommandQueue")
def new_event(dev: int) -> int: return msg(dev, "newSharedEvent")

# *** command buffers and encoders (their objects are autoreleased: used inside an AutoreleasePool, command buffers retained) ***

def command_buffer(queue: int) -> int: return retain(msg(queue, "commandBuffer"))
def compute_encoder(cb: int) -> int: return retain(msg(cb, "computeCommandEncoder"))
def blit_encoder(cb: int) -> int: return retain(msg(cb, "blitCommandEncoder"))
def end_encoding(enc: int) -> None:
  msg(enc, "endEncoding", restype=None)
  release(enc)
def set_pipeline(enc: int, pso: int) -> None: msg(enc, "setComputePipelineState:", pso, restype=None)
def set_buffer(enc: int, buf: int, offset: int, index: int) -> None:
  msg(enc, "setBuffer:offset:atIndex:", buf, offset, index, restype=None, argtypes=(ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong))
def dispatch(enc: int, grid: tuple[int, ...], tg: tuple[int, ...]) -> None:
  msg(enc, "dispatchThreadgroups:threadsPerThreadgroup:", MTLSize(*grid), MTLSize(*tg), restype=None, argtypes=(MTLSize, MTLSize))
def memory_barrier(enc: int) -> None: msg(enc, "memoryBarrierWithScope:", MTLBarrierScopeBuffers, restype=None, argtypes=(ctypes.c_ulong,))
def blit_copy(enc: int, src: int, src_off: int, dst: int, dst_off: int, size: int) -> None:
  msg(enc, "copyFromBuffer:sourceOffset:toBuffer:destinationOffset:size:", src, src_off, dst, dst_off, size, restype=None,
      argtypes=(ctypes.c_void_p, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong))
def encode_signal(cb: int, ev: int, value: int) -> None:
  msg(cb, "encodeSignalEvent:value:", ev, value, restype=None, argtypes=(ctypes.c_void_p, ctypes.c_uint64))
def encode_wait(cb: int, ev: int, value: int) -> None:
  msg(cb, "encodeWaitForEvent:value:", ev, value, restype=None, argtypes=(ctypes.c_void_p, ctypes.c_uint64))
def commit(cb: int) -> None: msg(cb, "commit", restype=None)

# *** indirect command buffers (icb.py): compute commands that own their pipeline and buffers, run by one execute call ***

def new_icb(dev: int, count: int, max_bind_count: int) -> int:
  """An ICB of `count` concurrent-dispatch commands, each setting its own pipeline and up to `max_bind_count` buffers."""
  desc = msg(msg(_cls("MTLIndirectCommandBufferDescriptor"), "alloc"), "init")
  msg(desc, "setCommandTypes:", MTLIndirectCommandTypeConcurrentDispatch, restype=None, argtypes=(ctypes.c_ulong,))
  msg(desc, "setInheritBuffers:", False, restype=None, argtypes=(ctypes.c_bool,))
  msg(desc, "setInheritPipelineState:", False, restype=None, argtypes=(ctypes.c_bool,))
  msg(desc, "setMaxKernelBufferBindCount:", max_bind_count, restype=None, argtypes=(ctypes.c_ulong,))
  icb = msg(dev, "newIndirectCommandBufferWithDescriptor:maxCommandCount:options:", desc, count, MTLResourceStorageModeShared,
            argtypes=(ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong))
  release(desc)
  if not icb: raise MemoryError(f"newIndirectCommandBufferWithDescriptor: returned nil ({count} commands, {max_bind_count} buffers)")
  return icb

def encode_icb_command(icb: int, index: int, pso: int, bindings: list[tuple[int, int, int]], grid: tuple[int, ...], tg: tuple[int, ...],
                       barrier: bool) -> None:
  """Command `index` of the ICB, from scratch: pipeline, each (MTLBuffer, offset, index) binding, the dispatch, the barrier flag."""
  cmd = msg(icb, "indirectComputeCommandAtIndex:", index, argtypes=(ctypes.c_ulong,))
  msg(cmd, "reset", restype=None)
  msg(cmd, "setComputePipelineState:", pso, restype=None)
  for buf, offset, i in bindings:
    msg(cmd, "setKernelBuffer:offset:atIndex:", buf, offset, i, restype=None, argtypes=(ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong))
  msg(cmd, "concurrentDispatchThreadgroups:threadsPerThreadgroup:", MTLSize(*grid), MTLSize(*tg), restype=None, argtypes=(MTLSize, MTLSize))
  msg(cmd, "setBarrier" if barrier else "clearBarrier", restype=None)

def use_resources(enc: int, bufs: list[int]) -> None:
  """Makes the buffers an ICB references resident for the encoder's pass (the ICB's own bindings don't)."""
  arr = (ctypes.c_void_p * len(bufs))(*bufs)
  msg(enc, "useResources:count:usage:", arr, len(bufs), MTLResourceUsageRead | MTLResourceUsageWrite, restype=None,
      argtypes=(ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong))

def execute_icb(enc: int, icb: int, start: int, count: int) -> None:
  msg(enc, "executeCommandsInBuffer:withRange:", icb, NSRange(start, count), restype=None, argtypes=(ctypes.c_void_p, NSRange))

def wait_completed(cb: int) -> str | None:
  """Waits for the command buffer; None when it completed, else Metal's error text."""
  msg(cb, "waitUntilCompleted", restype=None)
  if msg(cb, "status", restype=ctypes.c_long) == MTLCommandBufferStatusCompleted: return None
  return error_text(ctypes.c_void_p(msg(cb, "error")))
