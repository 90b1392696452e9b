"""NV on a real NVIDIA GPU: core's conformance suite (the whole op suite) in a subprocess with DEV=NVK+NV (the kernel driver;
NVK_SIM removed, so the real one is used) and DEV=CUDA+NV (the CUDA driver API). Skipped without a GPU (conftest.py)."""
from __future__ import annotations
import os, subprocess, sys
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", "..", ".."))

def env_for(dev: str) -> dict[str, str]:
  env = {k: v for k, v in os.environ.items() if k != "NVK_SIM"}
  env.update(DEV=dev, HCQ_TIMEOUT="30")
  return env

@pytest.mark.parametrize("dev", ["NVK+NV", "CUDA+NV"])
def test_core_conformance_on_the_gpu(dev: str):
  p = subprocess.run([sys.executable, "-m", "pytest", "--core-conformance", "-q", "-p", "no:cacheprovider", "-n", "4"], cwd=ROOT,
                     env=env_for(dev), capture_output=True, text=True, timeout=1800)
  assert p.returncode == 0, p.stdout[-5000:] + p.stderr[-3000:]
