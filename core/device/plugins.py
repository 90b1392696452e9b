"""The plugin manager: finds backends through entry points, imports each only when needed, keeps its failures to itself."""
from __future__ import annotations
import dataclasses, importlib, os, threading
from typing import Any, Callable, Iterable
from core.device.spec import DeviceSpec, resolve
from core.device.target import Target
from core.helpers import mutable_record

# devices whose plugins live in this repo, so an error can say exactly what to install
OFFICIAL_PLUGINS = {"CPU": "cpu", "AMD": "amd", "NV": "nv", "QCOM": "qcom", "METAL": "metal", "WEBGPU": "webgpu"}
# device names core keeps for itself besides its built-in specs' (DISK is the tensor layer's file-backed storage)
RESERVED_NAMES = frozenset({"DISK"})

class PluginError(RuntimeError):
  """A plugin or device could not be used; the message names the plugin, the cause and a fix."""

class UnknownDeviceError(PluginError, LookupError):
  """DEV (or Device[...]) names a device, renderer or interface nobody provides."""

def _name_version(dist: Any) -> tuple[str | None, str | None]:
  """A distribution's Name and Version from its METADATA headers: `dist.metadata` runs the whole file through the email
  parser, whose import costs more than the rest of discovery."""
  from core.device.entry_points import FoundDistribution, metadata_head
  if isinstance(dist, FoundDistribution): return dist.name, dist.version
  read = getattr(dist, "read_text", None)
  head = metadata_head((read("METADATA") or read("PKG-INFO") or "") if read is not None else "")
  if "Name" not in head or "Version" not in head: return dist.metadata["Name"], dist.version
  return head["Name"], head["Version"]

def _norm(dist: str) -> str:
  """A distribution name as PEP 503 compares them: lower case, each run of '-', '_' and '.' one '-'. By str methods: the regular
  expression's compile was ~0.4M instructions of every start."""
  out = dist.lower().replace("_", "-").replace(".", "-")
  while "--" in out: out = out.replace("--", "-")
  return out

def _short(dist: str) -> str:
  """The name a user gives CORE_DISABLED_PLUGINS for a distribution: its normalized name without "plugin-"."""
  return _norm(dist).removeprefix("plugin-")
def did_you_mean(name: str, choices: Iterable[str], n: int = 3) -> str:
  # compared case-insensitively, suggested as spelled by their owner; difflib is imported here, on the error path only
  import difflib
  by_upper = {c.upper(): c for c in choices}
  close = difflib.get_close_matches(name.upper(), list(by_upper), n=n, cutoff=0.5)
  return f" Did you mean {' or '.join(by_upper[c] for c in close)}?" if close else ""

@mutable_record
class PluginRecord:
  """One plugin as discovered: what its metadata says, and (once loaded) its module, specs or load error."""
  dist: str                   # distribution name, "core" for the built-in devices
  version: str
  value: str                  # the entry point's object reference, normally the hook module ("plugin_cpu")
  devices: list[str]          # device names its entry points declare
  builtin_specs: list[DeviceSpec] | None = None
  disabled: bool = False
  module: Any = None
  info: dict[str, Any] | None = None
  specs: dict[str, DeviceSpec] = dataclasses.field(default_factory=dict)
  error: PluginError | None = None

  @property
  def loaded(self) -> bool: return bool(self.specs) or self.module is not None
  @property
  def api(self) -> str: return "-" if self.info is None else ".".join(map(str, self.info.get("api", ("?",))))
  def label(self) -> str: return f"{self.dist} {self.version}"

