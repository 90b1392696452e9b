"""tinygrad's `Device`: core's device registry, with the renderer's `supported_dtypes()` as a method (a class set in core)."""
from __future__ import annotations
from typing import Any
from core import Device as _core_device

class _RendererView:
  def __init__(self, renderer: Any): self._r = renderer
  def supported_dtypes(self) -> frozenset: return frozenset(self._r.supported_dtypes)
  def __getattr__(self, name: str) -> Any: return getattr(self._r, name)

class _CompiledView:
  def __init__(self, dev: Any): self._dev = dev
  @property
  def renderer(self) -> _RendererView: return _RendererView(self._dev.renderer)
  def __getattr__(self, name: str) -> Any: return getattr(self._dev, name)

class _DeviceShim:
  @property
  def DEFAULT(self) -> str: return _core_device.DEFAULT
  @DEFAULT.setter
  def DEFAULT(self, name: str) -> None: _core_device.DEFAULT = name
  def canonicalize(self, name: str) -> str: return _core_device.canonicalize(name)
  def get_available_devices(self): return _core_device.get_available_devices()
  def __getitem__(self, name: str) -> _CompiledView: return _CompiledView(_core_device[name])

Device = _DeviceShim()
