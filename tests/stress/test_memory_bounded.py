"""Bounded memory: every cache is an LRU with a bound (core.helpers.LRUCache), and eager ops leave no reference cycles, so a
long run of ops that each need a new kernel levels off instead of growing (it grew ~130 KB per op). The bounds are set small
here so the plateau comes within a test's time; DEBUG=2 lists every cache with its counters at exit."""
from __future__ import annotations
import os, subprocess, sys

PROGRAM = """
import gc
from core import Tensor
from core.helpers import LRUCache
def rss(): return int(open("/proc/self/statm").read().split()[1]) * 4096
(Tensor([1.0]) + 1).realize()
marks = []
for i in range(1500):
  (Tensor.ones(8 + i) * 2 + 1).sum().realize()   # a new shape: new kernels every op
  if i in (499, 1499): marks.append(rss())
print(marks[1] - marks[0], max(len(c) for c in LRUCache.all.values()), len(gc.garbage))
"""

def test_new_kernels_every_op_level_off(tmp_path):
  env = {**os.environ, **{f"CORE_CACHE_{n}": "100" for n in ("RUNNERS", "HCQ_PROGRAMS", "SCHEDULES", "INDEXED_KERNELS",
                                                              "SUBMISSIONS", "HOST_BUILDS", "HOST_LIBRARIES", "LIFTED_PROGRAMS", "BINARIES")}}
  env.pop("DEBUG", None)
  env["CORE_CACHE_DIR"] = str(tmp_path)
  # the first run fills the on-disk compile cache; the second measures: what is left is the framework's own retention. (Cold,
  # llvmlite keeps ~60 KB per compile; past CORE_LLVM_INPROC compiles run in the worker: tests/device/test_llvm_worker.py.)
  for _ in range(2): r = subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True, timeout=600)
  assert r.returncode == 0, r.stderr
  grew, biggest, garbage = map(int, r.stdout.split())
  assert biggest <= 100 and garbage == 0
  # 1000 more ops, each compiling new kernels, with every cache already full: the memory stays about where it was
  assert grew < 24 * 2**20, f"RSS grew {grew / 2**20:.1f} MiB over 1000 ops after the caches filled"

def test_debug2_lists_the_caches():
  r = subprocess.run([sys.executable, "-c", "from core import Tensor; (Tensor([1.0]) + 1).realize()"], env={**os.environ, "DEBUG": "2"},
                     capture_output=True, text=True, timeout=300)
  line = next(ln for ln in r.stdout.splitlines() if ln.startswith("*** caches: "))
  assert "schedules " in line and "runners " in line or "hcq_programs " in line
  assert "hits " in line and "evicted " in line

def test_byte_bound_drops_least_recent_entries_first():
  from core.helpers import LRUCache
  c = LRUCache("bytes (test)", 100, max_bytes=10, sizeof=len)
  c["a"], c["b"] = b"1234", b"5678"
  assert c.get("a") == b"1234"   # "a" is now the most recent
  c["c"] = b"90ab"               # 12 bytes > 10: the least recent ("b") goes
  assert list(c) == ["a", "c"] and c.nbytes == 8 and c.evictions == 1
  c["c"] = b"x"                  # replacing a value counts its new size only
  assert c.nbytes == 5
  c.pop("a")
  del c["c"]
  assert c.nbytes == 0 and len(c) == 0
  c["big"] = b"y" * 50           # one entry over the bound alone stays: its caller is about to use it
  assert list(c) == ["big"] and "MiB" in c.stats()

def test_compiled_kernels_are_bounded_by_their_bytes(tmp_path):
  # a byte bound of one small binary: every new kernel evicts the previous one, whatever the entry bound
  prog = """
from core import Tensor
from core.helpers import LRUCache
for i in range(6): (Tensor.ones(8 + i) * 3).realize()
caches = [c for c in LRUCache.all.values() if c.name in ("runners", "hcq_programs") and c.hits + c.misses]
print(" ".join(f"{len(c)} {c.evictions}" for c in caches))
print((Tensor.ones(5) * 3).tolist())
"""
  env = {**os.environ, "CORE_CACHE_RUNNERS_BYTES": "1", "CORE_CACHE_HCQ_PROGRAMS_BYTES": "1", "CORE_CACHE_DIR": str(tmp_path)}
  env.pop("DEBUG", None)
  r = subprocess.run([sys.executable, "-c", prog], env=env, capture_output=True, text=True, timeout=300)
  assert r.returncode == 0, r.stderr
  counts, values = r.stdout.splitlines()
  nums = list(map(int, counts.split()))
  assert nums and all(n == 1 for n in nums[0::2]) and all(e >= 5 for e in nums[1::2]), counts
  assert values == "[3.0, 3.0, 3.0, 3.0, 3.0]"
