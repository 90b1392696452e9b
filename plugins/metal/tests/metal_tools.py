"""The host C++ compiler the Linux checks need (clang++ with _Float16). Missing: the test is skipped, except under CI=true (the
job installs clang-15), where it fails with what to install."""
from __future__ import annotations
import os
import pytest

def need_cxx() -> str:
  from core.device.compiler import CompileError
  from plugin_metal.compiler import find_cxx
  try: return find_cxx()
  except CompileError as e:
    if os.environ.get("CI"): pytest.fail(f"CI=true and no host compiler for MSL: {e}")
    pytest.skip(str(e))
