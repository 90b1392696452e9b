"""Fixtures for the plugin tests: a fake site folder, and a clean Device registry around each test."""
from __future__ import annotations
import os, pathlib
from typing import Any, Iterator
import pytest
from fakedist import FakeSite
from core.device.plugins import set_plugins
from core.device.registry import Device

@pytest.fixture
def site(tmp_path: pathlib.Path) -> Iterator[FakeSite]:
  s = FakeSite(tmp_path / "site")
  yield s
  s.close()

class FreshDevice:
  """Resets the global Device registry onto a plugin manager that sees only the fake site (not what this machine has installed)."""
  def __init__(self, site: FakeSite): self.site = site
  def reset(self) -> Any:
    Device.reset()   # re-reads DEV
    set_plugins(self.site.manager(disabled=os.getenv("CORE_DISABLED_PLUGINS", "")))
    return Device

@pytest.fixture
def fresh_device(site: FakeSite, monkeypatch: pytest.MonkeyPatch) -> Iterator[FreshDevice]:
  yield FreshDevice(site)
  monkeypatch.undo()
  Device.reset()
