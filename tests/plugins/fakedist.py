"""Builds fake plugin distributions on the fly: a dist-info folder (METADATA + entry_points.txt) and the hook module."""
from __future__ import annotations
import itertools, pathlib, sys, textwrap
import importlib_metadata
from core.device.plugins import PluginManager

_ids = itertools.count()

GOOD_HOOKS = '''
from core.device.hookspecs import hookimpl
from core.device.spec import DeviceSpec
API = (2, 0)
@hookimpl
def core_plugin_info(): return {"name": "NAME", "version": "VERSION", "api": API}
@hookimpl
def core_devices():
  # runs on the PYTHON interpreter so the fake device can really compute
  return [DeviceSpec(d, factory="core.device.python:make_python_device", renderers={"PYTHON": "core.device.python:make_python_renderer"},
                     default_renderer="PYTHON", interfaces=("DIRECT", "MOCK"), priority=PRIORITY) for d in DEVICES]
'''

def good_hooks(name: str, devices: list[str], version: str = "1.0", priority: int = 50, api: tuple[int, int] = (2, 0)) -> str:
  return (GOOD_HOOKS.replace("NAME", name).replace("VERSION", version).replace("DEVICES", repr(devices))
          .replace("PRIORITY", str(priority)).replace("API = (2, 0)", f"API = {api!r}"))

class FakeSite:
  """A folder on sys.path holding fake distributions; `manager()` sees only these plus core's built-ins."""
  def __init__(self, root: pathlib.Path):
    self.root = root
    self.roots = [root]
    root.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(root))

  def add(self, dist: str, devices: list[str] | dict[str, str], source: str | None, version: str = "1.0", root: pathlib.Path | None = None,
          module: str | None = None) -> str:
    """Writes distribution `dist` whose entry points map each device to a fresh module holding `source`; returns the module name."""
    root = root or self.root
    if root not in self.roots:
      root.mkdir(parents=True, exist_ok=True)
      self.roots.append(root)
      sys.path.insert(0, str(root))
    module = module or f"fake_plugin_{next(_ids)}"
    eps = devices if isinstance(devices, dict) else {d: module for d in devices}
    info = root / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text("[core.plugins]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items()))
    if source is not None: (root / f"{module}.py").write_text(textwrap.dedent(source))
    return module

  def distributions(self) -> list:
    return list(importlib_metadata.distributions(path=[str(r) for r in self.roots]))

  def manager(self, disabled: str = "") -> PluginManager:
    return PluginManager(distributions=self.distributions, disabled=disabled)

  def close(self) -> None:
    for r in self.roots:
      if str(r) in sys.path: sys.path.remove(str(r))
    for m in [m for m in sys.modules if m.startswith("fake_plugin_")]: del sys.modules[m]
