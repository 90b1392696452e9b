"""The AMD placeholder plugin: loads cleanly, is never auto-selected, and opening it says "not implemented yet"."""
from __future__ import annotations
import importlib_metadata, pytest
from core.device.plugins import PluginManager

def _installed() -> bool:
  return any(ep.name == "AMD" for ep in importlib_metadata.entry_points(group="core.plugins"))

@pytest.fixture
def pm() -> PluginManager:
  if not _installed(): pytest.skip("plugin-amd is not installed in this environment (.ci/run installs it: pip install ./plugins/amd)")
  return PluginManager()

def test_entry_point_declares_device(pm: PluginManager) -> None:
  rec = next(r for r in pm.records() if "AMD" in r.devices)
  assert rec.dist == "plugin-amd" and rec.value == "plugin_amd"

def test_spec_loads_and_hooks_are_valid(pm: PluginManager) -> None:
  spec = pm.spec("AMD")   # registers the module and runs check_pending()
  assert spec.name == "AMD" and spec.interfaces == ('KFD', 'PCI', 'MOCK') and list(spec.renderers) == ['LLVM', 'HIP']
  assert spec.available() is False
  rec = next(r for r in pm.records() if "AMD" in r.devices)
  assert rec.error is None and rec.info == {"name": "amd", "version": "0.1.0", "api": (1, 0)}

def test_opening_says_not_implemented(pm: PluginManager) -> None:
  from core.device.target import Target
  spec = pm.spec("AMD")
  with pytest.raises(NotImplementedError, match="not implemented yet"): spec.factory("AMD", Target(device="AMD"))
  with pytest.raises(NotImplementedError, match="not implemented yet"): spec.make_renderer(None)

def test_never_auto_selected(pm: PluginManager) -> None:
  assert pm.best_device() != "AMD"
