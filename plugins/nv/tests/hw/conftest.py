"""Hardware tests: each runs only where its interface has a GPU (NVK+NV: /dev/nvidiactl and /dev/nvidia0; CUDA+NV: libcuda.so.1
loads). Elsewhere it is skipped, and a skip is never a pass. CI (CI=true) has no NVIDIA GPU: there they are skipped like
anywhere else without one, on purpose, not failed (the simulated driver and the MOCK run the same op suite in CI). Marker
`hardware`: `python -m pytest tests -m hardware` selects them on a machine with an NVIDIA GPU. None has run yet."""
from __future__ import annotations
import os
import pytest
from core.testing.helpers import ci_run

def pytest_configure(config: pytest.Config) -> None:
  config.addinivalue_line("markers", "hardware: needs an NVIDIA GPU (the kernel driver's device nodes, or libcuda) (skipped elsewhere)")

def has_interface(iface: str) -> str | None:
  """None when `iface` can run here, else why not."""
  if iface == "NVK":
    from plugin_nv.nvk import gpu_present
    return None if gpu_present() else "no NVIDIA kernel driver here: /dev/nvidiactl or /dev/nvidia0 is missing"
  from plugin_nv.iface_cuda import find_libcuda
  return None if find_libcuda() is not None else "no libcuda.so.1 here (the CUDA driver library the NVIDIA driver installs)"

def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
  here = os.path.dirname(os.path.abspath(__file__))
  for it in items:
    if not str(it.fspath).startswith(here): continue
    it.add_marker(pytest.mark.hardware)
    iface = "CUDA" if "CUDA" in it.name else "NVK"
    if (why := has_interface(iface)) is not None:
      ci = " (CI has no NVIDIA GPU: skipped there too)" if ci_run() else ""
      it.add_marker(pytest.mark.skip(reason=why + ci))
