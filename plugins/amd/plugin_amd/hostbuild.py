"""Host builds of AMD kernels for the MOCK interface: the same linearized uops as host LLVM IR, run one workgroup per pool block."""
from __future__ import annotations
import ctypes, functools, hashlib, threading
from dataclasses import dataclass, field
from typing import Any
from core.helpers import to_function_name
from core.ir.dtype import PtrDType
from core.ir.ops import UOp, Ops

# Why LLVM and not C: the AMD renderer is an LLVMRenderer, so every uop it accepts (bfloat16 arithmetic, vector ops) the host
# LLVM renderer accepts too; the host C compiler here (gcc 12) has no bfloat16 arithmetic.

AXES = ("gidx0", "gidx1", "gidx2", "lidx0", "lidx1", "lidx2")

class HostBuildError(RuntimeError):
  """A kernel the MOCK device can't run on the host (the message says which and why)."""

@functools.cache
def _renderer_class() -> type:
  from plugin_cpu.renderer import CPULLVMRenderer

  class HostKernelRenderer(CPULLVMRenderer):
    """The AMD kernel's uops as a host function `void host_<name>(buffers..., i32 vars..., i32 gidx0..2, i32 lidx0..2)` plus a
    wrapper `host_<name>_wg(ptr args, ptr dims, i64 wg)` that runs every work-item of workgroup `wg` in order."""
    local_addrspace = 0

    def _render(self, name: str, uops: list[UOp]) -> str:
      self.blocks: list[UOp] = []
      return super()._render(name, uops)

    def render_special(self, x: UOp) -> str:
      if x.arg not in AXES: raise HostBuildError(f"thread id {x.arg!r} is not one of {', '.join(AXES)}")
      if self.ty(x.dtype) == "i32":
        self.r[x] = f"%{x.arg}"   # the parameter itself
        return ""
      return f"{self[x]} = sext i32 %{x.arg} to {self.ty(x.dtype)}"

    def render_params(self, bufs: list[UOp], vars_: list[UOp]) -> list[str]:
      from core.codegen.llvm_ir import LLVMRenderer
      return LLVMRenderer.render_params(self, bufs, vars_) + [f"i32 %{a}" for a in AXES]

    def render_define_local(self, x: UOp) -> str:
      # LDS: one array per pool thread, which runs whole workgroups one after another, so it is per workgroup while one runs
      assert isinstance(x.dtype, PtrDType)
      name = f"@{to_function_name(self.kernel_name)}.lds{x.arg}"
      self.globals.append(f"{name} = internal thread_local global [{x.dtype.size} x {self.mem_ty(x.dtype.base)}] undef, align 16")
      self.r[x] = name
      return ""

    def render_barrier(self) -> str:
      raise HostBuildError("the kernel has a workgroup BARRIER; the MOCK device runs a workgroup's work-items one after another, "
                           "which can't honour it")

  return HostKernelRenderer

def _wrapper(kname: str, nbufs: int, nvars: int) -> str:
  """`<kname>_wg(ptr %args, ptr %dims, i64 %wg)`: args = one uint64 per kernel argument, dims = i32 grid x,y,z, block x,y,z."""
  ln = [f"define void @{kname}_wg(ptr %args, ptr %dims, i64 %wg) #0 {{", "entry:"]
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
  # workgroup index -> (x, y, z), x fastest, as the hardware numbers workgroups of a dispatch
  ln += ["  %gx64 = zext i32 %gx to i64", "  %gy64 = zext i32 %gy to i64", "  %g0w = urem i64 %wg, %gx64", "  %gt = udiv i64 %wg, %gx64",
         "  %g1w = urem i64 %gt, %gy64", "  %g2w = udiv i64 %gt, %gy64", "  %g0 = trunc i64 %g0w to i32", "  %g1 = trunc i64 %g1w to i32",
         "  %g2 = trunc i64 %g2w to i32", "  %lxy = mul i32 %lx, %ly", "  %nl = mul i32 %lxy, %lz", "  br label %loop", "loop:",
         "  %l = phi i32 [ 0, %entry ], [ %ln, %loop ]", "  %l0 = urem i32 %l, %lx", "  %lt = udiv i32 %l, %lx", "  %l1 = urem i32 %lt, %ly",
         "  %l2 = udiv i32 %lt, %ly",
         f"  call void @{kname}({', '.join(call_args + ['i32 %g0', 'i32 %g1', 'i32 %g2', 'i32 %l0', 'i32 %l1', 'i32 %l2'])})",
         "  %ln = add i32 %l, 1", "  %more = icmp ult i32 %ln, %nl", "  br i1 %more, label %loop, label %done", "done:", "  ret void", "}"]
  return "\n".join(ln) + "\n"

@dataclass
class HostBuild:
  """A kernel compiled for the host. `local_size`: the workgroup size the uops were built for (from their lidx ids)."""
  name: str
  nbufs: int
  nvars: int
  local_size: tuple[int, int, int]
  src: str = field(repr=False)
  program: Any = field(repr=False)   # plugin_cpu.runtime.CPUProgram of the wrapper

  def run(self, args: list[int], grid: tuple[int, int, int], block: tuple[int, int, int]) -> None:
    """Runs the whole grid: every workgroup a block of the CPU plugin's pool, its work-items in order inside it."""
    if len(args) != self.nbufs + self.nvars: raise HostBuildError(f"{self.name}: {len(args)} arguments, expected {self.nbufs + self.nvars}")
    a = (ctypes.c_uint64 * max(len(args), 1))(*[v & 0xFFFFFFFFFFFFFFFF for v in args])
    dims = (ctypes.c_int32 * 6)(*grid, *block)
    self.program(ctypes.addressof(a), ctypes.addressof(dims), global_size=(grid[0] * grid[1] * grid[2],))

_lock = threading.Lock()
_builds: dict[str, HostBuild] = {}

def host_build(name: str, uops: tuple[UOp, ...] | list[UOp]) -> HostBuild:
  """The host build of a kernel's linearized uops (an AMD ProgramSpec's), compiled once per process (and cached on disk by the
  CPU plugin's LLVM compiler)."""
  kname = "host_" + to_function_name(name)
  src = _renderer_class()().render(kname, list(uops))
  src += _wrapper(kname, sum(1 for u in uops if u.op is Ops.PARAM), sum(1 for u in uops if u.op is Ops.DEFINE_VAR))
  key = hashlib.sha256(src.encode()).hexdigest()
  with _lock:
    if (hit := _builds.get(key)) is not None: return hit
  from plugin_cpu.compiler import LLVMCompiler
  from plugin_cpu.runtime import CPUProgram
  lib = _compiler(LLVMCompiler).compile_cached(src)
  local = [1, 1, 1]
  for u in uops:
    if u.op is Ops.SPECIAL and u.arg.startswith("lidx"): local[int(u.arg[4:])] = int(u.src[0].arg)
  b = HostBuild(name, sum(1 for u in uops if u.op is Ops.PARAM), sum(1 for u in uops if u.op is Ops.DEFINE_VAR), (local[0], local[1], local[2]),
                src, CPUProgram(kname + "_wg", lib))
  with _lock: return _builds.setdefault(key, b)

@functools.cache
def _compiler(cls: type) -> Any: return cls()
