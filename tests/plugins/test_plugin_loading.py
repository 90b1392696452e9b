"""Plugin discovery and isolation with fake distributions: each failure gives its documented message and spares the others."""
from __future__ import annotations
import os, pathlib, subprocess, sys
import core
import numpy as np
import pytest
from fakedist import FakeSite, good_hooks
from core.device.buffer import Buffer
from core.device.plugins import PluginError, UnknownDeviceError
from core.ir.dtype import dtypes

def test_discovery_is_lazy_and_loading_registers_the_module(site: FakeSite) -> None:
  mod = site.add("plugin-good", ["GOOD"], good_hooks("good", ["GOOD"]))
  pm = site.manager()
  assert "GOOD" in pm.device_names() and mod not in sys.modules      # metadata read, module not imported
  spec = pm.spec("GOOD")
  assert mod in sys.modules and spec.name == "GOOD" and spec.interfaces == ("DIRECT", "MOCK")
  assert pm.pm.is_registered(sys.modules[mod]) and pm.pm.get_plugin("plugin-good") is sys.modules[mod]   # a module, not an object

def test_auto_select_prefers_priority_and_skips_broken_and_unavailable(site: FakeSite) -> None:
  site.add("plugin-good", ["GOOD"], good_hooks("good", ["GOOD"], priority=50))
  site.add("plugin-broken", ["BROKEN"], "raise ZeroDivisionError('boom at import')\n")
  site.add("plugin-off", ["OFF"], good_hooks("off", ["OFF"], priority=99).replace("priority=99)", "priority=99, is_available=lambda: False)"))
  site.add("plugin-badprobe", ["PROBE"], good_hooks("p", ["PROBE"], priority=98).replace("priority=98)", "priority=98, is_available=lambda: 1/0)"))
  pm = site.manager()
  assert pm.best_device() == "GOOD"
  broken = next(r for r in pm.records() if r.dist == "plugin-broken")
  assert isinstance(broken.error, PluginError) and isinstance(broken.error.__cause__, ZeroDivisionError)

def test_plugin_that_raises_on_import(site: FakeSite) -> None:
  site.add("plugin-broken", ["BROKEN"], "raise ZeroDivisionError('boom at import')\n", version="0.3.1")
  site.add("plugin-good", ["GOOD"], good_hooks("good", ["GOOD"]))
  pm = site.manager()
  with pytest.raises(PluginError) as e: pm.spec("BROKEN")
  msg = str(e.value)
  assert "plugin plugin-broken 0.3.1" in msg and "ZeroDivisionError: boom at import" in msg
  assert "fix: reinstall or upgrade it (pip install --force-reinstall plugin-broken)" in msg and "DEV=CPU" in msg
  assert isinstance(e.value.__cause__, ZeroDivisionError)
  with pytest.raises(PluginError, match="boom at import"): pm.spec("BROKEN")   # the stored error, every time
  assert pm.spec("GOOD").name == "GOOD"

def test_plugin_built_for_another_api_major(site: FakeSite) -> None:
  site.add("plugin-future", ["FUTURE"], good_hooks("future", ["FUTURE"], version="9.0", api=(3, 3)), version="9.0")
  site.add("plugin-minor", ["MINOR"], good_hooks("minor", ["MINOR"], api=(2, 7)))      # a newer minor is accepted
  pm = site.manager()
  with pytest.raises(PluginError) as e: pm.spec("FUTURE")
  assert "plugin plugin-future 9.0" in str(e.value) and "built for core PLUGIN_API 3.3" in str(e.value)
  assert "this core provides PLUGIN_API 2.0" in str(e.value) and "built for PLUGIN_API 2.x" in str(e.value)
  assert not pm.pm.get_plugins() - {None} or all(getattr(p, "__name__", "") != "plugin-future" for p in pm.pm.get_plugins())
  assert pm.spec("MINOR").name == "MINOR"

def test_plugin_with_misspelled_hook(site: FakeSite) -> None:
  src = good_hooks("typo", ["TYPO"]) + "\n@hookimpl\ndef core_device(): return []\n"
  mod = site.add("plugin-typo", ["TYPO"], src)
  site.add("plugin-good", ["GOOD"], good_hooks("good", ["GOOD"]))
  pm = site.manager()
  with pytest.raises(PluginError) as e: pm.spec("TYPO")
  msg = str(e.value)
  assert "plugin plugin-typo 1.0" in msg and "core_device" in msg and "Did you mean core_devices?" in msg
  assert not pm.pm.is_registered(sys.modules[mod])                 # unregistered again: check_pending stays clean for the others
  assert pm.spec("GOOD").name == "GOOD"
  pm.pm.check_pending()

def test_two_distributions_claiming_one_device(site: FakeSite) -> None:
  site.add("plugin-gpu-a", ["SAME"], good_hooks("a", ["SAME"]), version="1.0")
  site.add("plugin-gpu-b", ["SAME"], good_hooks("b", ["SAME"]), version="2.0")
  site.add("plugin-good", ["GOOD"], good_hooks("good", ["GOOD"]))
  pm = site.manager()
  with pytest.raises(PluginError) as e: pm.spec("SAME")
  msg = str(e.value)
  assert "device SAME is claimed by two distributions: plugin-gpu-a 1.0" in msg and "plugin-gpu-b 2.0" in msg
  assert "pip uninstall plugin-gpu-b" in msg and "CORE_DISABLED_PLUGINS=plugin-gpu-b" in msg
  assert pm.best_device() == "GOOD"
  assert site.manager(disabled="gpu-b").spec("SAME").name == "SAME"   # disabling one resolves it

