"""The NV plugin's hooks: declares the NV device (PTX and CUDA renderers for sm_80..sm_120; interfaces NVK (the kernel driver's
resource manager, or its simulation under NVK_SIM=<arch>), CUDA (the CUDA driver API) and MOCK (a software GPU that decodes the
GPFIFO channels' methods and QMDs)) and its HCQ rules."""
from __future__ import annotations
import os
from typing import Any
from core.device.hookspecs import hookimpl, hcq_rules
from core.device.spec import DeviceSpec

__version__ = "0.1.0"
# the first is the default (DEV=NV): the kernel driver. CUDA is the driver API (libcuda); MOCK runs kernels on the software GPU
INTERFACES = ("NVK", "CUDA", "MOCK")

# the kernel driver's device files: their presence is what makes NV a default device
GPU_FILES = ("/dev/nvidiactl", "/dev/nvidia0")

def is_available() -> bool:
  # only a real driver makes NV a default: the simulated one (NVK_SIM) and MOCK are asked for by name. Two stats, no imports:
  # every process that picks a default device asks
  return all(os.path.exists(f) for f in GPU_FILES)

def unavailable_reason() -> str:
  return ("no NVIDIA kernel driver here (/dev/nvidiactl, /dev/nvidia0): DEV=MOCK+NV runs on the software GPU, NVK_SIM=sm_90 DEV=NVK+NV on "
          "the simulated driver, DEV=NULL:NV:PTX:sm_90 compiles only")

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
  # picked when DEV is unset only where the kernel driver's device nodes exist (never run on hardware: see the README)
  return [DeviceSpec("NV", factory="plugin_nv.runtime:make_device", renderers={"PTX": "plugin_nv:make_ptx", "CUDA": "plugin_nv:make_cuda"},
                     default_renderer="PTX", interfaces=INTERFACES, priority=60, is_available=is_available, unavailable_reason=unavailable_reason,
                     description="NVIDIA GPUs (sm_80..sm_120): PTX via LLVM and ptxas, CUDA C via NVRTC; GPFIFO channels and QMD launches, "
                                 "the kernel driver (NVK), the CUDA driver API (CUDA+NV), a software GPU (DEV=MOCK+NV) or compiled only (DEV=NULL:NV:PTX:sm_90)")]

# the HCQ rules, imported only when core's HCQ pipeline asks for them: cubin -> NVProgramData (prep.py), commands -> pushbuffer
# methods (lower.py), placeholders -> the channel's and fresh buffers (bufferize.py)
core_pm_prep_program, core_pm_lower, core_pm_bufferize = hcq_rules("plugin_nv.prep:pm_prep_program", "plugin_nv.lower:pm_lower",
                                                                 "plugin_nv.bufferize:pm_bufferize")
