"""The CPU plugin's hooks: declares the CPU device; its renderer, compiler and runtime are imported only when it is built."""
from __future__ import annotations
import importlib.util, os, shutil
from typing import TYPE_CHECKING, Any
from core.device.hookspecs import hookimpl
from core.device.spec import DeviceSpec

if TYPE_CHECKING:
  from core.ir.pattern import PatternMatcher

__version__ = "0.1.0"

def _has_llvmlite() -> bool: return importlib.util.find_spec("llvmlite") is not None
def _has_cc() -> bool:
  # both renderers need the system C compiler (LLVM links its object file with it); finding it on PATH opens nothing
  return any(shutil.which(c) for c in ([os.environ["CC"]] if os.getenv("CC") else []) + ["clang", "gcc", "cc"])

# the one place the CPU renderers are built: the device factory and the NULL device (compile only) both come here
def make_c(arch: str | None = None) -> tuple[Any, Any]:
  from plugin_cpu.renderer import CPUCRenderer
  from plugin_cpu.compiler import CCompiler
  return CPUCRenderer(), CCompiler(march=arch)

def make_llvm(arch: str | None = None) -> tuple[Any, Any]:
  from plugin_cpu.renderer import CPULLVMRenderer
  from plugin_cpu.compiler import LLVMCompiler
  return CPULLVMRenderer(), LLVMCompiler(cpu=arch)

# the HCQ rules (plugin_cpu.queue) are imported only when core's HCQ pipeline asks for them
@hookimpl
def core_pm_prep_program(device: str) -> PatternMatcher:
  from plugin_cpu.queue import pm_prep_program
  return pm_prep_program

@hookimpl
def core_pm_lower(device: str) -> PatternMatcher:
  from plugin_cpu.queue import pm_lower
  return pm_lower

@hookimpl
def core_pm_bufferize(device: str) -> PatternMatcher:
  from plugin_cpu.queue import pm_bufferize
  return pm_bufferize

@hookimpl
def core_plugin_info() -> dict[str, Any]: return {"name": "cpu", "version": __version__, "api": (2, 0)}

@hookimpl
def core_devices() -> list[DeviceSpec]:
  # LLVM is the default when llvmlite is installed: with the optimizer its kernels run as fast as C's (bench/suite.py: matmul
  # 1024 52 vs 59 GFLOP/s, sum 20 vs 17 GB/s) and a kernel compiles in-process in ~20 ms instead of ~60 ms with the C compiler
  renderers = {"C": "plugin_cpu:make_c", "LLVM": "plugin_cpu:make_llvm"} if _has_llvmlite() else {"C": "plugin_cpu:make_c"}
  return [DeviceSpec("CPU", factory="plugin_cpu.runtime:make_device", renderers=renderers, default_renderer="LLVM" if "LLVM" in renderers else "C",
                     interfaces=("HCQ", "DIRECT"), priority=100, is_available=_has_cc, description="host CPU, kernels compiled to shared objects")]
