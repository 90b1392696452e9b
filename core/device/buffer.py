"""Buffer: a typed span of device memory, allocated lazily, freed when unreachable; views share their base's memory."""
from __future__ import annotations
import functools
from typing import Any
from core.ir.dtype import DType, to_np
from core.device.allocator import BufferSpec
from core.device.counters import GlobalCounters

class Buffer:
  """`size` elements of `dtype` on `device`. A view (base given) covers base bytes [offset, offset+nbytes) and keeps its base alive."""
  _buf: Any  # the allocator's handle; absent until allocate() (is_allocated tests for it)
  keepalive: Any = None  # an object owning memory this buffer wraps (Tensor.from_dlpack's source), alive as long as the buffer
  rewritten: bool = False  # core writes it again later for other values (a Jit's captured buffers): numpy() copies it
  def __init__(self, device: str, size: int, dtype: DType, options: BufferSpec | None = None, base: Buffer | None = None, offset: int = 0):
    if size < 0: raise ValueError(f"Buffer on {device}: size must be >= 0, got {size}")
    self.device, self.size, self.dtype, self.options, self.offset = device, size, dtype, options, offset
    self._base = None if base is None else base.base
    if base is not None:
      if base.device != device: raise ValueError(f"a view of a {base.device} buffer can't live on {device}")
      if offset < 0 or offset + self.nbytes > self.base.nbytes:
        raise ValueError(f"view of {self.nbytes} bytes at offset {offset} does not fit in its base of {self.base.nbytes} bytes")

  @property
  def base(self) -> Buffer: return self if self._base is None else self._base
  @property
  def nbytes(self) -> int: return self.size * self.dtype.itemsize
  @property
  def allocator(self) -> Any: return _devices()[self.device].allocator

  def is_allocated(self) -> bool: return hasattr(self, "_buf")

  def allocate(self, opaque: Any = None) -> Buffer:
    """Gets memory (or adopts `opaque`); a view allocates its base first and points into it."""
    if self.is_allocated(): raise RuntimeError(f"{self} is already allocated")
    if self._base is not None:
      if not self._base.is_allocated(): self._base.allocate()
      self._buf = self.allocator._offset(self._base._buf, self.nbytes, self.offset)
      return self
    if opaque is not None: self._buf, self._owned = opaque, False
    else:
      # zero-size buffers own no memory but still count as allocated
      nbytes = self.size * self.dtype.itemsize
      if nbytes:
        # the allocator that gave the memory takes it back (also when the device was reopened meanwhile)
        self._allocator = alloc = _devices()[self.device].allocator
        self._buf, self._owned = alloc.alloc(nbytes, self.options), True
      else: self._buf, self._owned = None, False
      _mem_used[self.device] += nbytes
    return self

  def deallocate(self) -> None:
    # every freed tensor passes here: the attributes are read from __dict__ once
    d = self.__dict__
    if "_buf" not in d: return
    if d.get("_owned") and self._base is None:
      nbytes = self.size * self.dtype.itemsize
      (d.get("_allocator") or self.allocator).free(d["_buf"], nbytes, self.options)
      _mem_used[self.device] -= nbytes
    del d["_buf"]

  def __del__(self) -> None:
    try:
      if "_buf" in self.__dict__: self.deallocate()
    except Exception: pass   # interpreter shutdown may have torn down the device already

  def view(self, size: int, dtype: DType, offset: int) -> Buffer:
    """A Buffer of `size` elements of `dtype` starting `offset` bytes into this one."""
    return Buffer(self.device, size, dtype, base=self.base, offset=self.offset + offset)

  def host_view(self) -> memoryview | None:
    """A zero-copy host view of the memory, or None when the allocator gives none."""
    return self.allocator._as_buffer(self._need_buf("host_view"))

  def as_buffer(self) -> memoryview:
    """Zero-copy host view where the allocator supports it, else a copy."""
    if (mv := self.host_view()) is not None: return mv
    return self.copyout(memoryview(bytearray(self.nbytes)))

  def copyin(self, mv: memoryview | bytes | bytearray) -> Buffer:
    mv = memoryview(mv).cast("B")
    if mv.nbytes != self.nbytes: raise ValueError(f"copyin of {mv.nbytes} bytes into {self} of {self.nbytes} bytes")
    if not self.is_allocated(): self.allocate()
    if self.nbytes: self.allocator._copyin(self._buf, mv)
    return self

  def copyout(self, mv: memoryview) -> memoryview:
    mv = memoryview(mv).cast("B")
    if mv.nbytes != self.nbytes: raise ValueError(f"copyout of {self} ({self.nbytes} bytes) into {mv.nbytes} bytes")
    buf = self._need_buf("copyout")
    if self.nbytes: self.allocator._copyout(mv, buf)
    return mv

  def numpy(self) -> Any:
    """A numpy copy of the contents."""
    import numpy as np
    return np.frombuffer(self.copyout(memoryview(bytearray(self.nbytes))), dtype=to_np(self.dtype)).copy()

  def _need_buf(self, what: str) -> Any:
    if not self.is_allocated(): raise RuntimeError(f"{what} of {self}: it is not allocated (call allocate() or copyin() first)")
    return self._buf

  def __repr__(self) -> str:
    view = "" if self._base is None else f" view offset={self.offset}"
    return f"<Buffer {self.device} size={self.size} dtype={self.dtype}{view}{'' if self.is_allocated() else ' unallocated'}>"

_mem_used = GlobalCounters.mem_used

@functools.cache
def _devices() -> Any:
  """core.device.registry.Device, imported on first use (the registry imports plugins; a buffer is made after it anyway)."""
  from core.device.registry import Device
  return Device
