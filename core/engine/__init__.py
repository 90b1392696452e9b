"""Run schedules: allocate, copy, launch; the Jit; DEBUG output."""
import functools, types

@functools.cache
def realize_module() -> types.ModuleType:
  """core.engine.realize, imported on first use: how the tensor's modules reach the engine (importing it when they load would
  cycle through the tensor, and `import core` stays light: tests/device/test_startup.py)."""
  import core.engine.realize as realize
  return realize
