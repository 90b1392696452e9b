"""Host builds of GPU kernels, for MOCK devices and simulated drivers: a kernel's linearized uops (what its device's renderer
was given) rendered as LLVM IR for this CPU, one function call per work-item, compiled and loaded in process
(core.device.hostjit). A device plugin runs them where its software command processor decodes a dispatch."""
from __future__ import annotations
import concurrent.futures, ctypes, functools, hashlib, os, threading
from dataclasses import dataclass, field
from typing import Any, Callable
from core.codegen.llvm_ir import HostLLVMRenderer, LLVMRenderer, Param, llvm_rewrite, _render_load, _render_store
from core.codegen.access_guard import extent, param_of, proven_in_extent, wild_access
from core.device.renderer import id_sizes
from core.helpers import LRUCache, to_function_name
from core.ir.dtype import AddrSpace, PtrDType, dtypes
from core.ir.ops import UOp, Ops, GroupOp, AxisType
from core.ir.pattern import PatternMatcher, UPat

# Why LLVM and not C: a GPU renderer built on LLVMRenderer accepts bfloat16 arithmetic and vector ops that a host C compiler
# may not (gcc 12 has no bfloat16 arithmetic), and llvmlite needs no compiler on the machine.

AXES = ("gidx0", "gidx1", "gidx2", "lidx0", "lidx1", "lidx2")

class HostBuildError(RuntimeError):
  """A kernel the host can't run (the message says which and why)."""

# The fault guard of host builds (the idea, and what it shares with guarded C kernels: core/codegen/access_guard.py). Each
# buffer argument is checked against the allocation it points into (`spans` given to HostBuild.run) twice over: at launch, the extent the kernel declares for it
# (its PARAM's size) must lie inside; and every load and store whose index the IR can't prove inside that extent (the index's
# vmin/vmax) is checked when it runs. One outside is skipped (a load gives 0, as a gated load whose gate is false) and its
# address kept, and the run raises KernelFault naming the kernel and the address. Proven accesses (nearly all of them: index
# math is affine in ids and loops with known bounds) cost nothing, so loops still vectorize.
# Why a check and not the CPU plugin's signal guard (sigsetjmp in the fault handler): core builds host code with llvmlite only,
# whose JIT linker has no thread-local storage a signal guard needs; and a check also catches a wild access that happens to land
# in mapped memory, which a signal never sees.

def _guarded_access(ctx: HostKernelRenderer, x: UOp) -> str | None:
  idx = x.src[0]
  nbytes = (x.dtype if x.op is Ops.LOAD else x.src[1].dtype).itemsize
  # the plain rule renders accesses through registers and LDS, and those the launch's extent check covers
  if (param := param_of(idx)) is None or (not ctx.check_all and proven_in_extent(idx, param, nbytes)): return None
  if not ctx.guarded:
    ctx.guarded = True
    ctx.allocas += ["%oob.acc = alloca i64, align 8", "store i64 0, ptr %oob.acc, align 8"]
    ctx.declares["declare i64 @llvm.umax.i64(i64, i64)"] = None
  a, e, under, over, bad, ok, rec, acc, acc2 = (ctx.tmp() for _ in range(9))
  d = f"%data{param.arg}"
  lines = [f"{a} = ptrtoint ptr {ctx[idx]} to i64", f"{e} = add i64 {a}, {nbytes}", f"{under} = icmp ult i64 {a}, {d}.lo",
           f"{over} = icmp ugt i64 {e}, {d}.hi", f"{bad} = or i1 {under}, {over}", f"{ok} = xor i1 {bad}, true"]
  if len(idx.src) > 2:   # a gated access touches memory only where its gate is true
    g, g2 = ctx.tmp(), ctx.tmp()
    lines += [f"{g} = and i1 {bad}, {ctx[idx.src[2]]}", f"{g2} = and i1 {ok}, {ctx[idx.src[2]]}"]
    bad, ok = g, g2
  # address + 1 is kept, so that a wild address 0 is seen too
  lines += [f"{rec} = add i64 {a}, 1", f"{rec}.s = select i1 {bad}, i64 {rec}, i64 0", f"{acc} = load i64, ptr %oob.acc, align 8",
            f"{acc2} = call i64 @llvm.umax.i64(i64 {acc}, i64 {rec}.s)", f"store i64 {acc2}, ptr %oob.acc, align 8"]
  # the access itself, gated by `ok`: the same access through an INDEX that carries the gate (only the renderer sees it)
  gate = UOp(Ops.NOOP, dtypes.bool, (), ("oob gate", ok))
  gidx = UOp(Ops.INDEX, idx.dtype, (idx, UOp.const(dtypes.int32, 0), gate))
  gx = x.replace(src=(gidx,) + x.src[1:])
  ctx.r[gate], ctx.r[gidx] = ok, ctx[idx]
  if x.op is Ops.LOAD: ctx.r[gx] = ctx[x]
  return "\n  ".join(lines + [(_render_load if x.op is Ops.LOAD else _render_store)(ctx, gx)])

