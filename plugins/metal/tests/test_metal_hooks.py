"""The METAL placeholder plugin: loads cleanly, is never auto-selected, and opening it says "not implemented yet"."""
from __future__ import annotations
from typing import Any
import pytest
from core.testing.plugin_checks import plugin_manager, check_registration, check_placeholder

@pytest.fixture
def pm() -> Any: return plugin_manager("METAL", "plugin-metal")

def test_entry_point_spec_and_hooks(pm: Any) -> None:
  check_registration(pm, "METAL", "plugin-metal", "plugin_metal", ('MTL',), ['MSL'])

def test_placeholder_says_not_implemented(pm: Any) -> None:
  check_placeholder(pm, "METAL")
