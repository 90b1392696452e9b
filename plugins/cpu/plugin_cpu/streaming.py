"""Streaming (non-temporal) stores on x86-64: which kernel stores bypass the caches, decided once here for both CPU renderers."""
from __future__ import annotations
import functools, os
from core.ir.dtype import AddrSpace, PtrDType, dtypes, global_nbytes
from core.ir.ops import UOp, Ops, params_nbytes
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

# A kernel whose buffers together are this big can't keep them in the last-level cache, so its writes reach memory anyway: a
# plain store first reads each destination line in (write-allocate), a streaming store doesn't, and the line isn't kept (a*b+1
# on 16M floats: 9.35 -> 7.2 ms; Zen 4, 32 MiB L3, A/B in one process: 27.4 -> 39.7 GB/s on one thread, 52.5 -> 72.4 on two,
# the same with the L3 flushed before each call: what plain stores leave in the cache does not speed the next call). The output
# alone under it is not enough: its first lines are gone by the time the kernel ends
# (one Zen 3 thread, 32 MiB L3, min of 15-30 calls: layernorm 4096x1024 (16 MiB in, 16 out) 2.13 -> 1.53 ms, NCHW->NHWC
# 32x64x56x56 2.93 -> 2.13, NHWC->NCHW 3.93 -> 2.02; matmul 2048 (3 x 16 MiB) and conv2d 32x64x56x56 unchanged). Kernels that
# fit are often read back at once by the next kernel, from the cache: they keep plain stores. The bound is 7/8 of the cache, as
# the cache holds more than one kernel's data: 4096x1000 float32 rows (32.8 MB in and out, 0.98 of a 32 MiB L3) missed it
# (one Zen 5 thread, A/B in one process, medians of 31: layernorm 0.88 -> 0.72 ms, softmax with its stash in a per-thread row
# 1.67 -> 1.45 streamed). $CPU_STREAM_MIN_BYTES overrides it (a huge value turns streaming stores off, for comparisons).
LLC_MAX_BYTES = 32 << 20   # the Zen 3/4/5 CCX's L3, where the 7/8 bound was measured

