"""The AMD plugin's hooks: declares the AMD device (LLVM renderer for gfx9/gfx11/gfx12, KFD and MOCK interfaces) and its HCQ rules."""
from __future__ import annotations
import importlib, importlib.util, os
from typing import Any
from core.device.hookspecs import hookimpl
from core.device.spec import DeviceSpec

__version__ = "0.1.0"
INTERFACES = ("KFD", "MOCK")

def _is_amd(device: str) -> bool: return device.split(":")[0] == "AMD"

def _has_runtime() -> bool: return importlib.util.find_spec("plugin_amd.device") is not None

def is_available() -> bool:
  """A GPU driver node exists (or the simulated driver is selected, AMD_KFD_SIM) and the runtime that drives it is installed
  (nothing is opened)."""
  return (os.path.exists("/dev/kfd") or bool(os.environ.get("AMD_KFD_SIM"))) and _has_runtime()

def make_llvm(arch: str | None = None) -> tuple[Any, Any]:
  from plugin_amd.renderer import AMDLLVMRenderer
  from plugin_amd.compiler import AMDCompiler
  return AMDLLVMRenderer(arch), AMDCompiler(arch)

def make_device(name: str, target: Any) -> Any:
  iface = getattr(target, "interface", None) or INTERFACES[0]
  if iface not in INTERFACES: raise ValueError(f"AMD has no interface {iface!r}; it offers {', '.join(INTERFACES)} (e.g. DEV=MOCK+AMD)")
  if iface == "MOCK":
    from plugin_amd.mock_device import make_mock_device
    return make_mock_device(name, target)
  if not _has_runtime():
    raise NotImplementedError(f"the AMD {iface} interface is not available here yet (plugin_amd.device is not written); "
                              f"compile-only works: DEV=NULL:AMD:gfx1100")
  return importlib.import_module("plugin_amd.device").make_device(name, target)

@hookimpl
def core_plugin_info() -> dict[str, Any]: return {"name": "amd", "version": __version__, "api": (2, 0)}

@hookimpl
def core_devices() -> list[DeviceSpec]:
  return [DeviceSpec("AMD", factory="plugin_amd:make_device", renderers={"LLVM": "plugin_amd:make_llvm"}, default_renderer="LLVM",
                     interfaces=INTERFACES, priority=60, is_available=is_available,
                     description="AMD GPUs (gfx90a, gfx942, gfx950, gfx1100, gfx1201): LLVM code objects, PM4/SDMA queues")]

def _interface(device: str) -> str:
  from core.device.registry import Device
  return Device.target(device).interface or INTERFACES[0]

def _is_mock(device: str) -> bool: return _interface(device) == "MOCK"

@hookimpl
def core_pm_prep_program(device: str) -> Any:
  if not _is_amd(device): return None
  # MOCK and the simulated KFD driver (AMD_KFD_SIM) run kernels in software: their prep also files a host build under the code
  if (iface := _interface(device)) == "MOCK" or (iface == "KFD" and os.environ.get("AMD_KFD_SIM")):
    from plugin_amd.mock_device import pm_prep_program as mock_prep
    return mock_prep
  from plugin_amd.prep import pm_prep_program
  return pm_prep_program

@hookimpl
def core_pm_lower(device: str) -> Any:
  if not _is_amd(device): return None
  if _is_mock(device):   # lower.py's rules, plus barriers that need no packet on the MOCK processors
    from plugin_amd.mock_device import pm_lower as mock_lower
    return mock_lower
  from plugin_amd.lower import pm_lower_amd
  return pm_lower_amd

@hookimpl
def core_pm_bufferize(device: str) -> Any:
  if not _is_amd(device): return None
  from plugin_amd.bufferize import pm_bufferize
  return pm_bufferize
