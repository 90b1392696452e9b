"""The WEBGPU plugin's registration: core finds it, its spec is as declared, the doctor shows it with its DEV strings."""
from __future__ import annotations
from typing import Any
import pytest
from core.testing.plugin_checks import plugin_manager, check_registration

@pytest.fixture
def pm() -> Any: return plugin_manager("WEBGPU", "plugin-webgpu")

def test_entry_point_spec_and_hooks(pm: Any) -> None:
  spec = check_registration(pm, "WEBGPU", "plugin-webgpu", "plugin_webgpu", ("HCQ", "DIRECT"), ["WGSL"])
  assert spec.default_renderer == "WGSL" and spec.priority < 100   # never chosen over the CPU when DEV is unset

def test_doctor_lists_webgpu_and_says_what_it_needs(pm: Any) -> None:
  from core.device.__main__ import report
  text = report(pm)
  line = next(ln for ln in text.splitlines() if ln.strip().startswith("WEBGPU "))
  assert ("available" in line) and "apt install mesa-vulkan-drivers libvulkan1" in text and "DEV=WEBGPU:WGSL" in text

def test_unavailable_reason_without_wgpu(monkeypatch: pytest.MonkeyPatch) -> None:
  import importlib.util
  from plugin_webgpu import gpu
  real = importlib.util.find_spec
  monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wgpu" else real(name, *a))
  assert gpu.unavailable_reason() == "the wgpu package is not installed (pip install ./plugins/webgpu)"

def test_unavailable_reason_without_a_vulkan_driver(monkeypatch: pytest.MonkeyPatch) -> None:
  import os
  from plugin_webgpu import gpu
  for k in ("VK_ICD_FILENAMES", "VK_DRIVER_FILES"): monkeypatch.delenv(k, raising=False)
  monkeypatch.setattr(os.path, "isdir", lambda p: False)
  if os.uname().sysname == "Darwin": pytest.skip("macOS has no Vulkan ICD check")
  reason = gpu.unavailable_reason()
  assert reason is not None and "apt install" in reason

def test_doctor_says_why_when_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
  import plugin_webgpu
  from plugin_webgpu import gpu
  monkeypatch.setattr(gpu, "unavailable_reason", lambda: "no Vulkan driver (test)")
  spec, = plugin_webgpu.core_devices()
  assert spec.available() is False and spec.why_unavailable() == "no Vulkan driver (test)"
