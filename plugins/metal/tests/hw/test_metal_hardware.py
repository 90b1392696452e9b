"""DEV=METAL on a Mac: the MOCK device's checks (test_mock_device.py's script) and core's conformance suite, each in a subprocess.
Skipped without Metal (conftest.py). Never run yet: no Mac was available where the MTL interface was written."""
from __future__ import annotations
import json, os, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", "..", ".."))

def test_tensor_programs_match_numpy_on_the_gpu() -> None:
  sys.path.insert(0, os.path.dirname(HERE))
  from test_mock_device import SCRIPT
  p = subprocess.run([sys.executable, "-c", SCRIPT], env=dict(os.environ, DEV="METAL", HCQ_TIMEOUT="30"), capture_output=True, text=True, timeout=1200)
  lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
  assert p.returncode == 0 and lines, f"{p.stdout[-3000:]}\n{p.stderr[-5000:]}"
  out = json.loads(lines[-1][7:])
  assert out["hcq"] == "MtlHCQ" and out["matmul"] < 1e-3 and out["softmax"] < 1e-5 and out["int"] is True and out["jit"] < 1e-4
  assert out["blit"] is True and out["after_fault"] == 7

def test_core_conformance_on_the_gpu() -> None:
  p = subprocess.run([sys.executable, "-m", "pytest", "--core-conformance", "-q", "-n", "0"], cwd=ROOT, env=dict(os.environ, DEV="METAL"),
                     capture_output=True, text=True, timeout=3600)
  assert p.returncode == 0, p.stdout[-5000:]
