"""The CPU plugin's hooks: declares the CPU device; its renderer, compiler and runtime are imported only when it is built."""
from __future__ import annotations
import importlib.util, os, shutil
from typing import Any
from core.device.hookspecs import hookimpl
from core.device.spec import DeviceSpec

__version__ = "0.1.0"

def _has_llvmlite() -> bool: return importlib.util.find_spec("llvmlite") is not None
def _has_cc() -> bool:
  # both renderers need the system C compiler (LLVM links its object file with it); finding it on PATH opens nothing
  return any(shutil.which(c) for c in ([os.environ["CC"]] if os.getenv("CC") else []) + ["clang", "gcc", "cc"])

def make_c(arch: str | None = None) -> tuple[Any, Any]:
  from plugin_cpu.renderer import CPUCRenderer
  from plugin_cpu.compiler import CCompiler
  return CPUCRenderer(), CCompiler()

def make_llvm(arch: str | None = None) -> tuple[Any, Any]:
  from plugin_cpu.renderer import CPULLVMRenderer
  from plugin_cpu.compiler import LLVMCompiler
  return CPULLVMRenderer(), LLVMCompiler()

def _is_cpu(device: str) -> bool: return device.split(":")[0].upper() == "CPU"

# the HCQ rules live in plugin_cpu.hcq, imported only when core's HCQ pipeline asks for them
@hookimpl
def core_pm_prep_program(device: str) -> Any:
  if not _is_cpu(device): return None
  from plugin_cpu.hcq import pm_prep_program
  return pm_prep_program

@hookimpl
def core_pm_lower(device: str) -> Any:
  if not _is_cpu(device): return None
  from plugin_cpu.hcq import pm_lower
  return pm_lower

@hookimpl
def core_pm_bufferize(device: str) -> Any:
  if not _is_cpu(device): return None
  from plugin_cpu.hcq import pm_bufferize
  return pm_bufferize

@hookimpl
def core_plugin_info() -> dict[str, Any]: return {"name": "cpu", "version": __version__, "api": (1, 0)}

@hookimpl
def core_devices() -> list[DeviceSpec]:
  # C is the default: bench/renderers.py measured its kernels faster (matmul 256: 6.8 ms vs 28 ms for LLVM)
  renderers = {"C": "plugin_cpu:make_c", "LLVM": "plugin_cpu:make_llvm"} if _has_llvmlite() else {"C": "plugin_cpu:make_c"}
  return [DeviceSpec("CPU", factory="plugin_cpu.runtime:make_device", renderers=renderers, default_renderer="C",
                     interfaces=("HCQ", "DIRECT"), priority=100, is_available=_has_cc, description="host CPU, kernels compiled to shared objects")]
