"""Sharing tensor memory with other libraries without copies: numpy (`__array__`, `numpy()`), DLPack (`__dlpack__`,
`Tensor.from_dlpack`) and foreign pointers (`Tensor.from_blob`). Zero-copy works where the device's memory is host memory
this process can address (the CPU device); elsewhere the data is copied (numpy) or the call says why it can't share."""
from __future__ import annotations
import weakref
from typing import TYPE_CHECKING, Any
from core.ir.dtype import DType, DTypeLike, dtypes, to_dtype, to_np, from_np
from core.helpers import prod
from core.ir.ops import Ops
from core.engine.state import facts
from core.engine.lock import engine_lock
from core.device.registry import Device

if TYPE_CHECKING:
  import numpy as np
  from core.device.buffer import Buffer
  from core.tensor.tensor import Tensor

class _Pinned:
  """What a zero-copy numpy array views: a realized Buffer's host memory through __array_interface__. The array keeps this
  object, and so the Buffer, alive: the memory can't go back to the allocator (and to another tensor) while it is viewed."""
  def __init__(self, buf: Buffer, addr: int, shape: tuple[int, ...], dtype: DType, readonly: bool):
    self.buf = buf
    self.__array_interface__ = {"shape": shape, "typestr": to_np(dtype).str, "data": (addr, readonly), "version": 3}

def host_array(t: Tensor, readonly: bool = True) -> np.ndarray | None:
  """A numpy array over t's realized memory, or None when its device's memory is not host memory this process can see (or
  the dtype has no numpy equivalent)."""
  from core.engine.realize import realized_buffer
  if t.dtype.fmt is None: return None
  buf, n = realized_buffer(t.uop)
  return _view_of(buf, n, _sym_shape(t), t.dtype, readonly)   # symbolic dims read with their variables' current values

def _view_of(buf: Buffer, n: int, shape: tuple[int, ...], dtype: DType, readonly: bool) -> np.ndarray | None:
  import numpy as np
  if n == 0 or buf.rewritten or (mv := buf.host_view()) is None: return None
  if mv.readonly and not readonly: return None
  addr = np.frombuffer(mv, dtype=np.uint8).ctypes.data   # the view's start (a view Buffer's offset included)
  return np.asarray(_Pinned(buf, addr, shape, dtype, readonly))

def _rewritten_copy(t: Tensor) -> np.ndarray | None:
  """to_numpy's shortcut for a Jit's output (a buffer its replays rewrite, or a static reshape of one), read once per call:
  its copy without the realize and view checks. None for anything else."""
  u = t.uop
  b = u.src[0] if u.op is Ops.RESHAPE and len(u.src) == 1 else u
  if b.op is not Ops.BUFFER or (f := facts.get_id(id(b))) is None or (buf := f.buffer) is None or not buf.rewritten: return None
  # what is checked below holds for as long as the Buffer lives (its size and dtype never change) when it is read through a node
  # of the same shape and dtype: done once per buffer (a replay returns the same node every call), not per read. The plan lives
  # in the Buffer's own __dict__: as long as the buffer, holding nothing of it (the memory is read through its current handle)
  d = buf.__dict__
  if (p := d.get(_PLAN)) is None or p[0] is not u.dtype or p[1] != u.arg:
    if (p := _read_plan(u, b, buf)) is None: return None
    d[_PLAN] = p
    _planned.add(buf)
  if (handle := d.get("_buf")) is None: return None   # not allocated (now): the general path says so
  _, _, shape, npdt, zeros, copyout = p
  out: Any = zeros(shape, npdt)   # zeroed, as to_numpy's copy
  with engine_lock: copyout(memoryview(out).cast("B"), handle)
  return out

_PLAN = "_numpy_read"   # a rewritten Buffer's read plan (_read_plan), in its __dict__

# the Buffers that hold a read plan: a plan keeps its device's allocator's copyout, and after a device change (Device.reset(): a
# device name means a new device object with its own allocator) each is dropped, to be made again with the buffer's allocator then
_planned: weakref.WeakSet[Buffer] = weakref.WeakSet()
def _drop_plans() -> None:
  for buf in list(_planned): buf.__dict__.pop(_PLAN, None)
  _planned.clear()
Device.on_change(_drop_plans)

def _read_plan(u: Any, b: Any, buf: Buffer) -> tuple | None:
  """(dtype, node arg, shape, numpy dtype, np.zeros, the allocator's copyout) for reading `buf` through `u` (`b` or a static
  reshape of it) by _rewritten_copy; None where its shortcut does not apply."""
  import numpy as np
  if not buf.nbytes or u.dtype.scalar().fmt is None: return None
  shape: Any = u.shape
  if shape is None or not all(type(d) is int for d in shape) or prod(shape) != b.arg: return None
  # the allocator Buffer.copyout copies with (its size check holds for this shape, its allocation check is made per read)
  return (u.dtype, u.arg, shape, to_np(u.dtype), np.zeros, buf.allocator._copyout)

