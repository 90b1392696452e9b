"""The plugin contract: every hook a backend plugin may implement, declared once (pluggy project "core")."""
from __future__ import annotations
from typing import TYPE_CHECKING, Any, Callable
import pluggy

if TYPE_CHECKING:
  from core.device.spec import DeviceSpec
  from core.ir.pattern import PatternMatcher

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
def core_devices() -> list[DeviceSpec]:  # type: ignore[empty-body]  # a hookspec declares; plugins implement
  """Called once per plugin after core_plugin_info, when one of its devices is first asked for (or the doctor or
  auto-selection lists devices). Returns a list of core.device.spec.DeviceSpec, one per device name the plugin's
  entry points declare. Must be cheap: no driver is opened and nothing heavy imported (the spec's factory does that).
  None or [] means the plugin offers no device."""

# The three HCQ rule hooks are asked only of the plugin that declared the device (core.device.plugins.PluginManager), so an
# implementation never needs to check the device name. Each returns a PatternMatcher, or None when the plugin has no HCQ side.

@hookspec
def core_pm_prep_program(device: str) -> PatternMatcher | None:
  """Called by the HCQ pipeline's prep stage for `device` (a canonical name of this plugin's device, e.g. "AMD:1").
  Returns rules, ctx = the device's HCQDevice, that rewrite each compiled PROGRAM into the loadable program: arg a
  core.hcq.queue_ir.ProgramData (kernarg layout), BINARY the image bytes. None: the device runs no HCQ schedules."""

@hookspec
def core_pm_lower(device: str) -> PatternMatcher | None:
  """Called by the HCQ pipeline's encode stage for `device`. Returns rules, ctx = core.device.hcq.EncodeCtx, that turn
  each abstract queue command (LAUNCH, COPY, WAIT, SIGNAL, BARRIER, TIMESTAMP) into INS: the device's command words
  plus patches. None: the device runs no HCQ schedules."""

@hookspec
def core_pm_bufferize(device: str) -> PatternMatcher | None:
  """Called by the HCQ pipeline's bufferize stage for `device`. Returns rules, ctx = the device's HCQDevice, mapping
  tagged placeholder BUFFERs (rings, doorbells, signals, scratch) to real BUFFERs (tag None) the device owns. None: core
  allocates the packed kinds (programs, kernargs, command buffers) itself and any other placeholder is an error."""

HOOK_NAMES = ("core_plugin_info", "core_devices", "core_pm_prep_program", "core_pm_lower", "core_pm_bufferize")

def hcq_rules(prep: str, lower: str, bufferize: str) -> tuple[Callable[[str], Any], Callable[[str], Any], Callable[[str], Any]]:
  """A plugin's three HCQ rule hooks from lazy references ("package.module:attribute"), each imported only when the pipeline
  first asks for it (a plugin whose device never runs an HCQ schedule never imports its rules). In the plugin's module:
  `core_pm_prep_program, core_pm_lower, core_pm_bufferize = hcq_rules("pkg.prep:pm_prep_program", "pkg.lower:pm_lower", ...)`;
  a plugin whose rules differ per device name implements the hooks itself."""
  from core.device.spec import resolve
  def hook(ref: str) -> Callable[[str], Any]:
    def rules(device: str) -> Any: return resolve(ref)   # pluggy passes the hookspec's arguments by name: `device` is required
    rules.__qualname__ = rules.__name__ = f"rules {ref}"
    return hookimpl(rules)
  return hook(prep), hook(lower), hook(bufferize)