# where a work-item ends: the largest wild address it touched (+ 1) into the fault slot, unless a work-item was first
GUARD_EXIT = """%oob.all = load i64, ptr %oob.acc, align 8
  %oob.any = icmp ne i64 %oob.all, 0
  br i1 %oob.any, label %oob.report, label %oob.exit
oob.report:
  %oob.old = cmpxchg ptr %fault, i64 0, i64 %oob.all monotonic monotonic
  br label %oob.exit
oob.exit:
  ret void"""

host_kernel_rewrite = PatternMatcher([(UPat((Ops.LOAD, Ops.STORE), name="x"), _guarded_access)]) + llvm_rewrite

class HostKernelRenderer(HostLLVMRenderer):
  """A GPU kernel's uops as a host function `void <name>(buffers..., i32 vars..., i32 gidx0..2, i32 lidx0..2, ptr bounds,
  ptr fault)`; `host_build` adds the wrapper that runs workgroups of a grid. Accesses through buffers are checked (the guard
  above): `bounds` holds the [lo, hi) host range each buffer argument may touch, `fault` the first wild address + 1."""
  local_addrspace = 0
  string_rewrite = host_kernel_rewrite
  guarded = False     # whether this render has checked an access (and so declared the guard's register)
  check_all = False   # check accesses proven inside their buffer's declared extent too (HostBuild.checked)

  def function(self, name: str, uops: list[UOp]) -> str:
    self.guarded = False
    return super().function(name, uops)

  def render_return(self) -> str: return GUARD_EXIT if self.guarded else "ret void"

  def render_special(self, x: UOp) -> str:
    if x.arg not in AXES: raise HostBuildError(f"thread id {x.arg!r} is not one of {', '.join(AXES)}")
    if self.ty(x.dtype) == "i32":
      self.r[x] = f"%{x.arg}"   # the parameter itself
      return ""
    return f"{self[x]} = sext i32 %{x.arg} to {self.ty(x.dtype)}"

  def render_params(self, bufs: list[UOp], vars_: list[UOp]) -> list[Param]:
    for i, b in enumerate(bufs):   # each buffer's allocation, read once at entry
      for j, end in enumerate(("lo", "hi")):
        self.allocas += [f"%data{b.arg}.{end}p = getelementptr inbounds i64, ptr %bounds, i64 {2 * i + j}",
                         f"%data{b.arg}.{end} = load i64, ptr %data{b.arg}.{end}p, align 8"]
    return LLVMRenderer.render_params(self, bufs, vars_) + [Param("i32", f"%{a}") for a in AXES] + [Param("ptr", "%bounds"), Param("ptr", "%fault")]

  def render_define_local(self, x: UOp) -> str:
    # LDS: a stack array of the call, which runs a whole workgroup (workitem_loops), so one per workgroup
    assert isinstance(x.dtype, PtrDType)
    self.r[x] = f"%lds{x.arg}"
    self.allocas.append(f"%lds{x.arg} = alloca [{x.dtype.size} x {self.mem_ty(x.dtype.base)}], align 16")
    return ""

  def render_barrier(self) -> str:
    raise HostBuildError("a BARRIER left after workitem_loops")   # it splits the kernel at every barrier: none reach here

# ops whose value depends only on their sources (rematerialized or spilled when a later region uses them)
_PURE = GroupOp.ALU | {Ops.CAST, Ops.BITCAST, Ops.INDEX, Ops.GEP, Ops.VECTORIZE}

