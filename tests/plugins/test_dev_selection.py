"""DEV selection through the global Device registry, the NULL device's borrowed renderers, pipeline hooks and the doctor."""
from __future__ import annotations
import subprocess, sys, os, pathlib
import numpy as np
import pytest
import core
from fakedist import FakeSite, good_hooks
from core.device.plugins import UnknownDeviceError
from core.device.null import NullProgram
from core.device.python import PythonRenderer

def test_unset_dev_picks_best_available(site: FakeSite, fresh_device, monkeypatch) -> None:
  site.add("plugin-low", ["LOW"], good_hooks("low", ["LOW"], priority=5))
  site.add("plugin-high", ["HIGH"], good_hooks("high", ["HIGH"], priority=70))
  monkeypatch.delenv("DEV", raising=False)
  dev_reg = fresh_device.reset()
  assert dev_reg.DEFAULT == "HIGH"
  assert list(dev_reg.get_available_devices())[:2] == ["HIGH", "LOW"] and "NULL" not in dev_reg.get_available_devices()

def test_dev_sets_default_and_renderer(site: FakeSite, fresh_device, monkeypatch) -> None:
  site.add("plugin-high", ["HIGH"], good_hooks("high", ["HIGH"], priority=70))
  monkeypatch.setenv("DEV", "python:python;MOCK+HIGH")
  dev_reg = fresh_device.reset()
  assert dev_reg.DEFAULT == "PYTHON"
  assert str(dev_reg.target("HIGH")) == "MOCK+HIGH" and dev_reg["HIGH"].target.interface == "MOCK"
  dev_reg.DEFAULT = "high"
  assert dev_reg.DEFAULT == "HIGH"

@pytest.mark.parametrize("dev, says", [
  ("PYTHN", "no installed plugin provides device 'PYTHN'. Did you mean PYTHON?"),
  ("PYTHON:PYTON", "device PYTHON has no renderer 'PYTON' (DEV=PYTHON:PYTON). Did you mean PYTHON?"),
  ("NULL:FAKR", "no installed plugin offers a renderer named 'FAKR' for the NULL device. Did you mean FAKE or FAKEDEV?"),
  # a renderer or an interface named as the device, and an architecture where the renderer goes
  ("FAKE", "FAKE is not a device; did you mean DEV=FAKEDEV:FAKE (the FAKE renderer of FAKEDEV)?"),
  ("MOCK", "DEV=MOCK+FAKEDEV (the MOCK interface of FAKEDEV)"),
  ("PYTHON:gfx942", "If gfx942 is an architecture, it goes after the renderer: DEV=PYTHON:PYTHON:gfx942."),
])
def test_unknown_dev_fails_loudly_with_suggestion(site: FakeSite, fresh_device, monkeypatch, dev: str, says: str) -> None:
  site.add("plugin-fake", ["FAKEDEV"], good_hooks("fake", ["FAKEDEV"]).replace('{"PYTHON": "core', '{"FAKE": "core').replace('"PYTHON",', '"FAKE",'))
  monkeypatch.setenv("DEV", dev)
  dev_reg = fresh_device.reset()
  with pytest.raises(UnknownDeviceError) as e: dev_reg.DEFAULT
  assert says in str(e.value) and f"(DEV={dev})" in e.value.__notes__
  assert dev_reg["FAKEDEV"].device == "FAKEDEV"                  # other devices keep working

def test_device_names_with_renderers_are_refused() -> None:
  from core.device.registry import Device
  with pytest.raises(ValueError, match="pick a renderer with DEV=CPU:LLVM"): Device.canonicalize("CPU:LLVM")

