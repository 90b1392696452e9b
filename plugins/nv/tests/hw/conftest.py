"""Hardware tests: each runs only where its interface has a GPU (NVK+NV: /dev/nvidiactl and /dev/nvidia0; CUDA+NV: libcuda.so.1
loads). Elsewhere it is skipped, and a skip is never a pass. CI (CI=true) has no NVIDIA GPU: there they are skipped like
anywhere else without one, on purpose, not failed (the simulated driver and the MOCK run the same op suite in CI). Marker
`hardware`: `python -m pytest tests -m hardware` selects them on a machine with an NVIDIA GPU. None has run yet."""
from __future__ import annotations
from core.testing.helpers import hardware_tests

def has_interface(iface: str) -> str | None:
  """None when `iface` can run here, else why not."""
  if iface == "NVK":
    from plugin_nv.nvk import gpu_present
    return None if gpu_present() else "no NVIDIA kernel driver here: /dev/nvidiactl or /dev/nvidia0 is missing"
  from plugin_nv.iface_cuda import find_libcuda
  return None if find_libcuda() is not None else "no libcuda.so.1 here (the CUDA driver library the NVIDIA driver installs)"

pytest_configure, pytest_collection_modifyitems = hardware_tests(
  __file__, "an NVIDIA GPU (the kernel driver's device nodes, or libcuda)", lambda it: has_interface("CUDA" if "CUDA" in it.name else "NVK"))