def workitem_loops(uops: list[UOp]) -> list[UOp]:
  """A kernel with workgroup barriers as one call per workgroup (the host has no barrier between work-items run one after
  another): the uops between two barriers become a loop over the workgroup's work-items, so every work-item has reached a
  barrier before any goes past it. lidx comes from that loop's counter; registers get one copy per work-item, and values a
  later region reads are kept per work-item in arrays (pointers are recomputed). Barriers must be outside every loop."""
  depth = 0
  for u in uops:
    if u.op in (Ops.RANGE, Ops.IF): depth += 1
    elif u.op is Ops.END: depth -= sum(1 for r in u.src[1:] if r.op is Ops.RANGE)
    elif u.op is Ops.ENDIF: depth -= 1
    elif u.op is Ops.BARRIER and depth: raise HostBuildError("a BARRIER inside a loop or branch: host builds run barriers only "
                                                             "at the top level of a kernel")
  lsz = id_sizes(uops, "lidx")
  n_items, i32 = lsz[0] * lsz[1] * lsz[2], dtypes.int32
  c = lambda v: UOp.const(i32, v)
  region, k = {}, 0
  for u in uops:
    if u.op is Ops.BARRIER: k += 1
    region[u] = k
  # values the same for every work-item, computed once before the loops
  hoist: set[UOp] = set()
  for u in uops:
    if u.op in (Ops.CONST, Ops.VCONST, Ops.PARAM, Ops.DEFINE_VAR, Ops.DEFINE_LOCAL) or (u.op is Ops.SPECIAL and u.arg.startswith("gidx")) or \
       (u.op in _PURE and all(s in hoist for s in u.src)): hoist.add(u)
  lids = {u for u in uops if u.op is Ops.SPECIAL and u.arg.startswith("lidx")}
  next_reg = max((u.arg + 1 for u in uops if u.op is Ops.DEFINE_REG), default=0)
  regs: dict[UOp, UOp] = {}
  for u in uops:
    if u.op is Ops.DEFINE_REG:
      assert isinstance(u.dtype, PtrDType)
      regs[u] = UOp(Ops.DEFINE_REG, u.dtype.base.ptr(u.dtype.size * n_items, AddrSpace.REG), (), u.arg)
  # values read in a later region than their own: kept in an array with a slot per work-item
  spill: dict[UOp, UOp] = {}
  ext: list[dict[UOp, None]] = [{} for _ in range(region[uops[-1]] + 1)]   # per region: what it reads from earlier ones
  def need(s: UOp, k: int) -> None:
    nonlocal next_reg
    if s.op is Ops.AFTER: return need(s.src[0], k)
    if s in hoist or s in lids or s.op is Ops.DEFINE_REG or region[s] == k or s in ext[k]: return
    ext[k][s] = None
    if isinstance(s.dtype, PtrDType):
      for x in s.src: need(x, k)
    elif s not in spill:
      spill[s] = UOp(Ops.DEFINE_REG, s.dtype.ptr(n_items, AddrSpace.REG), (), next_reg)
      next_reg += 1
  body = [u for u in uops if u not in hoist and u not in lids and u.op not in (Ops.BARRIER, Ops.DEFINE_REG)]
  for u in body:
    for s in u.src: need(s, region[u])
  out = [u for u in uops if u in hoist] + list(regs.values()) + list(spill.values())
  next_range = max((u.arg[0] + 1 for u in uops if u.op is Ops.RANGE), default=0)
  for k in range(len(ext)):
    rk = UOp(Ops.RANGE, i32, (c(n_items),), (next_range + k, AxisType.LOOP))
    done: dict[UOp, UOp] = {}
    # what is emitted, per open loop: a value emitted inside a loop is not available after it (it is emitted again)
    scopes: list[set[UOp]] = [set(hoist) | set(regs.values()) | set(spill.values())]
    def push(n: UOp) -> UOp:
      for x in n.toposort():
        if any(x in sc for sc in scopes): continue
        out.append(x)
        if x.op is Ops.END:
          for _ in (r for r in x.src[1:] if r.op is Ops.RANGE): scopes.pop()
        scopes[-1].add(x)
        if x.op is Ops.RANGE: scopes.append(set())
      return n
    lid = {u: push(rk % c(lsz[0]) if u.arg == "lidx0" else (rk // c(lsz[0])) % c(lsz[1]) if u.arg == "lidx1" else rk // c(lsz[0] * lsz[1]))
           for u in lids}
    def get(s: UOp) -> UOp:
      if s.op is Ops.AFTER: return get(s.src[0])   # ordering only (the regions order everything now)
      if s in hoist: return s
      if s in lids: return lid[s]
      if s.op is Ops.DEFINE_REG: return regs[s]
      if s in done: return done[s]
      if s in spill: done[s] = push(spill[s].index(rk).load())
      else: done[s] = emit(s)   # a pointer from an earlier region, recomputed here
      return done[s]
    def emit(u: UOp) -> UOp:
      if u.op is Ops.INDEX and u.src[0].op is Ops.DEFINE_REG:
        assert isinstance(u.src[0].dtype, PtrDType)
        reg = regs[u.src[0]]
        return push(u.replace(dtype=reg.dtype, src=(reg, rk * c(u.src[0].dtype.size) + get(u.src[1])) + tuple(get(x) for x in u.src[2:])))
      return push(u.replace(src=tuple(get(x) for x in u.src)))
    push(rk)
    # everything from earlier regions at the top of the loop, so it dominates every use (some are inside inner loops)
    for s in ext[k]: get(s)
    for u in body:
      if region[u] != k or u.op is Ops.AFTER: continue
      done[u] = emit(u)
      if u in spill: push(spill[u].index(rk).store(done[u]))
    push(UOp(Ops.END, dtypes.void, (out[-1], rk)))
  return out

def _wmma_lane(w: UOp, lid: UOp) -> UOp:
  """One lane's result of WMMA `w` without the other lanes' registers: element e of this lane's D is row m, column n (the C
  layout), and each A[m][k] and B[k][n] it needs is the fragment element of the lane that holds it, recomputed here by putting
  that lane's id into the fragment's expression (fragments are loads from kernel buffers, the same for any lane that reads)."""
  from core.device.tensor_core import tensor_core
  from core.codegen.opt.tc import lane_index, bits_of
  from core.ir.symbolic import symbolic
  from core.ir.pattern import graph_rewrite
  tc = tensor_core(w.arg)
  a, b, c = w.src
  for f in (a, b):
    if f.op is not Ops.VECTORIZE or any(x.op in (Ops.DEFINE_REG, Ops.DEFINE_LOCAL) for x in f.toposort()):
      raise HostBuildError(f"WMMA {w.arg}: a fragment that is not loads from kernel buffers can't be read for another lane")
  size = int(lid.src[0].arg)
  lane = lid % tc.threads if size != tc.threads else lid
  base = lid - lane if size != tc.threads else None
  simp = lambda x: graph_rewrite(x, symbolic, name="wmma lane")  # noqa: E731
  def elem(frag: UOp, lay: Any, rc: dict[str, UOp]) -> UOp:
    other = bits_of(lay.lane_bits, rc, lid.dtype)
    e = simp(bits_of(lay.elem_bits, rc, lid.dtype))
    vals = [frag.src[i].substitute({lid: simp(other if base is None else base + other)}) for i in range(lay.elements)]
    if e.op is Ops.CONST: return vals[e.arg]
    out = vals[0]
    for i in range(1, len(vals)): out = e.eq(i).where(vals[i], out)
    return out
  outs = []
  for e in range(tc.c.elements):
    m, n = simp(lane_index(tc.c, lane, e, "r")), simp(lane_index(tc.c, lane, e, "c"))
    acc = c.gep(e)
    for k in range(tc.dims[2]):
      kk = UOp.const(lid.dtype, k)
      acc = acc + elem(a, tc.a, {"r": m, "c": kk}).cast(tc.dtype_acc) * elem(b, tc.b, {"r": kk, "c": n}).cast(tc.dtype_acc)
    outs.append(acc)
  return UOp.vectorize(*outs)

def lower_wmma(uops: list[UOp]) -> list[UOp]:
  """Each WMMA replaced by the sums one lane computes (_wmma_lane), its new nodes placed just before it: a host build runs the
  lanes of a warp one after another, so none can hand its fragments to the others."""
  lid = next((u for u in uops if u.op is Ops.SPECIAL and u.arg == "lidx0"), None)
  if lid is None: raise HostBuildError("a WMMA in a kernel without work-item ids (lidx0 is the warp's lanes)")
  out: list[UOp] = []
  seen: set[UOp] = set()
  done: dict[UOp, UOp] = {}
  for u in uops:
    nu = u.replace(src=tuple(done.get(s, s) for s in u.src)) if any(s in done for s in u.src) else u
    if u.op is Ops.WMMA:
      nu = _wmma_lane(nu, lid)
      for x in nu.toposort():
        if x not in seen: out.append(x); seen.add(x)  # noqa: E702
    else: out.append(nu)
    seen.add(nu)
    if nu is not u: done[u] = nu
  return out

def _wrapper(kname: str, nbufs: int, nvars: int, whole_group: bool = False) -> str:
  """`<kname>_wg(ptr %args, ptr %dims, i64 %first, i64 %end, ptr %bounds, ptr %fault)` runs workgroups [first, end) of the grid:
  args = one uint64 per kernel argument, dims = i32 grid x,y,z, block x,y,z; bounds and fault go to the kernel (its fault
  guard). `whole_group`: the kernel runs a whole workgroup per call."""
  ln = [f"define void @{kname}_wg(ptr %args, ptr %dims, i64 %first, i64 %end, ptr %bounds, ptr %fault) #0 {{", "entry:"]
  call_args = []
  for i in range(nbufs + nvars):
    ln += [f"  %ap{i} = getelementptr inbounds i64, ptr %args, i64 {i}", f"  %a{i} = load i64, ptr %ap{i}, align 8"]
    if i < nbufs:
      ln.append(f"  %b{i} = inttoptr i64 %a{i} to ptr")
      call_args.append(f"ptr %b{i}")
    else:
      ln.append(f"  %b{i} = trunc i64 %a{i} to i32")
      call_args.append(f"i32 %b{i}")
  for i, d in enumerate(("gx", "gy", "gz", "lx", "ly", "lz")):
    ln += [f"  %{d}p = getelementptr inbounds i32, ptr %dims, i64 {i}", f"  %{d} = load i32, ptr %{d}p, align 4"]
  ids = ["i32 %g0", "i32 %g1", "i32 %g2", "i32 %l0", "i32 %l1", "i32 %l2", "ptr %bounds", "ptr %fault"]
  ln += ["  %gx64 = zext i32 %gx to i64", "  %gy64 = zext i32 %gy to i64", "  %lxy = mul i32 %lx, %ly",
         "  %nl = add i32 0, 1" if whole_group else "  %nl = mul i32 %lxy, %lz", "  %any = icmp ult i64 %first, %end",
         "  br i1 %any, label %group, label %done",
         # workgroup index -> (x, y, z), x fastest, as the hardware numbers workgroups of a dispatch
         "group:", "  %wg = phi i64 [ %first, %entry ], [ %wgn, %next ]", "  %g0w = urem i64 %wg, %gx64", "  %gt = udiv i64 %wg, %gx64",
         "  %g1w = urem i64 %gt, %gy64", "  %g2w = udiv i64 %gt, %gy64", "  %g0 = trunc i64 %g0w to i32", "  %g1 = trunc i64 %g1w to i32",
         "  %g2 = trunc i64 %g2w to i32", "  br label %item",
         "item:", "  %l = phi i32 [ 0, %group ], [ %ln, %item ]", "  %l0 = urem i32 %l, %lx", "  %lt = udiv i32 %l, %lx",
         "  %l1 = urem i32 %lt, %ly", "  %l2 = udiv i32 %lt, %ly",
         f"  call void @{kname}({', '.join(call_args + ids)})",
         "  %ln = add i32 %l, 1", "  %more = icmp ult i32 %ln, %nl", "  br i1 %more, label %item, label %next",
         "next:", "  %wgn = add i64 %wg, 1", "  %again = icmp ult i64 %wgn, %end", "  br i1 %again, label %group, label %done",
         "done:", "  ret void", "}"]
  return "\n".join(ln) + "\n"

@functools.cache
def _pool() -> concurrent.futures.ThreadPoolExecutor:
  return concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1, thread_name_prefix="core-hostbuild")

def _source(kname: str, uops: list[UOp], nbufs: int, nvars: int, check_all: bool) -> str:
  """LLVM IR of the kernel and its workgroup wrapper."""
  # a kernel sharing LDS between its work-items runs as one call per workgroup
  group = any(u.op in (Ops.BARRIER, Ops.DEFINE_LOCAL) for u in uops)
  r = HostKernelRenderer()
  r.check_all = check_all
  return r.render(kname, workitem_loops(uops) if group else uops) + _wrapper(kname, nbufs, nvars, whole_group=group)

def _load(kname: str, src: str) -> Callable[..., None]:
  """The workgroup wrapper of `src`, compiled and loaded (core.device.hostjit caches both)."""
  from core.device.hostjit import host_library
  return host_library(src).function(kname + "_wg", None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                                    ctypes.c_void_p, ctypes.c_void_p)

@dataclass
class HostBuild:
  """A kernel compiled for the host. `local_size`: the workgroup size the uops were built for (from their lidx ids)."""
  name: str
  nbufs: int
  nvars: int
  local_size: tuple[int, int, int]
  extents: tuple[int | None, ...]   # per buffer argument, the bytes the kernel declares it may touch (None: unknown)
  src: str = field(repr=False)
  fn: Callable[..., None] = field(repr=False)   # the wrapper: (args, dims, first workgroup, end, bounds, fault)
  uops: list[UOp] = field(repr=False, default_factory=list)
  _checked: Callable[..., None] | None = field(repr=False, default=None)

  def checked(self) -> Callable[..., None]:
    """The wrapper of a build that checks every access (built on first use): for a launch whose buffers are smaller than the
    kernel declares (a kernel padded past its buffer's end guards those accesses with gates the IR can't see through)."""
    if self._checked is None:
      kname = "host_" + to_function_name(self.name)
      self._checked = _load(kname, _source(kname, self.uops, self.nbufs, self.nvars, check_all=True))
    return self._checked

  def run(self, args: list[int], grid: tuple[int, int, int], block: tuple[int, int, int],
          spans: list[tuple[int, int]] | None = None) -> None:
    """Runs the whole grid: workgroups split in contiguous ranges over a pool of host threads (the call releases the GIL),
    each workgroup's work-items in order. `spans`: per buffer argument, the host range [lo, hi) of the allocation it points
    into (None: anywhere). An access outside it is skipped and raises KernelFault naming the kernel and the address once the
    grid is done (the device's memory is untouched there, so it stays usable)."""
    if len(args) != self.nbufs + self.nvars: raise HostBuildError(f"{self.name}: {len(args)} arguments, expected {self.nbufs + self.nvars}")
    fn = self.fn
    if spans is not None:
      if len(spans) != self.nbufs: raise HostBuildError(f"{self.name}: {len(spans)} buffer spans for {self.nbufs} buffers")
      # the accesses left unchecked are those proven inside each buffer's declared extent: only safe where that fits
      if any(n is not None and not lo <= a <= a + n <= hi for a, n, (lo, hi) in zip(args, self.extents, spans)): fn = self.checked()
    a = (ctypes.c_uint64 * max(len(args), 1))(*[v & 0xFFFFFFFFFFFFFFFF for v in args])
    dims = (ctypes.c_int32 * 6)(*grid, *block)
    flat = [v for lo, hi in spans for v in (lo, hi)] if spans is not None else [0, 2**64 - 1] * self.nbufs
    bounds, fault = (ctypes.c_uint64 * max(len(flat), 1))(*flat), (ctypes.c_uint64 * 1)()
    n = grid[0] * grid[1] * grid[2]
    pa, pd, pb, pf = ctypes.addressof(a), ctypes.addressof(dims), ctypes.addressof(bounds), ctypes.addressof(fault)
    parts = min(n, os.cpu_count() or 1)
    if parts <= 1: fn(pa, pd, 0, n, pb, pf)
    else:
      cuts = [n * i // parts for i in range(parts + 1)]
      for f in [_pool().submit(fn, pa, pd, lo, hi, pb, pf) for lo, hi in zip(cuts, cuts[1:])]: f.result()
    if fault[0]:
      addr = fault[0] - 1
      raise wild_access(self.name, addr)

_lock = threading.Lock()
_builds: LRUCache = LRUCache("host_builds", 512)

def host_build(name: str, uops: tuple[UOp, ...] | list[UOp]) -> HostBuild:
  """The host build of a kernel's linearized uops (its PROGRAM's LINEAR), compiled once per process (and cached on disk)."""
  kname = "host_" + to_function_name(name)
  ul = lower_wmma(list(uops)) if any(u.op is Ops.WMMA for u in uops) else list(uops)
  nbufs, nvars = sum(1 for u in ul if u.op is Ops.PARAM), sum(1 for u in ul if u.op is Ops.DEFINE_VAR)
  src = _source(kname, ul, nbufs, nvars, check_all=False)
  key = hashlib.sha256(src.encode()).hexdigest()
  with _lock:
    if (hit := _builds.get(key)) is not None: return hit
  local = id_sizes(ul, "lidx")
  extents = tuple(extent(u) for u in ul if u.op is Ops.PARAM)
  b = HostBuild(name, nbufs, nvars, (local[0], local[1], local[2]), extents, src, _load(kname, src), ul)
  with _lock:
    if (hit := _builds.get(key)) is None: _builds[key] = hit = b
    return hit