def test_null_device_borrows_renderer_and_runs_nothing(site: FakeSite, fresh_device, monkeypatch) -> None:
  site.add("plugin-fake", ["FAKEDEV"], good_hooks("fake", ["FAKEDEV"]).replace('{"PYTHON": "core', '{"FAKE": "core').replace('"PYTHON",', '"FAKE",'))
  monkeypatch.setenv("DEV", "NULL:FAKE:arch7")
  dev_reg = fresh_device.reset()
  assert dev_reg.DEFAULT == "NULL"
  null = dev_reg["NULL"]
  assert isinstance(null.renderer, PythonRenderer) and null.target.arch == "arch7"
  prg = null.runtime("k", null.compiler.compile_cached("source"))
  assert isinstance(prg, NullProgram) and prg(wait=True) == 0.0
  buf = null.allocator.alloc(1 << 40)                                   # a terabyte: nothing is allocated
  null.allocator._copyin(buf, memoryview(b"x"))
  # NULL:<device> borrows that device's default renderer
  monkeypatch.setenv("DEV", "NULL:FAKEDEV")
  dev_reg = fresh_device.reset()
  assert isinstance(dev_reg["NULL"].renderer, PythonRenderer)
  # NULL:<device>:<renderer>:<arch> names the device and its renderer; a renderer the device lacks says what it offers
  monkeypatch.setenv("DEV", "NULL:FAKEDEV:FAKE:arch9")
  dev_reg = fresh_device.reset()
  assert isinstance(dev_reg["NULL"].renderer, PythonRenderer) and dev_reg["NULL"].target.arch == "arch9"
  monkeypatch.setenv("DEV", "NULL:FAKEDEV:FAKEE:arch9")
  with pytest.raises(UnknownDeviceError, match="device FAKEDEV has no renderer 'FAKEE'.*Did you mean FAKE.*It offers: FAKE"):
    fresh_device.reset()["NULL"]

def test_pipeline_hooks_are_asked_only_of_the_owning_plugin(site: FakeSite) -> None:
  # both plugins answer every device name: only the owner's answer may reach the pipeline, and the other is never called
  for name, dev in (("hooky", "HOOKY"), ("other", "OTHER")):
    site.add(f"plugin-{name}", [dev], good_hooks(name, [dev]) + f'''
@hookimpl
def core_pm_lower(device): return ("{name}", device)
@hookimpl
def core_pm_bufferize(device): raise AssertionError("{name} was asked for " + device)
''')
  pm = site.manager()
  assert pm.pm_lower("HOOKY:1") == ("hooky", "HOOKY:1") and pm.pm_lower("OTHER") == ("other", "OTHER")
  assert pm.pm_prep_program("HOOKY") is None   # the owner does not implement it: None, whatever other plugins say
  with pytest.raises(AssertionError, match="hooky was asked for HOOKY"): pm.pm_bufferize("HOOKY")

def test_doctor_lists_plugins_devices_and_dev_strings(site: FakeSite) -> None:
  site.add("plugin-good", ["GOOD"], good_hooks("good", ["GOOD"], version="2.5", priority=1000), version="2.5")  # beats any installed
  site.add("plugin-broken", ["BROKEN"], "raise ImportError('no libdrm')\n")
  repo = pathlib.Path(core.__file__).parent.parent
  env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site.root), str(repo)]), "CORE_DISABLED_PLUGINS": ""}
  env.pop("DEV", None)
  out = subprocess.run([sys.executable, "-m", "core.device"], capture_output=True, text=True, env=env, cwd=str(site.root))
  assert out.returncode == 0, out.stderr
  text = out.stdout
  assert "plugin-good" in text and "2.5" in text and "api 2.0" in text and "plugin-broken" in text and "ERROR" in text and "no libdrm" in text
  assert "GOOD     available" in text and "<- default" in text and "DEV=GOOD:PYTHON" in text and "DEV=MOCK+GOOD" in text
  assert "NULL" in text and "DEV=PYTHON" in text and "DEV is unset: the default is GOOD" in text

def doctor(site: FakeSite, *args: str, dev: str | None = None) -> subprocess.CompletedProcess:
  repo = pathlib.Path(core.__file__).parent.parent
  env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site.root), str(repo)]), "CORE_DISABLED_PLUGINS": ""}
  env.pop("DEV", None)
  if dev is not None: env["DEV"] = dev
  return subprocess.run([sys.executable, "-m", "core.device", *args], capture_output=True, text=True, env=env, cwd=str(site.root))

