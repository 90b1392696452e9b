"""What a GPU driver's client asks of the host OS: the system calls (open, close, ioctl, mmap, munmap) through libc, the real
side of a plugin's OS seam whose other side is its simulated driver; and the driver's user-space library by name."""
from __future__ import annotations
import ctypes, ctypes.util, os

class Syscalls:
  """open(2), close(2), ioctl(2), mmap(2) and munmap(2) on the running kernel, and whether a path exists. Failures raise OSError
  with the kernel's errno."""
  simulated = False

  def __init__(self) -> None:
    self.libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    self.libc.mmap.restype = ctypes.c_void_p
    self.libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    self.libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]

  def _err(self) -> OSError:
    e = ctypes.get_errno()
    return OSError(e, os.strerror(e))

  def open(self, path: str, flags: int) -> int: return os.open(path, flags)
  def close(self, fd: int) -> None: os.close(fd)
  def ioctl(self, fd: int, request: int, arg: ctypes.Structure) -> None:
    if self.libc.ioctl(fd, ctypes.c_ulong(request), ctypes.byref(arg)) < 0: raise self._err()
  def mmap(self, addr: int, length: int, prot: int, flags: int, fd: int, offset: int) -> int:
    ret = self.libc.mmap(ctypes.c_void_p(addr or None), length, prot, flags, fd, offset)
    if ret in (None, ctypes.c_void_p(-1).value): raise self._err()
    return int(ret)
  def munmap(self, addr: int, length: int) -> None:
    if self.libc.munmap(ctypes.c_void_p(addr), length) < 0: raise self._err()
  def exists(self, path: str) -> bool: return os.path.exists(path)

def loadable_library(soname: str, name: str) -> str | None:
  """`soname` when the dynamic loader loads it, else the file ldconfig lists as lib`name` when that loads, else None. ldconfig
  runs only when `soname` fails to load (ctypes.util.find_library takes tens of ms)."""
  try:
    ctypes.CDLL(soname)
    return soname
  except OSError: pass
  if (path := ctypes.util.find_library(name)) is None: return None
  try:
    ctypes.CDLL(path)
    return path
  except OSError: return None
