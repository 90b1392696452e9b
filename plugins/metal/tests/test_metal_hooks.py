"""The METAL plugin's registration: entry point, device spec, hooks; never auto-selected off macOS."""
from __future__ import annotations
import sys
from typing import Any
import pytest
from core.testing.plugin_checks import plugin_manager, check_registration

@pytest.fixture
def pm() -> Any: return plugin_manager("METAL", "plugin-metal")

def test_entry_point_spec_and_hooks(pm: Any) -> None:
  check_registration(pm, "METAL", "plugin-metal", "plugin_metal", ("MTL", "MOCK"), ["MSL"], version="0.2.0")

def test_available_only_on_macos() -> None:
  from plugin_metal import is_available
  assert is_available() is (sys.platform == "darwin")

def test_says_why_it_is_unavailable_and_what_runs_instead() -> None:
  from plugin_metal import core_devices
  spec = core_devices()[0]
  assert spec.unavailable_reason is not None and "only on macOS" in spec.why_unavailable() and "DEV=MOCK+METAL" in spec.why_unavailable()

def test_hcq_rules_are_pattern_matchers() -> None:
  import plugin_metal
  from core.ir.pattern import PatternMatcher
  for hook in (plugin_metal.core_pm_prep_program, plugin_metal.core_pm_lower, plugin_metal.core_pm_bufferize):
    assert isinstance(hook("METAL"), PatternMatcher)

def test_unknown_interface_is_refused() -> None:
  from core.device.target import Target
  from plugin_metal.runtime import make_device
  with pytest.raises(ValueError, match="no interface 'PCI'"): make_device("METAL", Target(interface="PCI", device="METAL"))
