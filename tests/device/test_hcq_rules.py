"""hcq_rules: a plugin's three HCQ rule hooks from lazy references, imported only when core's pipeline first asks."""
from __future__ import annotations
import dataclasses, sys, types
from typing import Any
from core.device.hookspecs import hookimpl, hcq_rules
from core.device.plugins import PluginManager
from core.device.spec import DeviceSpec

@dataclasses.dataclass
class _EntryPoint:
  name: str
  value: str
  group: str = "core.plugins"

@dataclasses.dataclass
class _Dist:
  name: str
  module: str
  version: str = "1.0"
  @property
  def metadata(self) -> dict[str, str]: return {"Name": self.name}
  @property
  def entry_points(self) -> list[_EntryPoint]: return [_EntryPoint("LAZYQ", self.module)]

def test_rules_are_imported_on_first_ask_and_come_from_the_declaring_plugin(tmp_path, monkeypatch) -> None:
  import core
  (tmp_path / "lazy_rules_mod.py").write_text("pm_prep_program, pm_lower, pm_bufferize = 'PREP', 'LOWER', 'BUFFERIZE'\n")
  monkeypatch.syspath_prepend(str(tmp_path))
  hooks = types.ModuleType("lazy_rules_hooks")
  @hookimpl
  def core_plugin_info() -> dict[str, Any]: return {"name": "lazyq", "version": "1.0", "api": core.PLUGIN_API}
  @hookimpl
  def core_devices() -> list[DeviceSpec]:
    return [DeviceSpec("LAZYQ", factory="core.device.python:make_python_device", renderers={"PYTHON": "core.device.python:make_python_renderer"},
                       default_renderer="PYTHON", priority=-1)]
  hooks.core_plugin_info, hooks.core_devices = core_plugin_info, core_devices  # type: ignore[attr-defined]
  (hooks.core_pm_prep_program, hooks.core_pm_lower,  # type: ignore[attr-defined]
   hooks.core_pm_bufferize) = hcq_rules("lazy_rules_mod:pm_prep_program", "lazy_rules_mod:pm_lower", "lazy_rules_mod:pm_bufferize")
  monkeypatch.setitem(sys.modules, "lazy_rules_hooks", hooks)
  monkeypatch.delitem(sys.modules, "lazy_rules_mod", raising=False)
  pm = PluginManager(distributions=lambda: [_Dist("lazyq", "lazy_rules_hooks")], disabled="")
  assert pm.spec("LAZYQ").name == "LAZYQ"
  assert "lazy_rules_mod" not in sys.modules   # declaring devices imported no rules
  assert (pm.pm_prep_program("LAZYQ"), pm.pm_lower("LAZYQ:1"), pm.pm_bufferize("LAZYQ")) == ("PREP", "LOWER", "BUFFERIZE")
  assert "lazy_rules_mod" in sys.modules
