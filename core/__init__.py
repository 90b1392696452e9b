"""core: a tensor framework whose hardware backends are plugins. The public surface, loaded lazily."""
from __future__ import annotations
from typing import Any

__version__ = "0.2.0"
PLUGIN_API = (2, 0)  # (major, minor): plugins built for another major are refused

_lazy = {
  "Tensor": ("core.tensor.tensor", "Tensor"),
  "dtypes": ("core.ir.dtype", "dtypes"),
  "DType": ("core.ir.dtype", "DType"),
  "Device": ("core.device.registry", "Device"),
  "Context": ("core.helpers", "Context"),
  "getenv": ("core.helpers", "getenv"),
  "Variable": ("core.ir.ops", "Variable"),
  "UOp": ("core.ir.ops", "UOp"),
  "Ops": ("core.ir.ops", "Ops"),
  "Jit": ("core.tensor.jit", "Jit"),
  "TinyJit": ("core.tensor.jit", "Jit"),
  "GlobalCounters": ("core.device.counters", "GlobalCounters"),
  "nn": ("core.tensor.nn", None),
}

def __getattr__(name: str) -> Any:
  # PEP 562: `import core` stays cheap; the Tensor stack loads on first use
  if name not in _lazy: raise AttributeError(f"module 'core' has no attribute {name!r}")
  import importlib
  mod, attr = _lazy[name]
  m = importlib.import_module(mod)
  val = m if attr is None else getattr(m, attr)
  globals()[name] = val
  return val

def __dir__() -> list[str]: return sorted(list(globals()) + list(_lazy))

__all__ = ["Tensor", "dtypes", "Device", "Context", "Variable", "Jit", "TinyJit", "GlobalCounters", "PLUGIN_API"]
