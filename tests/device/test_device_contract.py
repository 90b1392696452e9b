"""The device layer's promises: hook specs documented, `import core` cheap and plugin-free, counters, DeviceSpec checks."""
from __future__ import annotations
import inspect, subprocess, sys
import pytest
import core
from core.device import hookspecs
from core.device.counters import GlobalCounters
from core.device.spec import DeviceSpec, placeholder_spec, resolve

def test_every_hook_is_declared_and_documented() -> None:
  specs = {n for n, f in inspect.getmembers(hookspecs, inspect.isfunction) if n.startswith("core_")}
  assert specs == set(hookspecs.HOOK_NAMES) == {"core_plugin_info", "core_devices", "core_pm_prep_program", "core_pm_lower",
                                                "core_pm_bufferize"}
  for n in specs:
    doc = getattr(hookspecs, n).__doc__
    assert doc and "Called" in doc and "None" in doc, n            # when called, what it returns, what None means

def test_import_core_loads_no_plugin_machinery() -> None:
  code = "import sys, core; print(sorted(m for m in ('pluggy', 'numpy', 'core.device.plugins', 'importlib_metadata') if m in sys.modules))"
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
  assert out.stdout.strip() == "[]"
  assert core.PLUGIN_API[0] >= 1 and len(core.PLUGIN_API) == 2

def test_counters_reset_keeps_memory_in_use() -> None:
  GlobalCounters.kernel_count, GlobalCounters.global_ops, GlobalCounters.time_sum_s = 3, 100, 0.5
  GlobalCounters.mem_used["TESTDEV"] += 64
  GlobalCounters.reset()
  assert (GlobalCounters.kernel_count, GlobalCounters.global_ops, GlobalCounters.global_mem, GlobalCounters.time_sum_s) == (0, 0, 0, 0.0)
  assert GlobalCounters.mem_used["TESTDEV"] == 64
  GlobalCounters.mem_used["TESTDEV"] -= 64

def test_device_spec_validates_names_and_defaults() -> None:
  with pytest.raises(ValueError, match="upper-case identifier"): DeviceSpec("cpu", factory=None)
  with pytest.raises(ValueError, match="default_renderer 'X' is not one of"):
    DeviceSpec("D", factory=None, renderers={"C": None}, default_renderer="X")
  s = DeviceSpec("D", factory=None, renderers={"C": None, "LLVM": None})
  assert s.renderer_name(None) == "C" and s.renderer_name("LLVM") == "LLVM"
  assert DeviceSpec("D", factory=None, is_available=lambda: 1 / 0).available() is False   # a probe that raises means "no"

def test_lazy_references_resolve_on_demand() -> None:
  assert resolve("core.device.target:parse_dev")("CPU")[0].device == "CPU"
  assert resolve(len) is len
  with pytest.raises(ValueError, match="package.module:attribute"): resolve("core.device.target")

def test_placeholder_spec_is_honest() -> None:
  s = placeholder_spec("AMD", ("KFD",), ("LLVM",), 5)
  assert s.available() is False
  with pytest.raises(NotImplementedError, match="AMD backend is not implemented yet"): resolve(s.factory)("AMD", None)