class PluginManager:
  """Discovery reads metadata only; `spec(name)` imports the plugin that declares `name`. Thread-safe; one per process."""
  def __init__(self, distributions: Callable[[], Iterable[Any]] | None = None, disabled: str | None = None,
               builtins: list[DeviceSpec] | None = None):
    from core.device import hookspecs
    self._distributions = distributions
    raw = os.getenv("CORE_DISABLED_PLUGINS", "") if disabled is None else disabled
    self.disabled_raw, self.disabled = raw, {s.strip().lower() for s in raw.split(",") if s.strip()}
    self.pm = _hook_manager(hookspecs.PROJECT)
    self.pm.add_hookspecs(hookspecs)
    self._builtins = builtins
    self._lock = threading.RLock()
    self._records: list[PluginRecord] | None = None
    self.by_device: dict[str, PluginRecord] = {}
    self.conflicts: dict[str, list[PluginRecord]] = {}
    self.disabled_devices: dict[str, PluginRecord] = {}

  # *** discovery: metadata only ***

  def records(self) -> list[PluginRecord]:
    with self._lock:
      if self._records is None: self._records = self._discover()
      return self._records

  def _iter_dists(self) -> Iterable[Any]:
    if self._distributions is not None: return self._distributions()
    from core.device.entry_points import distributions_with_group
    from core.device.hookspecs import ENTRY_POINT_GROUP
    if (found := distributions_with_group(ENTRY_POINT_GROUP)) is not None: return found
    try: import importlib_metadata as md
    except ImportError: import importlib.metadata as md  # type: ignore[no-redef]
    return md.distributions()

  def _discover(self) -> list[PluginRecord]:
    from core.device import hookspecs
    if self._builtins is None:
      from core.device.builtin import builtin_specs
      self._builtins = builtin_specs()
    import core
    recs = [PluginRecord("core", core.__version__, "core.device.builtin", [s.name for s in self._builtins], builtin_specs=self._builtins)]
    seen: set[str] = set()
    by_key: dict[tuple[str, str], PluginRecord] = {}
    for dist in self._iter_dists():
      # entry points first: most distributions have none of ours, and reading a name or version parses the whole METADATA
      try:
        if not (eps := [ep for ep in dist.entry_points if ep.group == hookspecs.ENTRY_POINT_GROUP]): continue
        name, version = _name_version(dist)
      except Exception: continue   # unreadable metadata of some unrelated distribution must not break core
      if name is None: continue
      # the same distribution twice on sys.path (a stale dist-info, an editable install) is one plugin: first wins, like import
      if _norm(name) in seen: continue
      seen.add(_norm(name))
      for ep in eps:
        if (_norm(name), ep.value) not in by_key:
          by_key[(_norm(name), ep.value)] = rec = PluginRecord(name, version or "?", ep.value, [])
          recs.append(rec)
        by_key[(_norm(name), ep.value)].devices.append(ep.name.upper())
    for rec in recs:
      rec.disabled = rec.builtin_specs is None and self._is_disabled(rec)
      if not rec.disabled and (taken := self._claims_reserved(rec)): rec.error = self._reserved_error(rec, taken)
    # plugins refused for claiming a reserved name go last and never conflict: the name's owner keeps it, and asking for one
    # of their devices (with no owner installed) raises the refusal
    for rec in sorted(recs, key=lambda r: r.error is not None):
      for dev in rec.devices:
        if rec.disabled: self.disabled_devices.setdefault(dev, rec)
        elif rec.error is not None: self.by_device.setdefault(dev, rec)
        elif dev in self.by_device and _norm(self.by_device[dev].dist) != _norm(rec.dist):
          self.conflicts.setdefault(dev, [self.by_device[dev]]).append(rec)
        else: self.by_device.setdefault(dev, rec)
    return recs

  def _claims_reserved(self, rec: PluginRecord) -> list[str]:
    """The device names `rec` declares that belong to core (its built-in devices, DISK) or to another official plugin."""
    if rec.builtin_specs is not None: return []
    builtin = {s.name for s in self._builtins or []} | RESERVED_NAMES
    return [d for d in rec.devices if d in builtin or (d in OFFICIAL_PLUGINS and _norm(rec.dist) != f"plugin-{OFFICIAL_PLUGINS[d]}")]

  def _reserved_error(self, rec: PluginRecord, taken: list[str]) -> PluginError:
    owners = ", ".join(f"{d} ({'core' if d not in OFFICIAL_PLUGINS else 'plugin-' + OFFICIAL_PLUGINS[d]})" for d in taken)
    short = _short(rec.dist)
    return PluginError(f"plugin {rec.label()} (entry point {', '.join(rec.devices)} = {rec.value}) claims the device name(s) {owners}, "
                       f"which belong to core or its official plugins; a plugin can't replace them, so it is not loaded.\n"
                       f"  fix: set CORE_DISABLED_PLUGINS={short} to skip this plugin, or ask its authors to pick another device name "
                       f"(an upper-case identifier no one else uses).")

  def _is_disabled(self, rec: PluginRecord) -> bool:
    # a plugin answers to its distribution name with or without "plugin-", its module name, and its device names
    mod = rec.value.split(":")[0].lower()
    names = {_norm(rec.dist), _short(rec.dist), mod, mod.removeprefix("plugin_")} | {d.lower() for d in rec.devices}
    return bool(names & ({_norm(d) for d in self.disabled} | self.disabled))

  def device_names(self) -> list[str]:
    """Every device name some enabled plugin declares (no plugin is imported)."""
    self.records()
    return sorted(self.by_device)

  # *** loading: one plugin at a time, failures stored on its record ***

  def load(self, rec: PluginRecord) -> None:
    with self._lock:
      if rec.loaded or rec.error is not None or rec.disabled: return
      if rec.builtin_specs is not None:
        import core
        rec.specs, rec.info = {s.name: s for s in rec.builtin_specs}, {"name": "core", "version": rec.version, "api": core.PLUGIN_API}
        return
      try: self._load(rec)
      except PluginError as e: self._unload(rec, e)
      except (Exception, SystemExit) as e: self._unload(rec, self._error(rec, f"failed to load ({type(e).__name__}: {e})", e))

  def _load(self, rec: PluginRecord) -> None:
    import core
    try: mod = resolve(rec.value) if ":" in rec.value else importlib.import_module(rec.value)
    # a plugin calling sys.exit() at import must not end the program either
    except (Exception, SystemExit) as e: raise self._error(rec, f"failed to import {rec.value} ({type(e).__name__}: {e})", e) from e
    # the API check comes before registration: a plugin for another major may not even match today's hook specs
    info_fn = getattr(mod, "core_plugin_info", None)
    if info_fn is None: raise self._error(rec, "does not implement core_plugin_info(), so core can't tell which PLUGIN_API it was built for")
    info = info_fn()
    api = tuple(info.get("api", ())) if isinstance(info, dict) else ()
    if len(api) != 2 or not all(isinstance(x, int) for x in api):
      raise self._error(rec, f"core_plugin_info() must return {{'name', 'version', 'api': (major, minor)}}, got {info!r}")
    rec.info = info
    if api[0] != core.PLUGIN_API[0]:
      raise self._error(rec, f"was built for core PLUGIN_API {api[0]}.{api[1]}, but this core provides PLUGIN_API "
                             f"{core.PLUGIN_API[0]}.{core.PLUGIN_API[1]}, and a different major version is incompatible",
                        fix=f"install a {rec.dist} release built for PLUGIN_API {core.PLUGIN_API[0]}.x (or the core version it was built for)")
    self._register(rec, mod)
    specs = [s for s in (self._call_one(rec, "core_devices") or [])]
    for s in specs:
      if not isinstance(s, DeviceSpec): raise self._error(rec, f"core_devices() returned {s!r}, not a core.device.spec.DeviceSpec")
      if s.name not in rec.devices:
        raise self._error(rec, f"core_devices() returned device {s.name}, which none of its entry points declares",
                          fix=f'add {s.name} = "{rec.value}" under [project.entry-points."core.plugins"] in its pyproject.toml')
    rec.specs = {s.name: s for s in specs}
    if (missing := [d for d in rec.devices if d not in rec.specs]):
      raise self._error(rec, f"declares device(s) {missing} in its entry points but core_devices() returned {sorted(rec.specs) or 'none'}")

  def _register(self, rec: PluginRecord, mod: Any) -> None:
    import pluggy
    from core.device.hookspecs import HOOK_NAMES
    try:
      self.pm.register(mod, name=rec.dist)
      rec.module = mod
      self.pm.check_pending()   # a hook marked @hookimpl whose name core does not know is a typo: fail now, loudly
    except pluggy.PluginValidationError as e:
      bad = [n for n in dir(mod) if n.startswith("core_") and n not in HOOK_NAMES and callable(getattr(mod, n))]
      hint = "; ".join(f"{b}{did_you_mean(b, HOOK_NAMES, n=1)}" for b in bad) or str(e)
      raise self._error(rec, f"implements a hook core does not define: {hint}", e,
                        fix=f"rename the hook to one of {', '.join(HOOK_NAMES)} (see core/device/hookspecs.py)") from e

  def _unload(self, rec: PluginRecord, err: PluginError) -> None:
    if rec.module is not None and self.pm.is_registered(rec.module): self.pm.unregister(rec.module)
    rec.module, rec.specs, rec.error = None, {}, err

  def _error(self, rec: PluginRecord, what: str, cause: BaseException | None = None, fix: str | None = None) -> PluginError:
    other = "PYTHON" if "CPU" in rec.devices else "CPU"
    short = _short(rec.dist)
    fix = fix or f"reinstall or upgrade it (pip install --force-reinstall {rec.dist}) or report it to its authors"
    err = PluginError(f"plugin {rec.label()} (entry point {', '.join(rec.devices)} = {rec.value}) {what}.\n"
                      f"  fix: {fix}; or set DEV={other} to use another device, or CORE_DISABLED_PLUGINS={short} to skip this plugin.")
    err.__cause__ = cause
    return err

  def _call_one(self, rec: PluginRecord, hook: str, **kwargs: Any) -> Any:
    for impl in getattr(self.pm.hook, hook).get_hookimpls():
      if impl.plugin is rec.module: return impl.function(**kwargs)
    return None

  # *** lookups ***

  def spec(self, device: str) -> DeviceSpec:
    """The spec of `device` (a base name such as "CPU"), importing its plugin now. Raises a PluginError saying why not."""
    dev = device.upper()
    self.records()
    if dev in self.conflicts:
      who = " and ".join(f"{r.label()} ({r.value})" for r in self.conflicts[dev])
      last = self.conflicts[dev][-1]
      raise PluginError(f"device {dev} is claimed by two distributions: {who}.\n  fix: uninstall one of them (pip uninstall {last.dist}) "
                        f"or disable one with CORE_DISABLED_PLUGINS={_norm(last.dist)}.")
    if dev not in self.by_device:
      if dev in self.disabled_devices:
        rec = self.disabled_devices[dev]
        raise PluginError(f"device {dev} comes from plugin {rec.label()}, which CORE_DISABLED_PLUGINS={self.disabled_raw} disables.\n"
                          f"  fix: remove it from CORE_DISABLED_PLUGINS to use {dev}, or pick another device with DEV=.")
      hint = f" Install its plugin: pip install ./plugins/{OFFICIAL_PLUGINS[dev]}" if dev in OFFICIAL_PLUGINS else \
        " If a third-party plugin provides it, install that distribution (it must declare an entry point in group core.plugins)."
      # a renderer or interface name given as the device (DEV=CUDA): point at the device that has it
      if (other := self._named_part(dev)): hint = f" {other}"
      raise UnknownDeviceError(f"no installed plugin provides device {dev!r}.{did_you_mean(dev, self.by_device)} "
                               f"Known devices: {', '.join(sorted(self.by_device))}.{hint}")
    rec = self.by_device[dev]
    self.load(rec)
    if rec.error is not None: raise PluginError(str(rec.error)) from rec.error.__cause__
    return rec.specs[dev]

  def _named_part(self, name: str) -> str:
    """For a DEV device name that is really a renderer or an interface of installed devices: the DEV strings meant."""
    meant = [f"DEV={s.name}:{name} (the {name} renderer of {s.name})" for _, s in self.all_specs() if name in s.renderers] + \
            [f"DEV={name}+{s.name} (the {name} interface of {s.name})" for _, s in self.all_specs() if name in s.interfaces]
    return f"{name} is not a device; did you mean {' or '.join(meant)}?" if meant else ""

  def all_specs(self) -> list[tuple[PluginRecord, DeviceSpec]]:
    """Loads every enabled plugin (failures are kept on their records) and returns the specs that loaded."""
    out = []
    for rec in self.records():
      self.load(rec)
      out += [(rec, s) for s in rec.specs.values() if s.name not in self.conflicts]
    return out

  def best_device(self) -> str | None:
    """The highest-priority available device whose factory resolves; broken, conflicting and unavailable ones are skipped
    quietly (the doctor shows why)."""
    # probed best first, and only until one answers: a lower-priority device's probe (a PATH search, a driver file) is not run
    cands = sorted((s for _, s in self.all_specs() if s.priority >= 0), key=lambda s: (-s.priority, s.name))
    return next((s.name for s in cands if s.available() and s.factory_error() is None), None)

  def resolve_target(self, t: Target) -> DeviceSpec:
    """Checks that the target's device, interface and renderer exist (with "did you mean" on typos); returns the device's spec."""
    spec = self.spec(t.device)
    if t.interface is not None and t.interface not in spec.interfaces:
      raise UnknownDeviceError(f"device {spec.name} has no interface {t.interface!r} (DEV={t}).{did_you_mean(t.interface, spec.interfaces)} "
                               f"It offers: {', '.join(spec.interfaces) or 'none'}.")
    if t.renderer is not None:
      if spec.name == "NULL": self.borrowed_renderer_spec(t.renderer)
      elif t.renderer not in spec.renderers:
        hint = did_you_mean(t.renderer, spec.renderers)
        # DEV=MOCK+AMD:gfx942: an architecture where the renderer goes
        if not hint and t.arch is None and (r := spec.renderer_name(None)) is not None and any(c.isdigit() for c in t.renderer):
          hint = f" If {t.renderer.lower()} is an architecture, it goes after the renderer: DEV={dataclasses.replace(t, renderer=r, arch=t.renderer.lower())}."
        raise UnknownDeviceError(f"device {spec.name} has no renderer {t.renderer!r} (DEV={t}).{hint} "
                                 f"It offers: {', '.join(spec.renderers) or 'none'}.")
    return spec

  def borrowed_renderer_spec(self, name: str | None) -> tuple[DeviceSpec, str | None]:
    """For the NULL device: the spec whose renderer `name` names (a device name means that device's default renderer,
    "DEVICE:RENDERER" that device's renderer of that name)."""
    self.records()   # by_device is filled by discovery, which may not have run yet on this manager
    if name is not None and ":" in name:
      dev, rname = name.split(":")
      spec = self.spec(dev)
      if rname not in spec.renderers:
        raise UnknownDeviceError(f"device {dev} has no renderer {rname!r} (DEV=NULL:{name}).{did_you_mean(rname, spec.renderers)} "
                                 f"It offers: {', '.join(spec.renderers) or 'none'}.")
      return spec, rname
    if name is None:
      for _, s in sorted(self.all_specs(), key=lambda rs: -rs[1].priority):
        if s.renderers and s.name != "NULL" and s.available(): return s, None
      return self.spec("PYTHON"), None
    if name in self.by_device and name != "NULL": return self.spec(name), None
    offers = [s for _, s in sorted(self.all_specs(), key=lambda rs: -rs[1].priority) if name in s.renderers]
    if offers: return offers[0], name
    choices = set(self.by_device) | {r for _, s in self.all_specs() for r in s.renderers}
    raise UnknownDeviceError(f"no installed plugin offers a renderer named {name!r} for the NULL device.{did_you_mean(name, choices)} "
                             f"Renderers: {', '.join(sorted(choices - {'NULL'}))}.")

  # *** the HCQ pipeline's hooks: asked only of the plugin that declared the device ***

  def _ask_owner(self, hook: str, device: str) -> Any:
    base = device.split(":")[0].upper()
    self.spec(base)   # loads the owner (or raises why it can't be used)
    return self._call_one(self.by_device[base], hook, device=device)
  def pm_prep_program(self, device: str) -> Any: return self._ask_owner("core_pm_prep_program", device)
  def pm_lower(self, device: str) -> Any: return self._ask_owner("core_pm_lower", device)
  def pm_bufferize(self, device: str) -> Any: return self._ask_owner("core_pm_bufferize", device)

