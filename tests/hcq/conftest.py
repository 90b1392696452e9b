"""Fixtures for core/hcq's tests: FAKE and FAKE:1, devices of the fake HCQ plugin in fakehcq.py."""
import pytest
from core.testing.helpers import ci_run

@pytest.fixture
def fake():
  if not ci_run(): pytest.importorskip("plugin_cpu")   # the core job installs every plugin: there it must import
  import fakehcq
  from core.device.registry import Device
  from core.hcq import state
  from core.hcq import callify
  # fresh fake devices start with zeroed signals; the real devices' host timelines stay (their signals keep their values)
  for k in [k for k in callify._host_timelines if k[0].startswith("FAKE")]: del callify._host_timelines[k]
  devs = {n: fakehcq.make_fake(n) for n in ("FAKE", "FAKE:1")}
  state.HOOKS = fakehcq.FakeHooks()
  try:
    with Device.installed(devs): yield devs
  finally:
    state.HOOKS = None
    fakehcq.FAKES.clear()
    for k in [k for k in callify._host_timelines if k[0].startswith("FAKE")]: del callify._host_timelines[k]
