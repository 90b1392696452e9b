"""Makes plugin_webgpu importable from a source checkout; `webgpu` is the DEV=WEBGPU device, or a skip (a failure under
CI=true, where the job installs lavapipe) when this machine has no WebGPU adapter."""
import importlib.util, os, pathlib, sys
from typing import Any
import pytest
if importlib.util.find_spec("plugin_webgpu") is None: sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
root = pathlib.Path(__file__).resolve().parents[3]
if importlib.util.find_spec("core") is None: sys.path.insert(0, str(root))

@pytest.fixture(scope="session")
def webgpu() -> Any:
  from plugin_webgpu.gpu import NoAdapter, gpu
  try: gpu()
  except NoAdapter as e:
    if os.environ.get("CI"): pytest.fail(f"CI installs mesa-vulkan-drivers, yet there is no WebGPU adapter: {e}")
    pytest.skip(f"no WebGPU adapter here: {e}")
  from core.device.registry import Device
  return Device["WEBGPU"]