UNAVAILABLE = good_hooks("gpu", ["GPU"], priority=2000).replace("priority=2000)", "priority=2000, is_available=lambda: False, "
                                                                 "unavailable_reason=lambda: 'no /dev/gpu0: install the gpu driver')")

def test_doctor_says_why_a_device_is_unavailable_and_checks_dev(site: FakeSite) -> None:
  site.add("plugin-gpu", ["GPU"], UNAVAILABLE)
  out = doctor(site)
  assert out.returncode == 0 and "GPU      unavailable" in out.stdout and "why: no /dev/gpu0: install the gpu driver" in out.stdout
  # DEV naming the unavailable default interface: exit 1 with the reason; its other interface is fine
  bad = doctor(site, dev="GPU")
  assert bad.returncode == 1 and "device GPU is unavailable here: no /dev/gpu0" in bad.stderr and "MOCK+GPU" in bad.stderr
  ok = doctor(site, "--dev", "MOCK+GPU")
  assert ok.returncode == 0 and "DEV=MOCK+GPU can be used" in ok.stdout
  typo = doctor(site, "--dev", "GPUU")
  assert typo.returncode == 1 and "Did you mean GPU" in typo.stderr
  syntax = doctor(site, "--dev", "A+B+C")
  assert syntax.returncode == 1 and "at most one INTERFACE+ prefix" in syntax.stderr

def test_doctor_help() -> None:
  out = subprocess.run([sys.executable, "-m", "core.device", "--help"], capture_output=True, text=True)
  assert out.returncode == 0 and "--dev" in out.stdout and "DEV grammar" in out.stdout

def test_a_device_whose_factory_does_not_resolve_is_broken_and_never_picked(site: FakeSite, fresh_device, monkeypatch) -> None:
  site.add("plugin-half", ["HALF"], good_hooks("half", ["HALF"], priority=5000).replace('factory="core.device.python:make_python_device"',
                                                                                       'factory="no_such_module_xyz:make"'))
  monkeypatch.delenv("DEV", raising=False)
  assert fresh_device.reset().DEFAULT != "HALF"
  out = doctor(site)
  assert "HALF     broken" in out.stdout and "no_such_module_xyz" in out.stdout and "DEV is unset: the default is HALF" not in out.stdout
  assert doctor(site, dev="HALF").returncode == 1

def test_a_fake_plugin_device_computes(site: FakeSite, fresh_device) -> None:
  from core.device.buffer import Buffer
  from core.ir.dtype import dtypes
  from core.ir.ops import AxisType, Ops, UOp
  site.add("plugin-good", ["GOOD"], good_hooks("good", ["GOOD"]))
  dev_reg = fresh_device.reset()
  dev = dev_reg["GOOD"]
  n = 16
  out, a, b = (UOp.param(i, dtypes.float32.ptr(n)) for i in range(3))
  r = UOp(Ops.RANGE, dtypes.int32, (UOp.const(dtypes.int32, n),), (0, AxisType.LOOP))
  k = out.index(r).store(a.index(r).load() * b.index(r).load()).end(r)
  prg = dev.runtime("mul", dev.compiler.compile_cached(dev.renderer.render("mul", list(k.toposort()))))
  x, y = np.arange(n, dtype=np.float32), np.full(n, -1.5, np.float32)
  bufs = [Buffer("GOOD", n, dtypes.float32).allocate()] + [Buffer("GOOD", n, dtypes.float32).copyin(memoryview(v)) for v in (x, y)]
  prg(*[bb._buf for bb in bufs])
  np.testing.assert_array_equal(bufs[0].numpy(), x * y)

def test_null_borrows_a_device_renderer_from_a_fresh_manager(site: FakeSite) -> None:
  # nothing has read the entry points yet: borrowing by device name must discover them first (it said "did you mean GOOD?")
  site.add("plugin-good", ["GOOD"], good_hooks("good", ["GOOD"]))
  spec, rname = site.manager().borrowed_renderer_spec("GOOD")
  assert spec.name == "GOOD" and rname is None
