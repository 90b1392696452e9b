"""The AMD renderer: LLVM IR for amdgcn-amd-amdhsa (amdgpu_kernel ABI, workgroup/workitem ids, LDS, barriers) per GPU arch."""
from __future__ import annotations
import dataclasses
from core.helpers import prod
from core.ir.dtype import DType, dtypes
from core.ir.ops import UOp
from core.device.renderer import id_sizes
from core.codegen.llvm_ir import LLVMRenderer

TRIPLE = "amdgcn-amd-amdhsa"
DEFAULT_ARCH = "gfx1100"

@dataclasses.dataclass(frozen=True)
class ArchInfo:
  """What differs between the GPU generations this plugin targets.
  mach: EF_AMDGPU_MACH value LLVM writes in the ELF e_flags (AMDGPUUsage "AMDGPU ELF Header"), used to check that the
  installed LLVM really knows the arch. wave: wavefront size. lds: bytes of LDS one workgroup may use. features: LLVM
  target features. family: "gfx9" | "gfx11" | "gfx12" (register layouts and packet flavours follow it)."""
  name: str
  mach: int
  wave: int
  lds: int
  family: str
  features: str = ""

ARCHS: dict[str, ArchInfo] = {a.name: a for a in (
  ArchInfo("gfx90a", 0x3f, 64, 64 * 1024, "gfx9"),
  ArchInfo("gfx942", 0x4c, 64, 64 * 1024, "gfx9"),
  ArchInfo("gfx950", 0x4f, 64, 160 * 1024, "gfx9"),
  # RDNA can run wave64 too; wave32 is its native width and what LLVM picks by default: say it explicitly
  ArchInfo("gfx1100", 0x41, 32, 64 * 1024, "gfx11", "+wavefrontsize32"),
  ArchInfo("gfx1201", 0x4e, 32, 64 * 1024, "gfx12", "+wavefrontsize32"),
)}

def arch_info(arch: str | None) -> ArchInfo:
  """The ArchInfo for `arch` (None: the default gfx1100); an arch this plugin does not target is a clear ValueError."""
  name = arch or DEFAULT_ARCH
  if name not in ARCHS:
    raise ValueError(f"AMD arch {name!r} is not supported: choose one of {', '.join(ARCHS)} (e.g. DEV=AMD:LLVM:{DEFAULT_ARCH})")
  return ARCHS[name]

# float64 sin/exp2/log2/pow have no AMDGPU instruction and LLVM has no libcall for them (it aborts the process): compute them in
# float32: reduced precision for these four float64 ops on real hardware (a known gap; the op suite cannot check it here)
_F32_FALLBACK = ("sin", "exp2", "log2", "pow")

class AMDLLVMRenderer(LLVMRenderer):
  """One kernel as an `amdgpu_kernel` function: buffers are `ptr addrspace(1)`, gidx = workgroup id, lidx = workitem id."""
  device = "AMD"
  suffix = "LLVM"
  target_triple = TRIPLE
  kernel_cconv = "amdgpu_kernel "
  global_addrspace = 1
  local_addrspace = 3
  private_addrspace = 5
  aligned_params = True
  has_local = True
  has_shared = True
  # the dispatch packet's grid is 32 bits of work-items per axis; index math is int32, so stay below 2^31
  global_max = (2**31 - 1, 65535, 65535)
  local_max = (1024, 1024, 1024)
  shared_max = 64 * 1024
  supports_float4 = True
  # LLVM legalizes bfloat on every target here (promoting to float where the arch has no bf16 ALU), see ArchInfo
  supported_dtypes = frozenset((dtypes.bool,) + dtypes.ints + (dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64))

  def __init__(self, arch: str | None = None):
    self.info = arch_info(arch)
    self.arch = self.info.name
    self.shared_max = self.info.lds  # type: ignore[misc]  # per-instance: the LDS size depends on the arch

  def function_attrs(self, name: str, uops: list[UOp]) -> str:
    # the work-group size the kernel is built for: LLVM sizes registers and barriers by it, the dispatch must match it
    local = prod(id_sizes(uops, "lidx"))
    if local > self.local_max[0]: raise ValueError(f"kernel {name}: {local} work-items per workgroup, the most is {self.local_max[0]}")
    return f'nounwind "amdgpu-flat-work-group-size"="{local},{local}" "uniform-work-group-size"="true"'

  def special_intrinsic(self, x: UOp) -> str:
    return f"@llvm.amdgcn.{'workgroup' if x.arg.startswith('gidx') else 'workitem'}.id.{'xyz'[int(x.arg[-1])]}"

  def render_barrier(self) -> str:
    # s_barrier alone orders execution only: the fences make LDS writes before it visible to the workgroup after it
    self.declares["declare void @llvm.amdgcn.s.barrier()"] = None
    return ('fence syncscope("workgroup") release\n  call void @llvm.amdgcn.s.barrier()\n'
            '  fence syncscope("workgroup") acquire')

  def intrinsic(self, fn: str, dt: DType, nargs: int) -> str:
    if dt.scalar() is not dtypes.float64 or fn not in _F32_FALLBACK: return super().intrinsic(fn, dt, nargs)
    f32 = dtypes.float32.vec(dt.count)
    inner, t, ft = super().intrinsic(fn, f32, nargs), self.ty(dt), self.ty(f32)
    name = f"@amd.f32.{fn}.{'v%d' % dt.count if dt.count > 1 else ''}f64"
    args = ", ".join(f"{t} %a{i}" for i in range(nargs))
    body = [f"%n{i} = fptrunc {t} %a{i} to {ft}" for i in range(nargs)]
    body += [f"%r = call {ft} {inner}({', '.join(f'{ft} %n{i}' for i in range(nargs))})", f"%w = fpext {ft} %r to {t}", f"ret {t} %w"]
    self.declares[f"define internal {t} {name}({args}) alwaysinline nounwind {{\n  " + "\n  ".join(body) + "\n}"] = None
    return name