def _hook_manager(project: str) -> Any:
  """A pluggy.PluginManager that reads a module plugin's hooks from the module's own dict. pluggy looks at every name in
  dir(plugin) through inspect.getattr_static (safe for objects whose properties must not run); a plugin is a module, whose
  names are its imports and functions, and those lookups were most of registering one (~0.3 ms a plugin; with DEV unset every
  installed plugin registers before the first Tensor). The hooks found are the same: functions carrying the marker."""
  import inspect, types, pluggy
  class ModuleHookManager(pluggy.PluginManager):
    def parse_hookimpl_opts(self, plugin: Any, name: str) -> Any:
      if isinstance(plugin, types.ModuleType):
        v = plugin.__dict__.get(name)
        if inspect.isfunction(v):
          opts = getattr(v, f"{self.project_name}_impl", None)
          return opts if isinstance(opts, dict) else None
        # a module attribute pluggy would never hook: not a function, and no method wrapper it could bind
        if not isinstance(v, (staticmethod, classmethod, types.MethodType)): return None
      return super().parse_hookimpl_opts(plugin, name)
  return ModuleHookManager(project)

_manager: PluginManager | None = None
_manager_lock = threading.Lock()

def get_plugins() -> PluginManager:
  """The process-wide plugin manager, created (metadata not yet read) on first use."""
  global _manager
  with _manager_lock:
    if _manager is None: _manager = PluginManager()
    return _manager

def set_plugins(manager: PluginManager | None) -> None:
  """Replaces the process-wide manager (None: a fresh one on next use, re-reading entry points and CORE_DISABLED_PLUGINS)."""
  global _manager
  with _manager_lock: _manager = manager
