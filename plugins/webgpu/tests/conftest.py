"""Makes plugin_webgpu importable from a source checkout; `webgpu` is the DEV=WEBGPU device, or a skip (a failure under
CI=true, where the job installs lavapipe) when this machine has no WebGPU adapter."""
import importlib.util, pathlib, sys
from typing import Any
import pytest
if importlib.util.find_spec("plugin_webgpu") is None: sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
root = pathlib.Path(__file__).resolve().parents[3]
if importlib.util.find_spec("core") is None: sys.path.insert(0, str(root))
from core.testing.helpers import missing_tool  # noqa: E402  (after the path above)

@pytest.fixture(scope="session")
def webgpu() -> Any:
  from plugin_webgpu.gpu import NoAdapter, gpu
  try: gpu()
  except NoAdapter as e:
    missing_tool(f"no WebGPU adapter here (the job installs mesa-vulkan-drivers): {e}")
  from core.device.registry import Device
  return Device["WEBGPU"]
