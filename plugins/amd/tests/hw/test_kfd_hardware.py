"""KFD+AMD on a real AMD GPU: the same ops as the simulated-driver tests (tests/kfd_ops.py), then core's conformance suite, each in
a subprocess with DEV=KFD+AMD (and AMD_KFD_SIM removed, so the real driver is used). Skipped without a GPU (conftest.py)."""
from __future__ import annotations
import json, os, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", "..", ".."))

def _env() -> dict:
  env = {k: v for k, v in os.environ.items() if k != "AMD_KFD_SIM"}
  env.update(DEV="KFD+AMD", HCQ_TIMEOUT="30")
  return env

def test_ops_match_numpy_on_the_gpu():
  p = subprocess.run([sys.executable, os.path.join(HERE, "..", "kfd_ops.py")], env=_env(), capture_output=True, text=True, timeout=900)
  lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
  assert p.returncode == 0 and lines, f"{p.stdout[-3000:]}\n{p.stderr[-5000:]}"
  out = json.loads(lines[-1][7:])
  assert out["hcq"] == "KFDHCQ"
  sys.path.insert(0, os.path.dirname(HERE))
  from kfd_ops import BOUNDS
  for op, bound in BOUNDS.items(): assert out[op] <= bound, (op, out[op], bound)

def test_core_conformance_on_the_gpu():
  p = subprocess.run([sys.executable, "-m", "pytest", "--core-conformance", "-q", "-n", "0"], cwd=ROOT, env=_env(), capture_output=True,
                     text=True, timeout=3600)
  assert p.returncode == 0, p.stdout[-5000:]
