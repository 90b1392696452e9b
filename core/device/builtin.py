"""The devices core ships itself (not plugins): NULL (compile only), PYTHON (a slow reference interpreter) and DISK (files)."""
from __future__ import annotations
import importlib.util
from core.device.spec import DeviceSpec

def _numpy_present() -> bool: return importlib.util.find_spec("numpy") is not None

def builtin_specs() -> list[DeviceSpec]:
  return [
    # below every real backend: picked only when no plugin device is available
    DeviceSpec("PYTHON", factory="core.device.python:make_python_device", renderers={"PYTHON": "core.device.python:make_python_renderer"},
               default_renderer="PYTHON", priority=1, is_available=_numpy_present, description="reference interpreter in numpy, no compiler needed"),
    # never auto-selected: it runs nothing. Its renderer comes from another device (DEV=NULL:C, NULL:LLVM, NULL:AMD:gfx950)
    DeviceSpec("NULL", factory="core.device.null:make_null_device", priority=-1, description="compiles with a borrowed renderer, runs nothing"),
    # never auto-selected: a file as memory, one device per file (disk:/path/to/file); it copies bytes and runs no kernels
    DeviceSpec("DISK", factory="core.device.disk:make_disk_device", priority=-1, description="a file as tensor memory: disk:<path>"),
  ]
