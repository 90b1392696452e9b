"""The fault guard of kernels that MOCK devices run on the host. A GPU kernel that computes a wild address faults on the GPU and
the device reports it; run on the host it would crash the process or silently use another allocation. So every load and store
whose index the IR can't prove inside its buffer's declared extent is checked against the allocation the buffer argument
points into; a wild one is skipped (a load gives 0) and reported, and the launch raises `wild_access`'s KernelFault naming the
kernel and the address. Proven accesses (nearly all: index math is affine in ids and loops with known bounds) stay unchecked,
so loops still vectorize. Two renderings of the one idea: LLVM host builds (core/codegen/hostbuild.py: MOCK+AMD, MOCK+NV) and
C-family source that the MOCK runs itself (`guard_accesses` of core/codegen/c_style.py: MOCK+QCOM's OpenCL C, MOCK+METAL's MSL).

A guarded C kernel takes one more buffer argument after its own, `core_guard` (int64): slot 0 the wild access's buffer + 1,
slot 1 its byte offset from that buffer's argument, then per buffer argument the byte range [lo, hi) around the argument that
its allocation allows (`guard_table` builds it, `guard_fault` reads it back)."""
from __future__ import annotations
import bisect, ctypes, threading
from core.device.compiled import KernelFault
from core.ir.dtype import ImageDType, PtrDType, dtypes
from core.ir.ops import UOp, Ops

def param_of(p: UOp) -> UOp | None:
  """The buffer argument (PARAM) a pointer is derived from, or None (registers, LDS)."""
  while p.op in (Ops.INDEX, Ops.CAST, Ops.BITCAST, Ops.AFTER): p = p.src[0]
  return p if p.op is Ops.PARAM else None

def extent(param: UOp) -> int | None:
  """The bytes a kernel may touch through buffer argument `param` (its declared size), None when it doesn't say."""
  assert isinstance(param.dtype, PtrDType)
  return param.dtype.size * param.dtype.base.itemsize if param.dtype.size > 0 else None

def proven_in_extent(idx: UOp, param: UOp, nbytes: int) -> bool:
  """Whether an access of `nbytes` at pointer `idx` stays inside `param`'s declared extent for every value its index can take."""
  inner = idx
  while inner.op in (Ops.CAST, Ops.BITCAST): inner = inner.src[0]   # a vector access: its lanes from the element at the index
  if inner.op is not Ops.INDEX or (n := extent(param)) is None: return False
  if inner.src[0].after_base is not param: return False
  lo, hi = inner.src[1].vmin, inner.src[1].vmax
  item = param.dtype.base.itemsize   # type: ignore[attr-defined]
  return isinstance(lo, int) and isinstance(hi, int) and lo >= 0 and hi * item + nbytes <= n

def needs_check(idx: UOp, nbytes: int) -> UOp | None:
  """The buffer argument whose allocation an access of `nbytes` at `idx` must be checked against, None when it needs no check
  (registers, LDS, images, or proven inside the buffer's declared extent)."""
  if (param := param_of(idx)) is None or isinstance(param.dtype, ImageDType) or proven_in_extent(idx, param, nbytes): return None
  return param

def wild_access(kernel: str, addr: int) -> KernelFault:
  return KernelFault(f"kernel {kernel} accessed address {addr:#x}, outside the memory of the buffer it indexes (an index out "
                     "of range); the access was skipped, so its results are wrong. The device stays usable", kernel, addr)

# *** guarded C-family kernels ***

GUARD_NAME = "core_guard"
GUARD_PARAM = UOp(Ops.PARAM, dtypes.int64.ptr(), (), -1)   # the table argument a guarded C kernel takes after its buffers

def c_guard_prelude(space: str) -> str:
  """C (OpenCL C, MSL) of the check: `space` is the dialect's global address space qualifier. A failed check records the access
  (any one of a launch's wild accesses is reported) and says no; `(long)` of a pointer works in every dialect here."""
  return (f"int core_guard_ok({space}long* g, int k, long off, long n) {{\n"
          "  if (off >= g[2 + 2 * k] && off + n <= g[3 + 2 * k]) return 1;\n"
          "  g[0] = k + 1; g[1] = off;\n  return 0;\n}\n"
          f"#define CORE_GUARD(k, base, p, n) core_guard_ok({GUARD_NAME}, k, (long)(p) - (long)(base), n)")

def guard_table(args: list[int], spans: list[tuple[int, int]]) -> ctypes.Array:
  """The `core_guard` table of a launch: per buffer argument address its allocation's [lo, hi), as offsets from the argument."""
  flat = [v for a, (lo, hi) in zip(args, spans) for v in (lo - a, hi - a)]
  return (ctypes.c_int64 * (2 + len(flat)))(0, 0, *flat)

def guard_fault(kernel: str, table: ctypes.Array, args: list[int]) -> KernelFault | None:
  """The KernelFault a launch's table reports (None when every access was inside)."""
  if not table[0]: return None
  return wild_access(kernel, (args[table[0] - 1] + table[1]) & 0xFFFFFFFFFFFFFFFF)

class Allocations:
  """Host allocations a MOCK device's kernels may touch: `span(addr)` is the [lo, hi) of the one holding `addr`."""
  def __init__(self) -> None:
    self._starts: list[int] = []
    self._ends: dict[int, int] = {}
    self._lock = threading.Lock()
  def add(self, addr: int, size: int) -> None:
    with self._lock:
      if addr not in self._ends: bisect.insort(self._starts, addr)
      self._ends[addr] = addr + size
  def remove(self, addr: int) -> None:
    with self._lock:
      if self._ends.pop(addr, None) is not None: self._starts.remove(addr)
  def span(self, addr: int) -> tuple[int, int]:
    """[lo, hi) of the allocation holding `addr`; (addr, addr) when none does (then every access through it is wild)."""
    with self._lock:
      i = bisect.bisect_right(self._starts, addr) - 1
      if i >= 0 and addr < (end := self._ends[self._starts[i]]): return self._starts[i], end
    return addr, addr
