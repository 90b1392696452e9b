"""Streaming (non-temporal) stores on x86-64: which kernel stores bypass the caches, decided once here for both CPU renderers."""
from __future__ import annotations
import functools, os
from core.ir.dtype import AddrSpace, PtrDType, dtypes
from core.ir.ops import UOp, Ops
from core.helpers import host_machine
from core.ir.pattern import PatternMatcher, UPat

NT_ARG = "nontemporal"   # the arg of a STORE the renderers emit as a streaming store (plain STOREs have no arg)

def _cache_type(i: int) -> str:
  try:
    with open(f"/sys/devices/system/cpu/cpu0/cache/index{i}/type") as f: return f.read().strip()
  except OSError: return ""

@functools.cache
def cache_bytes(level: int = 0) -> int:
  """The size of this CPU's data or unified cache of `level` (0: the last level) from sysfs (0 when unknown)."""
  best = (0, 0)
  for i in range(8):
    try:
      with open(f"/sys/devices/system/cpu/cpu0/cache/index{i}/level") as f: lvl = int(f.read())
      with open(f"/sys/devices/system/cpu/cpu0/cache/index{i}/size") as f: txt = f.read().strip().upper()
    except (OSError, ValueError): continue
    if (level and lvl != level) or _cache_type(i) == "Instruction": continue
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(txt[-1:], 1)
    try: best = max(best, (lvl, int(txt.rstrip("KMG")) * mult))
    except ValueError: continue
  return best[1]

# A buffer this big can't stay in the last-level cache, so the kernel's writes to it reach memory anyway: a plain store first
# reads each destination line in (write-allocate), a streaming store doesn't, and the line isn't kept (a*b+1 on 16M floats: 9.35
# -> 7.2 ms). Smaller outputs are often read back at once by the next kernel, from the cache: they keep plain stores.
# $CPU_STREAM_MIN_BYTES overrides it (a huge value turns streaming stores off, for comparisons).
NT_MIN_BYTES = int(os.getenv("CPU_STREAM_MIN_BYTES", "") or max(cache_bytes(), 4 << 20))

def host_streams() -> bool:
  """Streaming stores are used on x86-64 only: elsewhere the fence that must follow them differs (and is left out)."""
  return host_machine() == "x86_64"

def stream_width(nbytes: int, simd_bytes: int) -> int:
  """Bytes of the widest streaming store instruction (16 SSE2, 32 AVX, 64 AVX-512) that divides a vector of `nbytes`; 0 for none."""
  return next((w for w in (64, 32, 16) if w <= simd_bytes and nbytes % w == 0), 0)

def _streamable(x: UOp, buf: UOp, i: UOp, val: UOp, min_bytes: int, simd_bytes: int) -> bool:
  pdt = buf.dtype
  if x.arg is not None or not isinstance(pdt, PtrDType) or pdt.addrspace != AddrSpace.GLOBAL or pdt.size < 0: return False
  if pdt.size * pdt.base.itemsize < min_bytes or val.dtype.count == 1 or val.dtype.scalar() is dtypes.bool: return False
  if not (w := stream_width(val.dtype.itemsize, simd_bytes)): return False
  # a whole aligned vector: the index is a known multiple of the instruction's width (the buffer itself is 64-byte aligned by
  # the allocator; the renderers still check the address at run time, as a view or a foreign pointer may not be)
  return i.dtype.count == 1 and (i.const_factor() * pdt.base.itemsize) % w == 0

def pm_streaming_stores(min_bytes: int = NT_MIN_BYTES, simd_bytes: int = 32) -> PatternMatcher:
  """Marks ungated vector STOREs into a global buffer of at least `min_bytes` (arg NT_ARG) for the renderers to stream."""
  def mark(x: UOp, buf: UOp, i: UOp, val: UOp) -> UOp | None:
    return x.replace(arg=NT_ARG) if _streamable(x, buf, i, val, min_bytes, simd_bytes) else None
  return PatternMatcher([
    (UPat(Ops.STORE, src=(UPat(Ops.INDEX, src=(UPat(Ops.PARAM, name="buf"), UPat.var("i"))), UPat.var("val")), name="x", allow_any_len=True),
     mark),
  ], name="streaming stores")
