"""The WEBGPU plugin's hooks: declares the WEBGPU device (WGSL on the wgpu package's WebGPU, e.g. Mesa's lavapipe software GPU)."""
from __future__ import annotations
from typing import Any
from core.device.hookspecs import hookimpl, hcq_rules
from core.device.spec import DeviceSpec

__version__ = "0.1.0"
INTERFACES = ("HCQ", "DIRECT")

def _available() -> bool:
  from plugin_webgpu.gpu import unavailable_reason
  return unavailable_reason() is None

# the one place the WGSL renderer is built for compiling alone: DEV=NULL:WEBGPU borrows it (the validator still needs an adapter)
def make_wgsl(arch: str | None = None) -> tuple[Any, Any]:
  from plugin_webgpu.gpu import gpu
  from plugin_webgpu.compiler import WGSLCompiler
  from plugin_webgpu.runtime import make_renderer
  return make_renderer(gpu()), WGSLCompiler()


# the HCQ rules (plugin_webgpu.queue) are imported only when core's HCQ pipeline asks for them
core_pm_prep_program, core_pm_lower, core_pm_bufferize = hcq_rules("plugin_webgpu.queue:pm_prep_program", "plugin_webgpu.queue:pm_lower",
                                                                 "plugin_webgpu.queue:pm_bufferize")

@hookimpl
def core_plugin_info() -> dict[str, Any]: return {"name": "webgpu", "version": __version__, "api": (2, 0)}

def _why_unavailable() -> str:
  from plugin_webgpu.gpu import unavailable_reason
  return unavailable_reason() or "its probe says it may open here"

@hookimpl
def core_devices() -> list[DeviceSpec]:
  # the doctor says why the device can't open here (a file check, no driver opened) when it asks: choosing the default device
  # calls this hook at every start without DEV, and the probe (importing gpu.py, looking for wgpu and a Vulkan driver) cost ~10 ms
  return [DeviceSpec("WEBGPU", factory="plugin_webgpu.runtime:make_device", renderers={"WGSL": "plugin_webgpu:make_wgsl"},
                     default_renderer="WGSL", interfaces=INTERFACES, priority=30, is_available=_available, unavailable_reason=_why_unavailable,
                     description="WebGPU through the wgpu package (WGSL compute shaders; needs wgpu and a Vulkan driver: apt install "
                                 "mesa-vulkan-drivers libvulkan1)")]
