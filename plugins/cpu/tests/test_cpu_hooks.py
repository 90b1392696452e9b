"""plugin-cpu's hook module as core sees it once installed: entry point, DeviceSpec, DEV=CPU:C / CPU:LLVM / NULL:C."""
from __future__ import annotations
import importlib_metadata, pytest
from core.device.plugins import PluginManager
from core.device.target import parse_target
from core.testing.helpers import missing_tool

@pytest.fixture
def pm() -> PluginManager:
  if not any(ep.name == "CPU" for ep in importlib_metadata.entry_points(group="core.plugins")):
    msg = "plugin-cpu is not installed in this environment (.ci/run installs it: pip install ./plugins/cpu)"
    missing_tool(msg)
  return PluginManager()

def test_spec_loads_cleanly_and_is_the_best_device(pm: PluginManager) -> None:
  spec = pm.spec("CPU")
  rec = next(r for r in pm.records() if "CPU" in r.devices)
  assert rec.dist == "plugin-cpu" and rec.error is None and rec.info is not None and rec.info["api"] == (2, 0)
  assert spec.available() and pm.best_device() == "CPU"
  # llvmlite is a dependency of core, so LLVM is always there, and the default
  assert list(spec.renderers) == ["C", "LLVM"] and spec.renderer_name(None) == "LLVM"

@pytest.mark.parametrize("rname", ["C", "LLVM"])
def test_renderer_pairs_compile(pm: PluginManager, rname: str) -> None:
  spec = pm.spec("CPU")
  renderer, compiler = spec.make_renderer(rname)
  assert type(renderer).__name__ == {"C": "CPUCRenderer", "LLVM": "CPULLVMRenderer"}[rname]
  assert type(compiler).__name__ == {"C": "CCompiler", "LLVM": "LLVMCompiler"}[rname]

def test_null_device_borrows_the_c_renderer(pm: PluginManager) -> None:
  from core.device.null import make_null_device
  from core.device.plugins import set_plugins
  set_plugins(pm)
  try:
    assert pm.resolve_target(parse_target("NULL:C")).name == "NULL"
    dev = make_null_device("NULL", parse_target("NULL:C"))
    assert type(dev.renderer).__name__ == "CPUCRenderer"
    lib = dev.compiler.compile("void k(float* restrict a) { a[0] = 1.0f; }")
    assert lib[:4] == b"\x7fELF" and dev.runtime("k", lib)(wait=True) == 0.0
  finally: set_plugins(None)
