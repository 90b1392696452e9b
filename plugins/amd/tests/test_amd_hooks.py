"""The AMD placeholder plugin: loads cleanly, is never auto-selected, and opening it says "not implemented yet"."""
from __future__ import annotations
from typing import Any
import pytest
from core.testing.plugin_checks import plugin_manager, check_registration, check_placeholder

@pytest.fixture
def pm() -> Any: return plugin_manager("AMD", "plugin-amd")

def test_entry_point_spec_and_hooks(pm: Any) -> None:
  check_registration(pm, "AMD", "plugin-amd", "plugin_amd", ('KFD', 'PCI', 'MOCK'), ['LLVM', 'HIP'])

def test_placeholder_says_not_implemented(pm: Any) -> None:
  check_placeholder(pm, "AMD")
