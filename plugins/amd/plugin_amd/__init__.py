"""The AMD plugin's hooks: declares the AMD device (LLVM renderer for gfx9/gfx11/gfx12, KFD and MOCK interfaces) and its HCQ rules."""
from __future__ import annotations
import os
from typing import Any
from core.device.hookspecs import hookimpl, hcq_rules
from core.device.spec import DeviceSpec

__version__ = "0.1.0"
INTERFACES = ("KFD", "MOCK")   # the first is the default (DEV=AMD); runtime.make_device opens either

def is_available() -> bool:
  """A GPU driver node exists, or the simulated driver is selected (AMD_KFD_SIM=<arch>); nothing is opened. (This decides only
  whether AMD is picked when DEV is unset; DEV=MOCK+AMD opens the software GPU anywhere.)"""
  return os.path.exists("/dev/kfd") or bool(os.environ.get("AMD_KFD_SIM"))

def unavailable_reason() -> str:
  return ("no /dev/kfd here (the amdgpu driver's compute node: no AMD GPU, or its driver is not loaded). DEV=MOCK+AMD runs the same "
          "command streams on a software GPU, DEV=NULL:AMD:<arch> compiles only, AMD_KFD_SIM=<arch> simulates the driver")

# the one place the AMD renderer is built: the device factory (runtime.make_device) and the NULL device (compile only) come here
def make_llvm(arch: str | None = None) -> tuple[Any, Any]:
  from plugin_amd.renderer import AMDLLVMRenderer
  from plugin_amd.compiler import AMDCompiler
  return AMDLLVMRenderer(arch), AMDCompiler(arch)

@hookimpl
def core_plugin_info() -> dict[str, Any]: return {"name": "amd", "version": __version__, "api": (2, 0)}

@hookimpl
def core_devices() -> list[DeviceSpec]:
  return [DeviceSpec("AMD", factory="plugin_amd.runtime:make_device", renderers={"LLVM": "plugin_amd:make_llvm"}, default_renderer="LLVM",
                     interfaces=INTERFACES, priority=60, is_available=is_available, unavailable_reason=unavailable_reason,
                     description="AMD GPUs (gfx90a, gfx942, gfx950, gfx1100, gfx1201): LLVM code objects, PM4/SDMA queues")]

# the HCQ rules, one set each for every interface, imported only when core's HCQ pipeline asks for them
core_pm_prep_program, core_pm_lower, core_pm_bufferize = hcq_rules("plugin_amd.prep:pm_prep_program", "plugin_amd.lower:pm_lower",
                                                                 "plugin_amd.bufferize:pm_bufferize")
