"""DeviceSpec: what a plugin declares about one device, with everything expensive behind lazy references."""
from __future__ import annotations
import dataclasses, importlib
from typing import Any, Callable, Mapping
from core.helpers import frozen_record

# A lazy reference is either the object itself or a "package.module:attribute" string imported on first use.
LazyRef = Any

def resolve(ref: LazyRef) -> Any:
  """The object behind a lazy reference ("pkg.mod:attr" strings are imported now)."""
  if not isinstance(ref, str): return ref
  mod, sep, attr = ref.partition(":")
  if not sep: raise ValueError(f"lazy reference {ref!r} must look like 'package.module:attribute'")
  obj: Any = importlib.import_module(mod)
  for a in attr.split("."): obj = getattr(obj, a)
  return obj

@frozen_record
class DeviceSpec:
  """One device a plugin offers.

  name: the DEV name ("CPU"). interfaces: the driver interfaces it can use, first is the default (("KFD", "MOCK")).
  renderers: renderer name -> lazy reference to `make(arch: str | None) -> (Renderer, Compiler)`; the NULL device
  borrows these to compile without running. default_renderer: used when DEV names none. priority: auto-selection
  order when DEV is unset (higher wins; negative: never auto-selected). factory: lazy reference to
  `factory(name: str, target: Target) -> Compiled`, called only when the device is first used. is_available: a cheap
  probe (no driver opened, nothing compiled) saying whether the default interface can work on this machine;
  unavailable_reason: when it can't, why and what would fix it (the doctor prints it)."""
  name: str
  factory: LazyRef
  renderers: Mapping[str, LazyRef] = dataclasses.field(default_factory=dict)
  default_renderer: str | None = None
  interfaces: tuple[str, ...] = ()
  priority: int = 0
  is_available: Callable[[], bool] = lambda: True
  description: str = ""
  unavailable_reason: Callable[[], str] | None = None

  def __post_init__(self) -> None:
    if not self.name or not self.name.isidentifier() or self.name != self.name.upper():
      raise ValueError(f"DeviceSpec name {self.name!r} must be an upper-case identifier like 'CPU'")
    bad = [r for r in self.renderers if r != r.upper()]
    if bad: raise ValueError(f"DeviceSpec {self.name}: renderer names must be upper case, got {bad}")
    if self.default_renderer is not None and self.default_renderer not in self.renderers:
      raise ValueError(f"DeviceSpec {self.name}: default_renderer {self.default_renderer!r} is not one of {sorted(self.renderers)}")

  def renderer_name(self, requested: str | None) -> str | None:
    """The renderer a target gets: the requested one, else the default, else the first declared."""
    return requested or self.default_renderer or next(iter(self.renderers), None)

  def make_renderer(self, name: str | None, arch: str | None = None) -> tuple[Any, Any]:
    """Builds (Renderer, Compiler) for a renderer this device declares."""
    rname = self.renderer_name(name)
    if rname is None or rname not in self.renderers:
      raise KeyError(f"device {self.name} has no renderer {name!r}; it offers {sorted(self.renderers)}")
    return resolve(self.renderers[rname])(arch)

  def available(self) -> bool:
    """is_available(), with a probe that raises counting as unavailable (a probe must never break selection)."""
    try: return bool(self.is_available())
    except Exception: return False

  def why_unavailable(self) -> str:
    """The plugin's reason the device is unavailable here (or what its probe raised)."""
    try: self.is_available()
    except Exception as e: return f"its availability probe raised {type(e).__name__}: {e}"
    if self.unavailable_reason is None: return "its plugin's availability probe said no (it gives no reason)"
    try: return self.unavailable_reason()
    except Exception as e: return f"its unavailable_reason() raised {type(e).__name__}: {e}"

  def factory_error(self) -> str | None:
    """None when the factory reference resolves (its module imports), else why not: a device whose factory can't even be
    imported is broken, and never picked when DEV is unset."""
    try: resolve(self.factory)
    except Exception as e: return f"its factory {self.factory!r} does not resolve: {type(e).__name__}: {e}"
    return None

def placeholder_spec(name: str, interfaces: tuple[str, ...], renderers: tuple[str, ...], priority: int) -> DeviceSpec:
  """A declared-but-unimplemented device: never available, and opening it (or borrowing its renderer) says so plainly."""
  msg = (f"the {name} backend is not implemented yet: plugin-{name.lower()} only declares the device. "
         f"Use another device, e.g. DEV=CPU (pip install ./plugins/cpu) or DEV=PYTHON.")
  def not_implemented(*args: Any) -> Any: raise NotImplementedError(msg)
  return DeviceSpec(name, factory=not_implemented, renderers={r: not_implemented for r in renderers}, default_renderer=renderers[0],
                    interfaces=interfaces, priority=priority, is_available=lambda: False, description="not implemented yet",
                    unavailable_reason=lambda: msg)
