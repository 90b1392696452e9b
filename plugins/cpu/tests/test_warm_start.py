"""A warm start (every kernel and the native library in the compile cache) imports no tool runner: subprocess (and what it
pulls in: selectors, locale) is imported only by the functions that run a compiler, which a warm process never calls. What numpy
imports by itself is not ours: on Python 3.10 its `platform` import brings subprocess in."""
import json, os, subprocess, sys

REPORT = """
print("RESULT", json.dumps({"r": r, "mods": sorted(m for m in ("subprocess", "ctypes.util", "llvmlite.binding") if m in sys.modules)}))
"""
FIRST = """
import sys, json
from core import Tensor
r = (Tensor([1., 2., 3.]) + 1).numpy().tolist()
""" + REPORT
NUMPY_ONLY = """
import sys, json
import numpy
r = (numpy.array([1., 2., 3.]) + 1).tolist()
""" + REPORT

def _first(env: dict[str, str], script: str = FIRST) -> dict:
  out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
  assert out.returncode == 0, out.stderr
  return json.loads(next(ln for ln in out.stdout.splitlines() if ln.startswith("RESULT"))[7:])

def test_warm_start_imports_no_subprocess(tmp_path):
  env = {**os.environ, "CORE_CACHE_DIR": str(tmp_path), "DEV": "CPU"}
  assert _first(env)["r"] == [2., 3., 4.]   # cold: compiles its kernels into the cache
  warm = _first(env)
  assert warm == {"r": [2., 3., 4.], "mods": _first(env, NUMPY_ONLY)["mods"]}   # [] on 3.11+
