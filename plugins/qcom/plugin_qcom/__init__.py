"""The QCOM plugin's hooks: declares the QCOM device, which is not implemented yet (never available, opening it says so)."""
from __future__ import annotations
from typing import Any
from core.device.hookspecs import hookimpl
from core.device.spec import DeviceSpec, placeholder_spec

__version__ = "0.1.0"

@hookimpl
def core_plugin_info() -> dict[str, Any]: return {"name": "qcom", "version": __version__, "api": (2, 0)}

@hookimpl
def core_devices() -> list[DeviceSpec]:
  return [placeholder_spec("QCOM", interfaces=('KGSL', 'MOCK'), renderers=('CL',), priority=40)]