def nt_min_bytes(llc_bytes: int) -> int:
  """The bound above for a last-level cache of `llc_bytes` (0: unknown), counted at most LLC_MAX_BYTES: a VM's guest is shown its
  host socket's whole L3, which every other guest shares (a 2-vCPU guest on a Granite Rapids socket reads 480 MiB; there a*b+1 on
  16M floats, 192 MB, ran at 15 GB/s with plain stores and 24 streamed, and 12-48 MB footprints ran alike either way)."""
  return max(min(llc_bytes, LLC_MAX_BYTES) * 7 // 8, 4 << 20)

NT_MIN_BYTES = int(os.getenv("CPU_STREAM_MIN_BYTES", "") or nt_min_bytes(cache_bytes()))

def host_streams() -> bool:
  """Streaming stores are used on x86-64 only: elsewhere the fence that must follow them differs (and is left out)."""
  return host_machine() == "x86_64"

def stream_width(nbytes: int, simd_bytes: int, align: int = 0) -> int:
  """Bytes of the widest streaming store instruction (16 SSE2, 32 AVX, 64 AVX-512) that divides a vector of `nbytes` and, unless
  0, the `align` its address is known to be a multiple of; 0 for none."""
  return next((w for w in (64, 32, 16) if w <= simd_bytes and nbytes % w == 0 and (not align or align % w == 0)), 0)

def _known_align(i: UOp, itemsize: int) -> int:
  """Bytes the element index `i` is a known multiple of (the buffer itself is 64-byte aligned by the allocator)."""
  return i.const_factor() * itemsize if i.dtype.count == 1 else itemsize

def store_width(x: UOp, simd_bytes: int) -> int:
  """The streaming stores STORE x is rendered with: the widest dividing its vector and its address's known alignment (rows of
  1000 floats start 32 bytes apart: a 64-byte vector is two 32-byte stores), else the widest dividing its vector (the renderers
  check the address at run time, so this is a matter of speed only)."""
  idx, val = x.src[0], x.src[1]
  n = val.dtype.itemsize
  return stream_width(n, simd_bytes, _known_align(idx.src[1], idx.src[0].dtype.base.itemsize)) or stream_width(n, simd_bytes)

def buffer_tested(x: UOp, simd_bytes: int) -> bool:
  """Whether streamed STORE x tests its buffer's alignment (once for the kernel) in place of its address's: a store gated per lane (a
  padded row's, heuristic._row_pass) at an index a known multiple of its width (store_width), so aligned exactly where its buffer
  is. Other streamed stores (a matmul's, gated per row or not, an elementwise kernel's) keep a test each: not measured."""
  idx = x.src[0]
  if len(idx.src) < 3 or idx.src[2].dtype.count == 1 or (w := store_width(x, simd_bytes)) == 0: return False
  return _known_align(idx.src[1], idx.src[0].dtype.base.itemsize) % w == 0

def _streamable(x: UOp, buf: UOp, i: UOp, val: UOp, min_bytes: int, simd_bytes: int) -> bool:
  pdt = buf.dtype
  if x.arg is not None or not isinstance(pdt, PtrDType) or pdt.addrspace != AddrSpace.GLOBAL or pdt.size < 0: return False
  if val.dtype.count == 1 or val.dtype.scalar() is dtypes.bool: return False
  # the buffers the stored value is made of, and the output: too big together for the last-level cache. An output under a
  # quarter of it stays plain (a matvec's, a column sum's: the next kernel may read it back from the cache; not measured). The
  # output first: the buffers need a walk of the store's graph, one per vector store (ResNet-18 b8 inference: 7k walks, ~5%
  # of its codegen time, where no output but the stem's is a quarter of the cache)
  if global_nbytes(buf.dtype) * 4 < min_bytes: return False
  if params_nbytes(x.toposort()) < min_bytes: return False
  # a value read back from the output (softmax's exps where they are stashed there, core.codegen.stash): its lines are in the
  # cache, and a streaming store over a cached line writes it out at once (softmax 4096x1000 streamed: 3.40 -> 4.13 ms)
  if any(u.op is Ops.INDEX and u.src[0] is buf for u in val.toposort()): return False
  # whole aligned vectors of some instruction's width: the index is a known multiple of it (the renderers still check the address
  # at run time, as a view or a foreign pointer may not be aligned)
  return i.dtype.count == 1 and stream_width(val.dtype.itemsize, simd_bytes, _known_align(i, pdt.base.itemsize)) > 0

def pm_streaming_stores(min_bytes: int = NT_MIN_BYTES, simd_bytes: int = 32) -> PatternMatcher:
  """Marks vector STOREs into a global buffer (arg NT_ARG) for the renderers to stream, where that buffer is at least a quarter of
  `min_bytes`, it and those the stored value reads total at least `min_bytes`, and the value does not read it back. A gated
  store (a row padded to whole vectors, gated per lane: heuristic._row_pass) streams where its gate is all true and stays a
  plain (masked) store elsewhere: the renderers test the gate."""
  def mark(x: UOp) -> UOp | None:
    # STORE(INDEX(PARAM, i[, gate]), val, ...) tested here: a rule of the node alone is called directly, where a pattern of its
    # sources took the matcher's captures and continuations (~4 us a STORE, 2% of ResNet-18 b8 inference's codegen time)
    if len(x.src) < 2 or (idx := x.src[0]).op is not Ops.INDEX or len(idx.src) not in (2, 3) or idx.src[0].op is not Ops.PARAM: return None
    val = x.src[1]
    if len(idx.src) == 3 and idx.src[2].dtype.count not in (1, val.dtype.count): return None
    return x.replace(arg=NT_ARG) if _streamable(x, idx.src[0], idx.src[1], val, min_bytes, simd_bytes) else None
  return PatternMatcher([(UPat(Ops.STORE, name="x"), mark)], name="streaming stores")
