"""Hardware tests run only where /dev/kfd exists and the KFD topology lists a GPU; elsewhere every test here is skipped (and no
skip is a pass). Marker `hardware`: `python -m pytest tests -m hardware` selects them on a machine with an AMD GPU."""
from __future__ import annotations
import pytest
from core.testing.helpers import hardware_tests

def no_gpu(item: pytest.Item) -> str | None:
  from plugin_amd.kfd import gpu_present
  return None if gpu_present() else "no AMD GPU here: /dev/kfd or a GPU node in the KFD topology is missing"

pytest_configure, pytest_collection_modifyitems = hardware_tests(__file__, "an AMD GPU through /dev/kfd", no_gpu)
