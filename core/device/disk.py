"""The DISK device: a file as device memory (`Tensor.empty(n, device="disk:/path")`, `t.to("disk:/path")`). It stores and
copies bytes, nothing else: reads and writes go straight between the file and the other side's memory (pread/pwrite), so
loading a file into a tensor holds its bytes once, in the destination, never in a staging copy of the whole file."""
from __future__ import annotations
import os
from typing import Any
from core.device.allocator import Allocator, BufferSpec
from core.device.compiled import Compiled
from core.device.target import Target

def disk_path(device: str) -> str:
  """The file of a canonical DISK device name ("DISK:/abs/path" -> "/abs/path")."""
  return device.split(":", 1)[1]

class DiskFile:
  """One open file; closed when the last mapping of it is gone. Opened read-write when allowed, else read-only (a model file
  the user may not write still loads)."""
  def __init__(self, path: str, size: int):
    self.path = path
    try: self.fd, self.writable = os.open(path, os.O_RDWR | os.O_CREAT, 0o666), True
    except PermissionError: self.fd, self.writable = os.open(path, os.O_RDONLY), False
    if os.fstat(self.fd).st_size < size:
      if not self.writable:
        os.close(self.fd)
        raise PermissionError(f"DISK:{path}: the file is smaller than the {size} bytes asked for and can't be written to grow it")
      os.ftruncate(self.fd, size)   # a sparse tail of zeros, as a new buffer of Tensor.empty
  def __del__(self) -> None:
    try: os.close(self.fd)
    except (OSError, AttributeError): pass

class DiskSpan:
  """`size` bytes of a file from `offset`: the DISK allocator's handle (a view is a span of its base's file)."""
  def __init__(self, file: DiskFile, offset: int, size: int): self.file, self.offset, self.size = file, offset, size

def _readinto(fd: int, dest: memoryview, offset: int) -> None:
  done = 0
  while done < dest.nbytes:
    if hasattr(os, "preadv"): n = os.preadv(fd, [dest[done:]], offset + done)
    else:   # no preadv (older macOS): read, then copy
      chunk = os.pread(fd, min(dest.nbytes - done, 1 << 26), offset + done)
      dest[done:done + len(chunk)] = chunk
      n = len(chunk)
    if n == 0: raise EOFError(f"file ended {dest.nbytes - done} bytes early (offset {offset + done})")
    done += n

class DiskAllocator(Allocator[DiskSpan]):
  """Memory is a span of the device's file; allocating makes the file at least that long."""
  def __init__(self, device: str):
    super().__init__(device)
    self.path = disk_path(device)
  def _alloc(self, size: int, options: BufferSpec) -> DiskSpan: return DiskSpan(DiskFile(self.path, size), 0, size)
  def _offset(self, opaque: DiskSpan, size: int, offset: int) -> DiskSpan: return DiskSpan(opaque.file, opaque.offset + offset, size)
  def _copyin(self, dest: DiskSpan, src: memoryview) -> None:
    if not dest.file.writable: raise PermissionError(f"{self.device}: the file is read-only")
    done = 0
    while done < src.nbytes: done += os.pwrite(dest.file.fd, src[done:], dest.offset + done)
  def _copyout(self, dest: memoryview, src: DiskSpan) -> None: _readinto(src.file.fd, dest, src.offset)

class NoKernels:
  """The renderer of a device that runs no kernels: any attempt to compile for it says what to do instead."""
  def __init__(self, device: str): self.device = device
  def __getattr__(self, name: str) -> Any:
    raise RuntimeError(f"{self.device} stores bytes and can't run kernels: move the tensor to a compute device first "
                       f"(t.to('CPU')); on DISK only whole contiguous slices (t[a:b], reshapes) are views")

def make_disk_device(name: str, target: Target | None = None) -> Compiled:
  if ":" not in name: raise ValueError("the DISK device needs a file: device='disk:/path/to/file'")
  return Compiled(name, DiskAllocator(name), NoKernels(name), None, None, target)
