"""The plugin contract: every hook a backend plugin may implement, declared once (pluggy project "core")."""
from __future__ import annotations
from typing import Any
import pluggy

PROJECT = "core"
ENTRY_POINT_GROUP = "core.plugins"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

@hookspec
def core_plugin_info() -> dict[str, Any]:  # type: ignore[empty-body]  # a hookspec declares; plugins implement
  """Called once, right after the plugin module is imported and before anything else is asked of it.
  Returns {"name": str, "version": str, "api": (major, minor)}: "api" is the core.PLUGIN_API the plugin was built
  against; another major is refused. Every plugin must implement it; None (not implemented) is a load error."""

@hookspec
def core_devices() -> list[Any]:  # type: ignore[empty-body]  # a hookspec declares; plugins implement
  """Called once per plugin after core_plugin_info, when one of its devices is first asked for (or the doctor or
  auto-selection lists devices). Returns a list of core.device.spec.DeviceSpec, one per device name the plugin's
  entry points declare. Must be cheap: no driver is opened and nothing heavy imported (the spec's factory does that).
  None or [] means the plugin offers no device."""

@hookspec(firstresult=True)
def core_pm_prep_program(device: str) -> Any:
  """Called by the HCQ pipeline when it prepares a compiled PROGRAM for `device` (a canonical name, e.g. "AMD:1").
  Returns a PatternMatcher that rewrites the PROGRAM into (program data, loadable image bytes). None: this plugin does
  not own `device` (the first non-None answer wins)."""

@hookspec(firstresult=True)
def core_pm_lower(device: str) -> Any:
  """Called by the HCQ pipeline's encode stage for `device`. Returns a PatternMatcher that turns abstract queue
  commands (PROGRAM, COPY, WAIT, signal STORE, BARRIER, timestamp) into the device's command words. None: not this
  plugin's device (the first non-None answer wins)."""

@hookspec(firstresult=True)
def core_pm_bufferize(device: str) -> Any:
  """Called by the HCQ pipeline's bufferize stage for `device`. Returns a PatternMatcher mapping tagged placeholder
  buffers (rings, doorbells, signals, scratch) to real buffers of the device. None: not this plugin's device."""

@hookspec
def core_rewrite_rules(stage: str, device: str) -> Any:
  """Called when core runs the named stage (e.g. "codegen.decompose") for `device`. Returns an extra PatternMatcher
  core adds to that stage; core composes the answers of all loaded plugins. None: nothing to add."""

HOOK_NAMES = ("core_plugin_info", "core_devices", "core_pm_prep_program", "core_pm_lower", "core_pm_bufferize", "core_rewrite_rules")
