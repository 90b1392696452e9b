"""The AMD plugin's registration: core finds it, its spec declares the LLVM renderer and the KFD/MOCK interfaces, the NULL
device borrows its renderer per arch, and the factory opens the interface DEV names (an unknown one is refused by name)."""
from __future__ import annotations
import os
from typing import Any
import pytest
from core.device.spec import resolve
from core.device.target import Target
from core.testing.plugin_checks import plugin_manager, check_registration

@pytest.fixture
def pm() -> Any: return plugin_manager("AMD", "plugin-amd")

def test_entry_point_spec_and_hooks(pm: Any) -> None:
  spec = check_registration(pm, "AMD", "plugin-amd", "plugin_amd", ("KFD", "MOCK"), ["LLVM"])
  assert spec.default_renderer == "LLVM" and spec.priority == 60

def test_renderer_per_arch(pm: Any) -> None:
  from plugin_amd.renderer import AMDLLVMRenderer
  from plugin_amd.compiler import AMDCompiler
  spec = pm.spec("AMD")
  r, c = spec.make_renderer(None, None)
  assert isinstance(r, AMDLLVMRenderer) and isinstance(c, AMDCompiler) and r.arch == c.info.name == "gfx1100"
  r, c = spec.make_renderer("LLVM", "gfx942")
  assert r.arch == "gfx942" and "gfx942" in c.cachekey and c.cachekey != spec.make_renderer("LLVM", "gfx950")[1].cachekey
  with pytest.raises(ValueError, match="AMD arch 'gfx1030' is not supported"): spec.make_renderer("LLVM", "gfx1030")

def test_null_device_borrows_the_renderer(pm: Any) -> None:
  from core.device.null import make_null_device
  from core.device.plugins import set_plugins
  pm.spec("AMD")   # discovery first: borrowed_renderer_spec reads the device table it fills
  set_plugins(pm)
  try:
    dev = make_null_device("NULL", Target(device="NULL", renderer="AMD", arch="gfx1201"))
    assert dev.renderer.arch == "gfx1201" and dev.compiler.info.wave == 32
  finally: set_plugins(None)

def test_availability_and_factory(pm: Any, monkeypatch: Any) -> None:
  spec = pm.spec("AMD")
  monkeypatch.delenv("AMD_KFD_SIM", raising=False)
  assert spec.available() == os.path.exists("/dev/kfd")
  monkeypatch.setenv("AMD_KFD_SIM", "gfx1100")
  assert spec.available()
  assert spec.factory == "plugin_amd.runtime:make_device"
  with pytest.raises(ValueError, match="AMD has no interface 'PCI'; it offers KFD, MOCK"): resolve(spec.factory)("AMD", Target(interface="PCI", device="AMD"))
