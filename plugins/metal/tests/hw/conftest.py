"""Metal hardware tests run only on macOS with a Metal GPU; elsewhere every test here is skipped (and no skip is a pass). Marker
`hardware`: `python -m pytest tests -m hardware` selects them on a Mac."""
from __future__ import annotations
import sys
import pytest
from core.testing.helpers import hardware_tests

def no_metal(item: pytest.Item) -> str | None:
  if sys.platform == "darwin":
    try:
      from plugin_metal.objc import metal_device
      if metal_device(): return None
    except (OSError, RuntimeError): pass
  return "no Metal here: these run on macOS with a Metal GPU"

pytest_configure, pytest_collection_modifyitems = hardware_tests(__file__, "Metal on macOS", no_metal)
