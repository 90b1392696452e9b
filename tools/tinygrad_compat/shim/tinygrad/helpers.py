"""tinygrad.helpers: core's getenv/Context/settings, and `DEV` describing the default target as tinygrad's does."""
from __future__ import annotations
import platform
from core.helpers import getenv, DEBUG, IMAGE, NOOPT, BEAM, prod, flatten, all_int, argfix, make_tuple, round_up
from core.helpers import Context as _CoreContext

OSX = platform.system() == "Darwin"
WIN = platform.system() == "Windows"
CI = getenv("CI", "") != ""

# tinygrad settings with no core counterpart that change no computed value: IGNORE_BEAM_CACHE only makes BEAM search
# again instead of reading its cache
_NO_EFFECT = {"IGNORE_BEAM_CACHE"}

class Context(_CoreContext):
  """core's Context, dropping the tinygrad settings of _NO_EFFECT (any other unknown name still raises KeyError)."""
  def __init__(self, **kwargs: int): super().__init__(**{k: v for k, v in kwargs.items() if k not in _NO_EFFECT})

class _Dev:
  """`DEV.device`, `DEV.renderer`, `DEV.interface` of the default device, "" where DEV leaves the default (as tinygrad's)."""
  def _target(self):
    from core import Device
    from core.device.plugins import get_plugins
    t = Device.target(Device.DEFAULT)
    return t, get_plugins().resolve_target(t)
  @property
  def device(self) -> str:
    from core import Device
    return Device.DEFAULT
  @property
  def renderer(self) -> str:
    t, spec = self._target()
    return spec.renderer_name(t.renderer) or ""
  @property
  def interface(self) -> str:
    t, _ = self._target()
    return t.interface or ""

DEV = _Dev()

__all__ = ["getenv", "DEBUG", "IMAGE", "NOOPT", "BEAM", "Context", "DEV", "OSX", "WIN", "CI", "prod", "flatten", "all_int", "argfix",
           "make_tuple", "round_up"]
