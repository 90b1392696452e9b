"""Hardware tests run only where /dev/kfd exists and the KFD topology lists a GPU; elsewhere every test here is skipped (and no
skip is a pass). Marker `hardware`: `python -m pytest tests -m hardware` selects them on a machine with an AMD GPU."""
from __future__ import annotations
import os
import pytest

def pytest_configure(config: pytest.Config) -> None:
  config.addinivalue_line("markers", "hardware: needs an AMD GPU through /dev/kfd (skipped elsewhere)")

def _gpu() -> bool:
  from plugin_amd.kfd import gpu_present
  return gpu_present()

def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
  here = os.path.dirname(os.path.abspath(__file__))
  mine = [it for it in items if str(it.fspath).startswith(here)]
  if not mine: return
  skip = None if _gpu() else pytest.mark.skip(reason="no AMD GPU here: /dev/kfd or a GPU node in the KFD topology is missing")
  for it in mine:
    it.add_marker(pytest.mark.hardware)
    if skip is not None: it.add_marker(skip)
