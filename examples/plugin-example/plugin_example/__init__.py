"""plugin-example's hooks: declares the EXAMPLE device. Cheap to import; the renderer, compiler and runtime load on first use."""
from __future__ import annotations
import os, shutil
from typing import TYPE_CHECKING, Any
from core.device.hookspecs import hookimpl
from core.device.spec import DeviceSpec

if TYPE_CHECKING:
  from core.ir.pattern import PatternMatcher

__version__ = "0.1.0"

def has_c_compiler() -> bool:
  # the availability probe must be cheap: look on PATH, compile nothing
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
@hookimpl
def core_pm_prep_program(device: str) -> PatternMatcher:
  from plugin_example.queue import pm_prep_program
  return pm_prep_program

@hookimpl
def core_pm_lower(device: str) -> PatternMatcher:
  from plugin_example.queue import pm_lower
  return pm_lower

@hookimpl
def core_pm_bufferize(device: str) -> PatternMatcher:
  from plugin_example.queue import pm_bufferize
  return pm_bufferize
