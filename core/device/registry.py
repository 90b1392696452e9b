"""Device: the registry of opened devices ("CPU", "CPU:1"), built from DEV targets and plugin factories on first use."""
from __future__ import annotations
import contextlib, os, threading
from typing import Any, Callable, Iterator
from core.device.plugins import PluginError, get_plugins, set_plugins
from core.device.spec import resolve
from core.device.target import Target, parse_dev

def _note(e: BaseException, msg: str) -> None:
  # PEP 678 notes print under the traceback; Python 3.10 has no add_note, so there the note is skipped
  if hasattr(e, "add_note"): e.add_note(msg)

class _Device:
  """`Device["CPU"]` -> Compiled (opened once), `Device.DEFAULT` -> the default device name."""
  def __init__(self) -> None:
    self._lock = threading.RLock()
    self._opened: dict[str, Any] = {}
    self._default: str | None = None
    self._targets: dict[str, Target] | None = None
    self._listeners: list[Callable[[], None]] = []

  @staticmethod
  def canonicalize(name: str) -> str:
    """"cpu" -> "CPU", "CPU:0" -> "CPU", "CPU:1" -> "CPU:1". Renderers are not part of a device name: choose them with DEV.
    "disk:<path>" -> "DISK:<absolute path>": everything after the first ':' is the file, whatever ':' or '/' it holds."""
    base, _, idx = name.partition(":")
    if base.upper() == "DISK":
      if not idx: raise ValueError(f"device name {name!r}: DISK needs a file, as in 'disk:/path/to/file'")
      return "DISK:" + os.path.abspath(os.path.expanduser(idx))
    if idx and not idx.isdigit():
      raise ValueError(f"device name {name!r} must be DEVICE or DEVICE:N (N an instance number); pick a renderer with DEV={name} instead")
    base = base.upper()
    return base if idx in ("", "0") else f"{base}:{int(idx)}"

  @property
  def targets(self) -> dict[str, Target]:
    """The DEV targets by device name (the first entry for a device wins)."""
    with self._lock:
      if self._targets is None:
        self._targets = {}
        for t in parse_dev(dev) if (dev := os.getenv("DEV", "").strip()) else []: self._targets.setdefault(t.device, t)
      return self._targets

  def target(self, name: str) -> Target:
    base = self.canonicalize(name).split(":")[0]
    return self.targets.get(base) or Target(device=base)

  def __getitem__(self, name: str) -> Any:
    # fast path without the lock: an opened device asked for by its canonical name (every buffer access does this)
    if (dev := self._opened.get(name)) is not None: return dev
    cname = self.canonicalize(name)
    with self._lock:
      if (dev := self._opened.get(cname)) is not None: return dev
      target = self.target(cname)
      try: spec = get_plugins().resolve_target(target)
      except PluginError as e:
        if os.getenv("DEV"): _note(e, f"(DEV={os.getenv('DEV')})")
        raise
      try: dev = resolve(spec.factory)(cname, target)
      except Exception as e:
        _note(e, f"while opening device {cname} (target {target}); set DEV to another device to skip it")
        raise
      self._opened[cname] = dev
      return dev

  @property
  def DEFAULT(self) -> str:
    if (d := self._default) is not None: return d   # every Tensor made without a device asks: set once, read without the lock
    with self._lock:
      if self._default is None:
        if (dev := os.getenv("DEV", "").strip()):
          first = parse_dev(dev)[0]
          try: get_plugins().resolve_target(first)
          except PluginError as e:
            _note(e, f"(DEV={dev})")
            raise
          self._default = first.device if first.path is None else self.canonicalize(f"DISK:{first.path}")
        elif (best := get_plugins().best_device()) is None:
          raise RuntimeError("no device is available: install a backend (pip install ./plugins/cpu) or set DEV=PYTHON")
        else: self._default = best
      return self._default
  @DEFAULT.setter
  def DEFAULT(self, name: str) -> None:
    with self._lock: self._default = self.canonicalize(name)

  def get_available_devices(self) -> Iterator[str]:
    """Names of the devices whose probe says they can run here and whose factory imports, best first (no device is opened)."""
    specs = sorted((s for _, s in get_plugins().all_specs() if s.priority >= 0 and s.available()), key=lambda s: (-s.priority, s.name))
    yield from (s.name for s in specs if s.factory_error() is None)

  def opened(self) -> list[str]: return list(self._opened)

  def on_change(self, fn: Callable[[], None]) -> None:
    """Calls `fn()` whenever a device name may come to mean another device object (reset, installed): whoever caches work
    per device name (the engine's schedules, submissions and compiled kernels) drops it there."""
    self._listeners.append(fn)
  def _changed(self) -> None:
    for fn in self._listeners: fn()

  def reset(self) -> None:
    """Forgets opened devices, DEV and the plugin manager (tests use this after changing the environment)."""
    with self._lock:
      self._opened.clear()
      self._default = self._targets = None
      set_plugins(None)
      self._changed()

  @contextlib.contextmanager
  def installed(self, devs: dict[str, Any]) -> Iterator[None]:
    """Within the block, these device objects answer to these names (fake devices in tests); then the previous ones do."""
    with self._lock:
      saved = {n: self._opened.get(n) for n in devs}
      self._opened.update(devs)
      self._changed()
    try: yield
    finally:
      with self._lock:
        for n, d in saved.items():
          if d is None: self._opened.pop(n, None)
          else: self._opened[n] = d
        self._changed()

Device = _Device()
