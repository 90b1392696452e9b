"""The QCOM plugin's registration: the spec declares the CL renderer and the KGSL, CL and MOCK interfaces; the factory opens the
interface DEV names and refuses an unknown one by name; without a KGSL node QCOM is never auto-selected."""
from __future__ import annotations
from typing import Any
import pytest
from core.device.spec import resolve
from core.device.target import Target
from core.testing.plugin_checks import plugin_manager, check_registration

@pytest.fixture
def pm() -> Any: return plugin_manager("QCOM", "plugin-qcom")

def test_entry_point_spec_and_hooks(pm: Any) -> None:
  spec = check_registration(pm, "QCOM", "plugin-qcom", "plugin_qcom", ("KGSL", "CL", "MOCK"), ["CL"])
  assert spec.default_renderer == "CL"

def test_availability_follows_the_kgsl_node(pm: Any, monkeypatch: Any) -> None:
  import os
  spec = pm.spec("QCOM")
  monkeypatch.setattr(os.path, "exists", lambda p: p == "/dev/kgsl-3d0")
  assert spec.available() is True
  monkeypatch.setattr(os.path, "exists", lambda p: False)
  assert spec.available() is False

def test_unknown_interface_and_renderer_are_refused(pm: Any) -> None:
  factory = resolve(pm.spec("QCOM").factory)
  with pytest.raises(ValueError, match="QCOM has no interface 'PCI'; it offers KGSL, CL, MOCK"): factory("QCOM", Target(interface="PCI", device="QCOM"))
  with pytest.raises(ValueError, match="QCOM has no renderer 'PTX'"): factory("QCOM", Target(interface="CL", device="QCOM", renderer="PTX"))

def test_cl_interface_opens_on_the_opencl_driver(pm: Any, clctx: Any) -> None:
  from plugin_qcom.renderer import OpenCLRenderer
  from plugin_qcom.compiler import CLCompiler
  dev = resolve(pm.spec("QCOM").factory)("QCOM", Target(interface="CL", device="QCOM"))
  assert isinstance(dev.renderer, OpenCLRenderer) and isinstance(dev.compiler, CLCompiler) and dev.hcq is None
  # the renderer follows the driver: half is native exactly when it reports cl_khr_fp16
  assert dev.renderer.caps.fp16 == ("cl_khr_fp16" in clctx.info.extensions)
