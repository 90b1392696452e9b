"""The plugin manager's guards: a device whose factory does not resolve is never auto-selected and shows as broken in the
doctor; a third-party plugin can't take a name that belongs to core or to an official plugin."""
from __future__ import annotations
import dataclasses, sys, types
from typing import Any, Iterator
import pytest
from core.device.__main__ import report
from core.device.plugins import PluginError, PluginManager

@dataclasses.dataclass
class FakeEntryPoint:
  name: str
  value: str
  group: str = "core.plugins"

@dataclasses.dataclass
class FakeDist:
  """What discovery reads of an installed distribution: its name, version and entry points."""
  name: str
  devices: list[str]
  module: str
  version: str = "1.0"
  @property
  def metadata(self) -> dict[str, str]: return {"Name": self.name}
  @property
  def entry_points(self) -> list[FakeEntryPoint]: return [FakeEntryPoint(d, self.module) for d in self.devices]

def _hook_module(name: str, devices: list[str], priority: int, factory: str) -> str:
  """A plugin hook module registered in sys.modules under `name`, declaring `devices` that run on the PYTHON interpreter."""
  from core.device.hookspecs import hookimpl
  from core.device.spec import DeviceSpec
  import core
  mod = types.ModuleType(name)
  @hookimpl
  def core_plugin_info() -> dict[str, Any]: return {"name": name, "version": "1.0", "api": core.PLUGIN_API}
  @hookimpl
  def core_devices() -> list[DeviceSpec]:
    return [DeviceSpec(d, factory=factory, renderers={"PYTHON": "core.device.python:make_python_renderer"}, default_renderer="PYTHON",
                       priority=priority) for d in devices]
  mod.core_plugin_info, mod.core_devices = core_plugin_info, core_devices  # type: ignore[attr-defined]
  sys.modules[name] = mod
  return name

@pytest.fixture
def plugins() -> Iterator[Any]:
  made: list[str] = []
  def manager(*dists: tuple[str, list[str], int, str], disabled: str = "") -> PluginManager:
    fakes = []
    for dist, devices, priority, factory in dists:
      mod = _hook_module(f"fake_guard_{dist.replace('-', '_')}", devices, priority, factory)
      made.append(mod)
      fakes.append(FakeDist(dist, devices, mod))
    return PluginManager(distributions=lambda: fakes, disabled=disabled)
  yield manager
  for m in made: sys.modules.pop(m, None)

GOOD = "core.device.python:make_python_device"

def test_a_device_whose_factory_does_not_resolve_is_never_picked_and_shows_broken(plugins) -> None:
  pm = plugins(("plugin-high", ["HIGH"], 9000, "no_such_module_for_core_tests:make"), ("plugin-low", ["LOW"], 10, GOOD))
  assert pm.best_device() == "LOW"
  out = report(pm)
  high = next(ln for ln in out.splitlines() if ln.strip().startswith("HIGH"))
  assert "broken" in high and "<- default" not in high
  assert "no_such_module_for_core_tests" in out
  assert "<- default" in next(ln for ln in out.splitlines() if ln.strip().startswith("LOW"))

def test_available_devices_leave_out_broken_ones(plugins, monkeypatch) -> None:
  from core.device import registry
  pm = plugins(("plugin-high", ["HIGH"], 9000, "no_such_module_for_core_tests:make"), ("plugin-low", ["LOW"], 10, GOOD))
  monkeypatch.setattr(registry, "get_plugins", lambda: pm)
  assert list(registry.Device.get_available_devices()) == ["LOW", "PYTHON"]

def test_only_broken_devices_leave_the_interpreter_as_default(plugins) -> None:
  pm = plugins(("plugin-high", ["HIGH"], 9000, "no_such_module_for_core_tests:make"))
  assert pm.best_device() == "PYTHON"

@pytest.mark.parametrize("name", ["PYTHON", "NULL", "DISK"])
def test_a_plugin_claiming_a_builtin_name_is_refused_and_the_builtin_survives(plugins, name: str) -> None:
  pm = plugins(("evil-backend", [name, "EVIL"], 9000, GOOD))
  with pytest.raises(PluginError) as e: pm.spec("EVIL")
  msg = str(e.value)
  assert f"claims the device name(s) {name} (core)" in msg and "CORE_DISABLED_PLUGINS=evil-backend" in msg
  if name != "DISK": assert pm.spec(name) is next(s for s in pm.records()[0].builtin_specs or [] if s.name == name)   # core's own spec
  assert not pm.conflicts and pm.best_device() == "PYTHON"
  out = report(pm)
  assert "evil-backend" in out and "ERROR" in out and "CORE_DISABLED_PLUGINS=evil-backend" in out
  # the suggested fix works: disabled, the plugin is skipped quietly
  assert plugins(("evil-backend", [name, "EVIL"], 9000, GOOD), disabled="evil-backend").best_device() == "PYTHON"

def test_a_plugin_claiming_an_official_plugins_name_is_refused(plugins) -> None:
  pm = plugins(("not-the-cpu-plugin", ["CPU"], 9000, GOOD), ("plugin-cpu", ["CPU"], 100, GOOD))
  assert pm.spec("CPU") and pm.by_device["CPU"].dist == "plugin-cpu" and not pm.conflicts
  assert pm.best_device() == "CPU"
  bad = next(r for r in pm.records() if r.dist == "not-the-cpu-plugin")
  assert bad.error is not None and "CPU (plugin-cpu)" in str(bad.error) and "CORE_DISABLED_PLUGINS=not-the-cpu-plugin" in str(bad.error)
  # without the official plugin installed, asking for CPU explains the refusal instead of using the impostor
  alone = plugins(("not-the-cpu-plugin", ["CPU"], 9000, GOOD))
  with pytest.raises(PluginError, match="CORE_DISABLED_PLUGINS=not-the-cpu-plugin"): alone.spec("CPU")
  assert alone.best_device() == "PYTHON"

def test_the_official_plugin_may_use_its_own_name(plugins) -> None:
  pm = plugins(("plugin_cpu", ["CPU"], 100, GOOD))   # the normalized distribution name matches plugin-cpu
  assert pm.spec("CPU").name == "CPU" and pm.best_device() == "CPU"
