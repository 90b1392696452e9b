"""The NV plugin's hooks: declares the NV device (PTX and CUDA renderers for sm_80..sm_120, compile-only so far: no interface runs kernels yet)."""
from __future__ import annotations
from typing import TYPE_CHECKING, Any
from core.device.hookspecs import hookimpl
from core.device.spec import DeviceSpec

if TYPE_CHECKING:
  from core.ir.pattern import PatternMatcher

__version__ = "0.1.0"
INTERFACES = ("MOCK", "NVK", "CUDA")   # declared for what comes next (issue 17); none opens yet

def make_device(name: str, target: Any) -> Any:
  """No NV interface is written yet: only compile-only DEV=NULL:NV:PTX:<arch> or NULL:NV:CUDA:<arch> works."""
  raise NotImplementedError(f"{name}: no NV interface ({', '.join(INTERFACES)}) is implemented yet; only compile-only "
                            f"DEV=NULL:NV:<arch> (NV's PTX renderer and ptxas; arch sm_80, sm_86, sm_89, sm_90, sm_100 or sm_120) works so far, or NULL:NV:CUDA:<arch>. "
                            f"To run kernels use another device, e.g. DEV=CPU (pip install ./plugins/cpu)")

# the one place the PTX renderer is built: the NULL device (compile only) borrows it, and so will the device factory
def make_ptx(arch: str | None = None) -> tuple[Any, Any]:
  from plugin_nv.renderer import PTXRenderer
  from plugin_nv.compiler import PTXCompiler
  return PTXRenderer(arch), PTXCompiler(arch)

# the CUDA C renderer and NVRTC: DEV=NULL:NV:CUDA:<arch> (NV's default stays PTX)
def make_cuda(arch: str | None = None) -> tuple[Any, Any]:
  from plugin_nv.renderer import CUDARenderer
  from plugin_nv.compiler import NVRTCCompiler
  return CUDARenderer(arch), NVRTCCompiler(arch)

@hookimpl
def core_plugin_info() -> dict[str, Any]: return {"name": "nv", "version": __version__, "api": (2, 0)}

@hookimpl
def core_devices() -> list[DeviceSpec]:
  return [DeviceSpec("NV", factory=make_device, renderers={"PTX": "plugin_nv:make_ptx", "CUDA": "plugin_nv:make_cuda"}, default_renderer="PTX", interfaces=INTERFACES,
                     priority=60, is_available=lambda: False,
                     description="NVIDIA GPUs (sm_80..sm_120): PTX via LLVM and ptxas, CUDA C via NVRTC; compile-only so far (DEV=NULL:NV:PTX:sm_90)")]

# the HCQ rules written so far: cubin -> NVProgramData (prep.py); pm_lower and pm_bufferize come with the first interface
@hookimpl
def core_pm_prep_program(device: str) -> PatternMatcher:
  from plugin_nv.prep import pm_prep_program
  return pm_prep_program
