"""Host memory: small buffers 64-byte aligned, from MAP_MIN on a mapping of their own backed where touched, big ones 2 MiB-aligned
and madvised for huge pages, unmapped on free."""
from __future__ import annotations
import ctypes, gc, mmap
import numpy as np
from core.device.allocator import BufferSpec
from plugin_cpu.hostmem import HUGE_MIN, HUGE_PAGE, MAP_MIN, alloc_host
from plugin_cpu.runtime import CPUAllocator

def _mapping(addr: int) -> dict[str, str] | None:
  """The /proc/self/smaps entry holding `addr` (its header as "range" plus its fields), or None when unmapped."""
  with open("/proc/self/smaps") as f: lines = f.read().splitlines()
  for i, ln in enumerate(lines):
    head = ln.split()
    if not head or "-" not in head[0] or head[0].endswith(":"): continue
    try: lo, hi = (int(v, 16) for v in head[0].split("-"))
    except ValueError: continue
    if lo <= addr < hi:
      out = {"range": head[0]}
      for f in lines[i + 1:]:
        key = f.split(maxsplit=1)[0] if f.strip() else ""
        if not key.endswith(":"): break   # the next mapping's header
        out[key[:-1]] = f[len(key):].strip()
      return out
  return None

def _thp_mode() -> str:
  try:
    with open("/sys/kernel/mm/transparent_hugepage/enabled") as f: return f.read().split("[")[1].split("]")[0]
  except (OSError, IndexError): return "never"

def test_small_buffers_are_64_byte_aligned_and_zeroed():
  for size in (1, 63, 64, 4097, HUGE_MIN - 1):
    a = alloc_host(size)
    assert ctypes.addressof(a) % 64 == 0 and ctypes.sizeof(a) == size
    assert not any(bytes(a)[:4096])

def _resident_bytes() -> int:
  with open("/proc/self/statm") as f: return int(f.read().split()[1]) * mmap.PAGESIZE

def test_mid_buffers_are_backed_only_where_touched_and_unmapped_on_free():
  sizes = [MAP_MIN, MAP_MIN + 12345, *([(MAP_MIN + HUGE_MIN) // 2] * 8)]   # HCQ rings are 1 MiB
  before = _resident_bytes()
  bufs = [alloc_host(n) for n in sizes]
  # a ctypes array's memory is written whole when made (~10 MiB resident here): a mapping's pages only when touched
  assert _resident_bytes() - before < sum(sizes) // 4
  for a, n in zip(bufs, sizes):
    assert ctypes.addressof(a) % 64 == 0 and ctypes.sizeof(a) == n
    assert not np.frombuffer(a, np.uint8).any()
  addr = ctypes.addressof(bufs[-1])
  np.frombuffer(bufs[-1], np.uint8)[::4096] = 1
  assert np.frombuffer(bufs[-1], np.uint8).sum() == len(range(0, sizes[-1], 4096))
  del a, bufs
  gc.collect()
  assert _mapping(addr) is None

def test_big_buffer_is_2mib_aligned_madvised_and_unmapped_on_free():
  size = 3 * HUGE_PAGE + 12345
  a = alloc_host(size)
  addr = ctypes.addressof(a)
  assert addr % HUGE_PAGE == 0 and ctypes.sizeof(a) == size
  x = np.frombuffer(a, np.uint8)
  assert not x.any()
  x[:] = 7
  m = _mapping(addr)
  assert m is not None
  if _thp_mode() != "never": assert "hg" in m.get("VmFlags", "").split()   # MADV_HUGEPAGE took
  assert int(m["range"].split("-")[1], 16) - addr == 3 * HUGE_PAGE           # huge pages for the whole 2 MiB pieces
  assert "hg" not in _mapping(addr + size - 1).get("VmFlags", "").split()    # not for the partly used tail
  del x, a
  gc.collect()
  assert _mapping(addr) is None                                              # the exact mapping is gone: nothing leaks

def test_views_keep_a_big_buffer_alive():
  al = CPUAllocator("CPU")
  b = al.alloc(HUGE_MIN * 2, BufferSpec(nolru=True))
  addr = ctypes.addressof(b)
  al._copyin(b, memoryview(np.arange(HUGE_MIN // 2, dtype=np.float32)).cast("B"))
  v = al._offset(b, 64, 4096)
  del b
  gc.collect()
  assert _mapping(addr) is not None
  assert np.array_equal(np.frombuffer(al._as_buffer(v), np.float32), np.arange(1024, 1040, dtype=np.float32))
  del v
  gc.collect()
  assert _mapping(addr) is None

def test_allocator_copies_and_reuses_big_buffers():
  al = CPUAllocator("CPU")
  n = HUGE_MIN  # floats: 8 MiB
  data = np.random.default_rng(0).standard_normal(n, dtype=np.float32)
  b = al.alloc(data.nbytes)
  assert ctypes.addressof(b) % HUGE_PAGE == 0
  al._copyin(b, memoryview(data).cast("B"))
  al._copyin(b, memoryview(data.tobytes()))                 # a read-only source
  out = np.empty_like(data)
  al._copyout(memoryview(out).cast("B"), b)
  np.testing.assert_array_equal(out, data)
  addr = ctypes.addressof(b)
  al.free(b, data.nbytes)
  del b
  b2 = al.alloc(data.nbytes)                                 # the LRU cache hands the same block back, contents as left
  assert ctypes.addressof(b2) == addr
  al._copyout(memoryview(out).cast("B"), b2)
  np.testing.assert_array_equal(out, data)
  al.free(b2, data.nbytes)
  del b2
  al.free_cache()
  gc.collect()
  assert _mapping(addr) is None
