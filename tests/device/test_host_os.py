"""core.device.host_os.Syscalls, the real kernel side of the GPU plugins' OS seams: each call does what the kernel does and a
failure is an OSError with the kernel's errno."""
from __future__ import annotations
import ctypes, errno, mmap, os, pathlib
import pytest
from core.device.host_os import Syscalls, loadable_library

PROT_RW = mmap.PROT_READ | mmap.PROT_WRITE

def test_a_file_mapped_shared_is_read_and_written_through_the_mapping(tmp_path: pathlib.Path) -> None:
  sc, path = Syscalls(), tmp_path / "f"
  path.write_bytes(b"\x00" * mmap.PAGESIZE)
  assert sc.exists(str(path)) and not sc.exists(str(tmp_path / "missing")) and sc.simulated is False
  fd = sc.open(str(path), os.O_RDWR | os.O_CLOEXEC)
  try:
    addr = sc.mmap(0, mmap.PAGESIZE, PROT_RW, mmap.MAP_SHARED, fd, 0)
    ctypes.memmove(addr + 8, b"written", 7)
    sc.munmap(addr, mmap.PAGESIZE)
  finally: sc.close(fd)
  assert path.read_bytes()[8:15] == b"written"

def test_failures_raise_oserror_with_the_errno(tmp_path: pathlib.Path) -> None:
  sc = Syscalls()
  with pytest.raises(FileNotFoundError): sc.open(str(tmp_path / "missing"), os.O_RDONLY)
  with pytest.raises(OSError) as e: sc.mmap(0, mmap.PAGESIZE, PROT_RW, mmap.MAP_SHARED, -1, 0)   # no file, not anonymous
  assert e.value.errno == errno.EBADF
  with pytest.raises(OSError) as e: sc.munmap(1, mmap.PAGESIZE)   # not page aligned
  assert e.value.errno == errno.EINVAL
  fd = sc.open(str(tmp_path), os.O_RDONLY)
  try:
    with pytest.raises(OSError) as e: sc.ioctl(fd, 0x1234, ctypes.c_uint64(0))   # type: ignore[arg-type]  # no such request on a folder
    assert e.value.errno == errno.ENOTTY
  finally: sc.close(fd)

def test_a_library_by_its_soname_else_by_ldconfigs_name() -> None:
  import ctypes.util
  assert loadable_library("libc.so.6", "no-such-library") == "libc.so.6"
  assert loadable_library("libno-such-library.so.1", "c") == ctypes.util.find_library("c")
  assert loadable_library("libno-such-library.so.1", "no-such-library") is None
