"""The host C++ compiler the Linux checks need (clang++ with _Float16). Missing: the test is skipped, except under CI=true (the
job installs clang-15), where it fails with what to install."""
from __future__ import annotations
import json, os, subprocess, sys
from typing import Any
from core.testing.helpers import missing_tool

def need_cxx() -> str:
  from core.device.compiler import CompileError
  from plugin_metal.compiler import find_cxx
  try: return find_cxx()
  except CompileError as e:
    missing_tool(f"no host compiler for MSL: {e}")

def run_mock_script(script: str) -> dict[str, Any]:
  """Runs `script` in a subprocess with DEV=MOCK+METAL (the registry reads DEV once) and returns the JSON it prints after "RESULT "."""
  need_cxx()
  p = subprocess.run([sys.executable, "-c", script], env=dict(os.environ, DEV="MOCK+METAL"), capture_output=True, text=True, timeout=1200)
  assert p.returncode == 0, f"exit {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-6000:]}"
  return json.loads(next(ln for ln in p.stdout.splitlines() if ln.startswith("RESULT "))[7:])
