"""plugin-example's hooks: declares the EXAMPLE device. Cheap to import; the renderer, compiler and runtime load on first use."""
from __future__ import annotations
import os
from typing import Any
from core.device.hookspecs import hookimpl, hcq_rules
from core.device.spec import DeviceSpec

__version__ = "0.1.0"

def has_c_compiler() -> bool:
  # the availability probe must be cheap: look on PATH, compile nothing; shutil (with bz2 and lzma) loads here, not at import,
  # since choosing the default device imports every plugin's hook module
  import shutil
  return any(shutil.which(c) for c in ([os.environ["CC"]] if os.getenv("CC") else []) + ["cc", "gcc", "clang"])

def make_c(arch: str | None = None) -> tuple[Any, Any]:
  """(Renderer, Compiler) for renderer "C"; the NULL device borrows this too (DEV=NULL:EXAMPLE)."""
  from plugin_example.renderer import ExampleRenderer
  from plugin_example.compiler import HostCCompiler
  return ExampleRenderer(), HostCCompiler()

@hookimpl
def core_plugin_info() -> dict[str, Any]: return {"name": "example", "version": __version__, "api": (2, 0)}

@hookimpl
def core_devices() -> list[DeviceSpec]:
  return [DeviceSpec("EXAMPLE", factory="plugin_example.runtime:make_device", renderers={"C": "plugin_example:make_c"}, default_renderer="C",
                     interfaces=("DIRECT", "SIM"), priority=10, is_available=has_c_compiler,
                     unavailable_reason=lambda: "no C compiler on PATH (CC, cc, gcc, clang): install one, e.g. apt install gcc",
                     description="example third-party backend: host C compiler + ctypes (SIM: simulated command queues)")]

# the command-queue rules (queue.py), asked only for this plugin's devices when one runs through core's HCQ pipeline (SIM)
core_pm_prep_program, core_pm_lower, core_pm_bufferize = hcq_rules("plugin_example.queue:pm_prep_program", "plugin_example.queue:pm_lower",
                                                                 "plugin_example.queue:pm_bufferize")
