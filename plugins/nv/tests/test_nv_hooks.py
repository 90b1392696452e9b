"""The NV plugin's registration: its entry point and hooks, the PTX renderer borrowed by NULL, which interfaces open."""
from __future__ import annotations
from typing import Any
import pytest
from core.testing.plugin_checks import plugin_manager, check_registration

@pytest.fixture
def pm() -> Any: return plugin_manager("NV", "plugin-nv")

def test_entry_point_spec_and_hooks(pm: Any) -> None:
  spec = check_registration(pm, "NV", "plugin-nv", "plugin_nv", ("NVK", "CUDA", "MOCK"), ["PTX", "CUDA"])
  assert spec.default_renderer == "PTX" and spec.priority == 60
  assert spec.unavailable_reason is not None and "DEV=MOCK+NV runs on the software GPU" in spec.unavailable_reason()

def test_the_hcq_rules_are_the_hooks(pm: Any) -> None:
  from plugin_nv.prep import pm_prep_program
  from plugin_nv.lower import pm_lower
  from plugin_nv.bufferize import pm_bufferize
  assert pm.pm_prep_program("NV") is pm_prep_program and pm.pm_lower("NV") is pm_lower and pm.pm_bufferize("NV:1") is pm_bufferize

def test_lowering_needs_the_nv_hcq_object() -> None:
  from core.device.hcq import EncodeCtx, HCQDevice
  from core.hcq import queue_ir as qi
  from core.ir.pattern import graph_rewrite
  from plugin_nv.lower import lower_compute_barrier, pm_lower
  from plugin_nv.runtime import NVHCQ
  class Other(HCQDevice):
    queues = ("COMPUTE:0",)
    arch = "sm_90"   # an arch alone does not make an NV device
    def ring_size(self, queue: str) -> int: return 4096
    def wait_signal(self, signal: Any, value: int, timeout_s: float) -> None: pass
  with pytest.raises(TypeError, match="its HCQ object is a Other, not an NVHCQ"):
    graph_rewrite(qi.barrier(), pm_lower, EncodeCtx(Other(), "NV", "COMPUTE:0"), bottom_up=True)
  got = graph_rewrite(qi.barrier(), pm_lower, EncodeCtx(NVHCQ("NV", "sm_90"), "NV", "COMPUTE:0"), bottom_up=True)
  assert got is lower_compute_barrier()

def test_available_only_with_the_kernel_driver(pm: Any) -> None:
  from plugin_nv.nvk import gpu_present
  assert pm.spec("NV").available() is gpu_present()
  if not gpu_present(): assert pm.best_device() != "NV"

@pytest.mark.skipif(__import__("plugin_nv.nvk", fromlist=["gpu_present"]).gpu_present(), reason="this machine has the NVIDIA driver")
def test_without_a_driver_the_hardware_interfaces_say_what_is_missing(pm: Any, monkeypatch: Any) -> None:
  from core.device.spec import resolve
  from core.device.target import Target
  from plugin_nv import iface_cuda
  monkeypatch.delenv("NVK_SIM", raising=False)
  spec = pm.spec("NV")
  for iface in ("NVK", None):   # DEV=NV means the kernel driver, not the software GPU
    with pytest.raises(OSError, match="NVK\\+NV needs /dev/nvidiactl .*Use MOCK\\+NV for the software GPU, NVK_SIM=sm_90"):
      resolve(spec.factory)("NV", Target(interface=iface, device="NV"))
  if iface_cuda.find_libcuda() is None:
    with pytest.raises(iface_cuda.CUDAError, match="CUDA\\+NV needs libcuda.so.1"):
      resolve(spec.factory)("NV", Target(interface="CUDA", device="NV"))
  with pytest.raises(ValueError, match="NV has no interface .KFD."): resolve(spec.factory)("NV", Target(interface="KFD", device="NV"))

def test_ptx_renderer_for_each_arch(pm: Any) -> None:
  from plugin_nv.renderer import PTXRenderer
  from plugin_nv.compiler import PTXCompiler
  renderer, compiler = pm.spec("NV").make_renderer("PTX", "sm_80")
  assert isinstance(renderer, PTXRenderer) and isinstance(compiler, PTXCompiler)
  assert renderer.arch == "sm_80" and compiler.info.name == "sm_80"
  assert pm.spec("NV").make_renderer(None)[0].arch == "sm_90"   # the default arch
  with pytest.raises(ValueError, match="NV arch 'sm_70' is not supported"): pm.spec("NV").make_renderer("PTX", "sm_70")

def test_null_device_borrows_the_ptx_renderer(pm: Any) -> None:
  # DEV=NULL:NV:<arch> (NV's default renderer) and DEV=NULL:PTX:<arch> (the renderer by name) both compile with it
  from core.device.null import make_null_device
  from core.device.plugins import get_plugins
  from core.device.target import parse_target
  from plugin_nv.renderer import PTXRenderer
  for dev, arch in (("NULL:NV:sm_80", "sm_80"), ("NULL:PTX:sm_120", "sm_120"), ("NULL:NV", "sm_90"), ("NULL:NV:PTX:sm_86", "sm_86")):
    get_plugins().resolve_target(parse_target(dev))   # what opening DEV does first (it reads the entry points)
    d = make_null_device("NULL", parse_target(dev))
    assert isinstance(d.renderer, PTXRenderer) and d.renderer.arch == arch and d.compiler.info.name == arch

def test_hook_module_imports_nothing_heavy() -> None:
  import subprocess, sys
  code = "import sys, plugin_nv; print(sorted(m for m in ('llvmlite', 'plugin_nv.renderer', 'plugin_nv.compiler') if m in sys.modules))"
  assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "[]"

def test_null_device_borrows_the_cuda_renderer(pm: Any) -> None:
  # DEV=NULL:NV:CUDA:<arch> or NULL:CUDA:<arch>: the CUDA C renderer (the name CUDA is NV's alone), compiled by NVRTC
  from core.device.null import make_null_device
  from core.device.plugins import get_plugins
  from core.device.target import parse_target
  from plugin_nv.renderer import CUDARenderer
  from plugin_nv.compiler import NVRTCCompiler
  for dev, arch in (("NULL:CUDA:sm_80", "sm_80"), ("NULL:CUDA", "sm_90"), ("NULL:NV:CUDA:sm_120", "sm_120")):
    get_plugins().resolve_target(parse_target(dev))
    d = make_null_device("NULL", parse_target(dev))
    assert isinstance(d.renderer, CUDARenderer) and isinstance(d.compiler, NVRTCCompiler)
    assert d.renderer.arch == arch and d.compiler.info.name == arch
