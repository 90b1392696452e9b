"""Shared by the bench tests: a script of bench/ loaded as a module (bench/ is not a package)."""
from __future__ import annotations
import importlib.util, pathlib, sys
from types import ModuleType

ROOT = pathlib.Path(__file__).resolve().parents[2]

def load_bench(name: str) -> ModuleType:
  """bench/<name>.py run as the module bench_<name> (registered first: dataclasses look their module up while a class is built)."""
  spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "bench" / f"{name}.py")
  assert spec is not None and spec.loader is not None
  mod = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod
