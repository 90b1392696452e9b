"""Model files as read-only byte buffers (a path is memory-mapped, not read), and host arrays made into tensors."""
from __future__ import annotations
import io, mmap, os
from typing import Any
from core.ir.dtype import DType, dtypes, to_np
from core.tensor.tensor import Tensor

Source = str | os.PathLike | bytes | bytearray | memoryview | Tensor

def open_source(src: Source, what: str) -> tuple[Any, str]:
  """(a buffer numpy can view, a label for error messages) for a path, a bytes-like object or a uint8 Tensor."""
  if isinstance(src, Tensor):
    if src.dtype != dtypes.uint8 or len(src.shape) != 1:
      raise TypeError(f"{what}: a Tensor source must hold the file's bytes (1-d uint8), got {src.dtype} {src.shape}")
    return memoryview(src.numpy()), f"<uint8 Tensor of {src.shape[0]} bytes>"
  if isinstance(src, (bytes, bytearray, memoryview)): return memoryview(src), f"<{len(src)} bytes>"
  fn = os.fspath(src)
  with open(fn, "rb") as f:
    if os.fstat(f.fileno()).st_size == 0: raise ValueError(f"{fn}: the file is empty, not a {what} file")
    # the mapping outlives the file handle; numpy views of it keep it open until the last one is gone
    return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ), str(fn)

class BufferFile(io.RawIOBase):
  """A read-only, seekable file over a buffer, for readers that want a file (zipfile, pickle) without copying the buffer."""
  def __init__(self, buf: Any):
    super().__init__()
    self.view, self.pos = memoryview(buf).cast("B"), 0
  def readable(self) -> bool: return True
  def seekable(self) -> bool: return True
  def tell(self) -> int: return self.pos
  def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
    self.pos = max(0, offset + (0, self.pos, len(self.view))[whence])
    return self.pos
  def readinto(self, b: Any) -> int:
    n = max(0, min(len(b), len(self.view) - self.pos))
    memoryview(b).cast("B")[:n] = self.view[self.pos:self.pos + n]
    self.pos += n
    return n

# dtypes numpy has no type for travel as unsigned ints of the same width and are bitcast on the device
_CARRIER = {dtypes.bfloat16: dtypes.uint16, dtypes.fp8e4m3: dtypes.uint8, dtypes.fp8e5m2: dtypes.uint8}

def host_tensor(arr: Any, dtype: DType, device: str | None) -> Tensor:
  """A tensor of `dtype` from a native-endian numpy array holding its values (or, for bf16/fp8, their bits)."""
  carrier = _CARRIER.get(dtype, dtype)
  t = Tensor(arr.view(to_np(carrier)) if arr.dtype != to_np(carrier) else arr, device=device, requires_grad=False)
  return t.bitcast(dtype) if carrier is not dtype else t