def test_duplicate_dist_info_of_one_plugin_is_not_an_error(site: FakeSite, tmp_path) -> None:
  mod = site.add("plugin-good", ["GOOD"], good_hooks("good", ["GOOD"]))
  site.add("plugin_good", ["GOOD"], None, root=tmp_path / "site2", module=mod)   # same distribution, normalized name, second path entry
  pm = site.manager()
  assert [r.dist for r in pm.records() if "GOOD" in r.devices] == ["plugin-good"] and not pm.conflicts
  assert pm.spec("GOOD").name == "GOOD"

@pytest.mark.parametrize("disabled", ["good", "plugin-good", "GOOD", "amd, good"])
def test_disabled_plugin(site: FakeSite, disabled: str) -> None:
  mod = site.add("plugin-good", ["GOOD"], good_hooks("good", ["GOOD"]))
  site.add("plugin-other", ["OTHER"], good_hooks("other", ["OTHER"], priority=10))
  pm = site.manager(disabled=disabled)
  with pytest.raises(PluginError) as e: pm.spec("GOOD")
  assert f"device GOOD comes from plugin plugin-good 1.0, which CORE_DISABLED_PLUGINS={disabled} disables" in str(e.value)
  assert mod not in sys.modules and pm.best_device() == "OTHER" and mod not in sys.modules   # never even imported

def test_unknown_device_suggests_close_names(site: FakeSite) -> None:
  site.add("plugin-good", ["GOOD"], good_hooks("good", ["GOOD"]))
  pm = site.manager()
  with pytest.raises(UnknownDeviceError) as e: pm.spec("GODO")
  assert "no installed plugin provides device 'GODO'. Did you mean GOOD?" in str(e.value) and "Known devices: DISK, GOOD, NULL, PYTHON" in str(e.value)
  with pytest.raises(UnknownDeviceError, match=r"Install its plugin: pip install ./plugins/amd"): pm.spec("AMD")

def test_spec_not_matching_entry_points_is_a_load_error(site: FakeSite) -> None:
  site.add("plugin-liar", ["LIAR"], good_hooks("liar", ["OTHERNAME"]))
  site.add("plugin-quiet", ["QUIET"], good_hooks("quiet", []))
  site.add("plugin-noinfo", ["NOINFO"], "def core_devices(): return []\n")
  pm = site.manager()
  with pytest.raises(PluginError, match="returned device OTHERNAME, which none of its entry points declares"): pm.spec("LIAR")
  with pytest.raises(PluginError, match=r"declares device\(s\) \['QUIET'\] in its entry points but core_devices\(\) returned none"): pm.spec("QUIET")
  with pytest.raises(PluginError, match="does not implement core_plugin_info"): pm.spec("NOINFO")

def test_interface_and_renderer_typos_suggest(site: FakeSite) -> None:
  from core.device.target import parse_target
  site.add("plugin-good", ["GOOD"], good_hooks("good", ["GOOD"]))
  pm = site.manager()
  assert pm.resolve_target(parse_target("MOCK+GOOD:PYTHON")).name == "GOOD"
  with pytest.raises(UnknownDeviceError, match="device GOOD has no interface 'MOKC'.*Did you mean MOCK.*It offers: DIRECT, MOCK"):
    pm.resolve_target(parse_target("MOKC+GOOD"))
  with pytest.raises(UnknownDeviceError, match="device GOOD has no renderer 'PYTON'.*Did you mean PYTHON"):
    pm.resolve_target(parse_target("GOOD:PYTON"))

def test_broken_plugin_does_not_break_import_or_other_devices(site: FakeSite, fresh_device, monkeypatch) -> None:
  site.add("plugin-broken", ["BROKEN"], "raise ImportError('missing driver library')\n")
  site.add("plugin-good", ["GOOD"], good_hooks("good", ["GOOD"], priority=50))
  monkeypatch.delenv("DEV", raising=False)
  dev_reg = fresh_device.reset()
  assert dev_reg.DEFAULT == "GOOD"
  b = Buffer("GOOD", 3, dtypes.int32).copyin(memoryview(np.array([1, 2, 3], np.int32)))
  np.testing.assert_array_equal(b.numpy(), [1, 2, 3])
  with pytest.raises(PluginError, match="missing driver library"): dev_reg["BROKEN"]

def test_explicit_dev_of_broken_plugin_fails_loudly(site: FakeSite, fresh_device, monkeypatch) -> None:
  site.add("plugin-broken", ["BROKEN"], "raise ImportError('missing driver library')\n")
  monkeypatch.setenv("DEV", "BROKEN")
  dev_reg = fresh_device.reset()
  with pytest.raises(PluginError) as e: dev_reg.DEFAULT
  assert "plugin plugin-broken 1.0" in str(e.value) and "(DEV=BROKEN)" in "\n".join(getattr(e.value, "__notes__", []))

def test_import_core_survives_a_broken_plugin(site: FakeSite) -> None:
  site.add("plugin-broken", ["BROKEN"], "raise SystemExit('a plugin must never take core down')\n")
  code = "import core, core.device.registry as r; print(r.Device.DEFAULT); print(sorted(r.Device.get_available_devices()))"
  repo = pathlib.Path(core.__file__).parent.parent
  env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site.root), str(repo)])}
  env.pop("DEV", None)
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=str(site.root))
  assert out.returncode == 0, out.stderr
  assert "BROKEN" not in out.stdout
