"""The METAL plugin's hooks: declares the METAL device (the MSL renderer; MTL interface on macOS, MOCK: command-buffer programs
replayed on the host with each kernel's MSL built as C++) and its HCQ rules."""
from __future__ import annotations
import sys
from typing import Any
from core.device.hookspecs import hookimpl, hcq_rules
from core.device.spec import DeviceSpec

__version__ = "0.2.0"
INTERFACES = ("MTL", "MOCK")   # the first is the default (DEV=METAL); runtime.make_device opens either

def is_available() -> bool:
  """Metal exists only on macOS (the framework is opened when the device is first used, not here)."""
  return sys.platform == "darwin"

def unavailable_reason() -> str:
  return (f"Metal runs only on macOS (this is {sys.platform}); DEV=MOCK+METAL runs the MSL kernels on the host as C++ "
          "(needs clang++ 15 or newer: apt-get install clang-15), DEV=NULL:METAL compiles only")

# the one place the MSL renderer is built: the device factory and the NULL device (DEV=NULL:METAL, compile only) come here
def make_msl(arch: str | None = None) -> tuple[Any, Any]:
  from plugin_metal.renderer import MetalRenderer
  from plugin_metal.compiler import make_compiler
  return MetalRenderer(arch), make_compiler()

@hookimpl
def core_plugin_info() -> dict[str, Any]: return {"name": "metal", "version": __version__, "api": (2, 0)}

@hookimpl
def core_devices() -> list[DeviceSpec]:
  return [DeviceSpec("METAL", factory="plugin_metal.runtime:make_device", renderers={"MSL": "plugin_metal:make_msl"}, default_renderer="MSL",
                     interfaces=INTERFACES, priority=60, is_available=is_available, unavailable_reason=unavailable_reason,
                     description="Apple GPUs through Metal (MSL); MOCK+METAL runs the MSL as C++ on the host")]

# the HCQ rules (both interfaces replay the same command-buffer programs), imported only when core's HCQ pipeline asks for them
core_pm_prep_program, core_pm_lower, core_pm_bufferize = hcq_rules("plugin_metal.prep:pm_prep_program", "plugin_metal.lower:pm_lower",
                                                                 "plugin_metal.bufferize:pm_bufferize")
