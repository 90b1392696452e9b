"""Host memory for CPU buffers: 64-byte aligned ctypes arrays; from 128 KiB on their own mapping, big ones 2 MiB-aligned and
backed by huge pages."""
from __future__ import annotations
import ctypes, mmap, os
from typing import Any

ALIGN = 64                # a cache line, and enough for any AVX-512 vector load (or streaming store)
HUGE_PAGE = 2 << 20       # x86-64 and aarch64 (4 KiB granule) transparent huge page size
# from here on a buffer gets its own mapping: a 16M-float kernel over 4 KiB pages spends a fifth of its time on TLB misses
# (sum of 16M: 2365 -> 1851 us with huge pages); smaller buffers would waste most of a huge page. CPU_HUGEPAGES=0 turns it off.
HUGE_MIN = HUGE_PAGE if os.getenv("CPU_HUGEPAGES", "1") != "0" else 1 << 62
# from here on a buffer is a mapping of its own (glibc's malloc maps such sizes too): the kernel's zero pages, backed where first
# touched. A ctypes array is memset whole: the HCQ queues' two 1 MiB rings, of which a first result writes a few packets, took
# ~0.2-0.5 ms of page faults at every start.
MAP_MIN = 128 << 10

def _round_up(n: int, m: int) -> int: return (n + m - 1) // m * m

def alloc_host(size: int) -> Any:
  """A zeroed `c_uint8 * size` array at a 64-byte aligned address (2 MiB aligned and madvised for huge pages from HUGE_MIN on).
  The array owns its memory: when the last reference (views included) goes, the memory goes (a mapping is unmapped whole)."""
  if size < MAP_MIN:
    raw = (ctypes.c_uint8 * (size + ALIGN - 1))()
    # from_buffer keeps `raw` referenced by the returned array, so the aligned window owns its memory
    return (ctypes.c_uint8 * size).from_buffer(raw, -ctypes.addressof(raw) % ALIGN)
  # the window holds an export of the mapping: it lives exactly as long as the window (and the views made from it)
  if size < HUGE_MIN: return (ctypes.c_uint8 * size).from_buffer(_map(size))   # page aligned
  span = _round_up(size, HUGE_PAGE)
  # one huge page of slack: mmap only promises 4 KiB alignment. The slack is address space, never touched, so never backed.
  m = _map(span + HUGE_PAGE)
  probe = ctypes.c_uint8.from_buffer(m)
  off = -ctypes.addressof(probe) % HUGE_PAGE
  del probe   # the probe's export of the mapping must go, else the mapping could never be closed
  # huge pages for the whole 2 MiB pieces only: a partly used one at the end would cost up to 2 MiB of memory for nothing
  try: m.madvise(mmap.MADV_HUGEPAGE, off, size // HUGE_PAGE * HUGE_PAGE)
  except (OSError, AttributeError, ValueError): pass   # THP off (EINVAL) or no madvise: still correct, only slower
  return (ctypes.c_uint8 * size).from_buffer(m, off)

def _map(size: int) -> mmap.mmap:
  # private, not shared: transparent huge pages back private anonymous memory (shared memory has its own, usually off, setting)
  try: return mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
  except OSError as e: raise MemoryError(f"mmap of {size} bytes failed: {e}") from e
