"""Builds the CPU plugin's native library (thread pool, command processor: plugin_cpu/native/*.c) when the plugin is installed,
so a machine without a C compiler can still run DEV=CPU:LLVM from a wheel. Optional: when no compiler is there at install
time, plugin_cpu.native builds the library on first use instead. CPU_NATIVE_PYTHON adds native/pyentry.c's CPython entries
(this library is also an importable module; the one native.py builds has none). Everything else is in pyproject.toml."""
import hashlib, json, pathlib
from setuptools import Extension, setup

NATIVE = pathlib.Path(__file__).resolve().parent / "plugin_cpu" / "native"
# the same hash as plugin_cpu.native.source_hash(): the runtime uses the prebuilt library only when its sources match
files = {p.name: p.read_text() for p in sorted(NATIVE.iterdir()) if p.suffix in (".c", ".h")}
digest = hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()

setup(ext_modules=[Extension("plugin_cpu._native", sources=[f"plugin_cpu/native/{n}" for n in files if n.endswith(".c")],
                             define_macros=[("CPU_NATIVE_SOURCE_HASH", f'"{digest}"'), ("CPU_NATIVE_PYTHON", "1")],
                             extra_compile_args=["-O2", "-pthread", "-Wall"],
                             extra_link_args=["-pthread"], optional=True)])