def to_numpy(t: Tensor) -> np.ndarray:
  """Tensor.numpy() of a dtype numpy has: a read-only view of t's memory where that is host memory nothing rewrites (the CPU
  device), else a fresh writable copy the caller owns (a Jit's outputs, which its next replay rewrites, come back this way).
  t itself stays lazy: reading must not cut the autograd graph. One realize serves both ways (an assign in the graph runs once)."""
  if (fast := _rewritten_copy(t)) is not None: return fast
  import numpy as np
  from core.engine.realize import engine_lock, realized_buffer
  shape = t.shape
  if not all(type(d) is int for d in shape): shape = _sym_shape(t)   # read with its variables' current values
  npdt = to_np(t.dtype)
  if prod(shape) == 0: return np.zeros(shape, dtype=npdt)
  buf, n = realized_buffer(t.uop)
  if (a := _view_of(buf, n, shape, t.dtype, True)) is not None: return a
  # the copy lands in the array itself; a buffer sized for larger values of a symbolic shape is copied whole and cut. Zeroed,
  # not np.empty: a compile-only (NULL) device copies nothing out, and its reads must not be whatever the heap held
  whole = n * buf.dtype.itemsize == buf.nbytes
  out: Any = np.zeros(shape, dtype=npdt) if whole else np.zeros(buf.nbytes, dtype=np.uint8)
  with engine_lock:   # the buffer may be a Jit's, which another thread's replay writes
    buf.copyout(memoryview(out).cast("B"))
  return out if whole else out[:n * buf.dtype.itemsize].view(npdt).reshape(shape)

def _sym_shape(t: Tensor) -> tuple[int, ...]:
  from core.ir.ops import sym_val
  return tuple(sym_val(d) for d in t.shape)

class InteropMixin:
  """numpy, DLPack and raw-pointer interop of Tensor."""

  def __array__(self: Any, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
    """`np.asarray(t)`: the tensor's values (a read-only view of its memory when the device's memory is host memory)."""
    import numpy as np
    a = self.numpy() if copy is not True else self.numpy().copy()
    if dtype is not None and np.dtype(dtype) != a.dtype:
      if copy is False: raise ValueError(f"np.asarray(copy=False) of a {self.dtype} tensor as {np.dtype(dtype)} needs a copy")
      a = a.astype(dtype)
    return a

  def __dlpack__(self: Any, *, stream: Any = None, max_version: tuple[int, int] | None = None, dl_device: Any = None,
                 copy: bool | None = None) -> Any:
    """A DLPack capsule over the tensor's memory (host devices): the consumer (torch.from_dlpack, np.from_dlpack) shares it."""
    a = host_array(self, readonly=False)
    if a is None:
      if copy is False: raise BufferError(f"{self.device} memory is not host memory this process can share without a copy")
      import numpy as np
      a = np.ascontiguousarray(self.numpy())   # a copy, which the consumer then owns
    kwargs = {k: v for k, v in (("stream", stream), ("max_version", max_version), ("dl_device", dl_device), ("copy", copy)) if v is not None}
    return a.__dlpack__(**kwargs)  # type: ignore[arg-type]

  def __dlpack_device__(self: Any) -> tuple[int, int]:
    """(kDLCPU, 0): what DLPack consumers get is host memory (shared on host devices, a host copy from the others)."""
    return (1, 0)

  @classmethod
  def from_blob(cls, ptr: int, shape: tuple[int, ...], dtype: DTypeLike | None = None, device: str | None = None) -> Tensor:
    """A tensor over `prod(shape)` elements of `dtype` (default float32) at host address `ptr`, without a copy. The memory
    stays the caller's: it must outlive the tensor. The device must be one whose memory is host memory (CPU)."""
    from core.device.allocator import BufferSpec
    from core.device.buffer import Buffer
    from core.device.registry import Device
    from core.engine.realize import adopt_buffer
    from core.tensor.tensor import Tensor, canonical_device
    if not isinstance(ptr, int) or ptr <= 0: raise ValueError(f"from_blob: ptr must be a positive int address, got {ptr!r}")
    shape = tuple(shape)
    if not all(isinstance(s, int) and s >= 0 for s in shape): raise ValueError(f"from_blob: shape must be non-negative ints, got {shape}")
    dt = to_dtype(dtype) if dtype is not None else dtypes.float32
    dev = canonical_device(device)
    if not Device[dev].allocator.supports_external_ptr:
      raise ValueError(f"from_blob: {dev} can't wrap host memory (its allocator does not take external pointers); use a CPU device, "
                       f"or Tensor(np.ctypeslib.as_array(...)) to copy")
    buf = Buffer(dev, prod(shape), dt, BufferSpec(external_ptr=ptr)).allocate()
    return Tensor(adopt_buffer(buf, shape))

  @classmethod
  def from_dlpack(cls, x: Any, device: str | None = None) -> Tensor:
    """A tensor over a DLPack producer's memory (a numpy array, a torch CPU tensor, ...): shared without a copy when it is
    C-contiguous host memory and the device can wrap it (CPU), else copied to `device`."""
    import numpy as np
    from core.device.registry import Device
    from core.tensor.tensor import Tensor, canonical_device
    a = np.from_dlpack(x)
    dev = canonical_device(device)
    if not a.flags.c_contiguous or a.size == 0 or not Device[dev].allocator.supports_external_ptr:
      return Tensor(np.ascontiguousarray(a), device=dev)
    t = Tensor.from_blob(a.ctypes.data, a.shape, from_np(a.dtype), dev)
    from core.engine.realize import realized_buffer
    realized_buffer(t.uop)[0].keepalive = a   # the producer's memory lives as long as the buffer viewing it
    return t
