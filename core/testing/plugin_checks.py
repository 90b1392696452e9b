"""Checks a plugin runs in its own tests: core finds it through its entry point, its hooks load, its spec is as declared."""
from __future__ import annotations
from typing import Any
from core.testing.helpers import missing_tool

def plugin_manager(device: str, dist: str) -> Any:
  """A fresh PluginManager, or a skip saying how to install the plugin when its entry point is missing (a failure under
  CI=true: the plugin's job installs it, so there a missing entry point is a broken install)."""
  import importlib_metadata
  from core.device.plugins import PluginManager
  if not any(ep.name == device for ep in importlib_metadata.entry_points(group="core.plugins")):
    msg = f"{dist} is not installed in this environment (pip install it; .ci/run does)"
    missing_tool(msg)
  return PluginManager()

def check_registration(pm: Any, device: str, dist: str, module: str, interfaces: tuple[str, ...], renderers: list[str],
                       version: str = "0.1.0", api: tuple[int, int] = (2, 0)) -> Any:
  """The entry point names `module` in `dist`, the hooks load cleanly (check_pending runs), the spec declares what it
  should. Returns the DeviceSpec."""
  rec = next(r for r in pm.records() if device in r.devices)
  assert rec.dist == dist and rec.value == module
  spec = pm.spec(device)   # registers the module and runs check_pending()
  assert spec.name == device and spec.interfaces == interfaces and list(spec.renderers) == renderers
  rec = next(r for r in pm.records() if device in r.devices)
  assert rec.error is None and rec.info == {"name": dist.removeprefix("plugin-"), "version": version, "api": api}
  return spec
