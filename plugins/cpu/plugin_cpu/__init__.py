"""The CPU plugin's hooks: declares the CPU device; its renderer, compiler and runtime are imported only when it is built."""
from __future__ import annotations
import os, pathlib
from typing import Any
from core.device.hookspecs import hookimpl, hcq_rules
from core.device.spec import DeviceSpec
from core.helpers import host_machine

__version__ = "0.1.0"

def is_available() -> bool:
  """A C compiler on PATH, or on x86-64 the native library built at install time (LLVM kernels are then loaded in process with
  no compiler at all); looking opens nothing. The library is looked for first: where it is there, shutil (and the bz2 and lzma
  modules it imports, ~2 ms) is not imported at all."""
  # listed, not globbed: a glob compiles its pattern to a regular expression (~0.4M instructions)
  if host_machine() == "x86_64" and any(n.startswith("_native") and n.endswith(".so") for n in os.listdir(pathlib.Path(__file__).parent)): return True
  import shutil
  return any(shutil.which(c) for c in ([os.environ["CC"]] if os.getenv("CC") else []) + ["clang", "gcc", "cc"])

def unavailable_reason() -> str:
  return ("no C compiler on PATH (CC, clang, gcc, cc) to build the plugin's native library, and no prebuilt one (it is built when the "
          "plugin is installed on a machine with a compiler). Install gcc or clang (apt install gcc), then reinstall the plugin")

# the one place the CPU renderers are built: the device factory and the NULL device (compile only) both come here
def make_c(arch: str | None = None) -> tuple[Any, Any]:
  from plugin_cpu.c_renderer import CPUCRenderer
  from plugin_cpu.compiler import CCompiler
  return CPUCRenderer(arch=arch), CCompiler(march=arch)

def make_llvm(arch: str | None = None) -> tuple[Any, Any]:
  from plugin_cpu.renderer import CPULLVMRenderer
  from plugin_cpu.compiler import LLVMCompiler
  return CPULLVMRenderer(arch=arch), LLVMCompiler(cpu=arch)

# the HCQ rules (plugin_cpu.queue) are imported only when core's HCQ pipeline asks for them
core_pm_prep_program, core_pm_lower, core_pm_bufferize = hcq_rules("plugin_cpu.queue:pm_prep_program", "plugin_cpu.queue:pm_lower",
                                                                 "plugin_cpu.queue:pm_bufferize")

@hookimpl
def core_plugin_info() -> dict[str, Any]: return {"name": "cpu", "version": __version__, "api": (2, 0)}

@hookimpl
def core_devices() -> list[DeviceSpec]:
  # LLVM is the default: with the optimizer its kernels run as fast as C's (bench/suite.py: matmul 1024 52 vs 59 GFLOP/s, sum
  # 20 vs 17 GB/s) and a kernel compiles in-process in ~20 ms instead of ~60 ms with the C compiler
  return [DeviceSpec("CPU", factory="plugin_cpu.runtime:make_device", renderers={"C": "plugin_cpu:make_c", "LLVM": "plugin_cpu:make_llvm"},
                     default_renderer="LLVM", interfaces=("HCQ", "DIRECT"), priority=100, is_available=is_available, unavailable_reason=unavailable_reason,
                     description="host CPU, kernels compiled to shared objects")]
