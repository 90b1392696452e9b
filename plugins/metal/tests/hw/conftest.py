"""Metal hardware tests run only on macOS with a Metal GPU; elsewhere every test here is skipped (and no skip is a pass). Marker
`hardware`: `python -m pytest tests -m hardware` selects them on a Mac."""
from __future__ import annotations
import os, sys
import pytest

def pytest_configure(config: pytest.Config) -> None:
  config.addinivalue_line("markers", "hardware: needs Metal on macOS (skipped elsewhere)")

def _metal() -> bool:
  if sys.platform != "darwin": return False
  try:
    from plugin_metal.objc import metal_device
    return bool(metal_device())
  except (OSError, RuntimeError): return False

def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
  here = os.path.dirname(os.path.abspath(__file__))
  mine = [it for it in items if str(it.fspath).startswith(here)]
  if not mine: return
  skip = None if _metal() else pytest.mark.skip(reason="no Metal here: these run on macOS with a Metal GPU")
  for it in mine:
    it.add_marker(pytest.mark.hardware)
    if skip is not None: it.add_marker(skip)
