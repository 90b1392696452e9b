"""DEBUG=2 on WEBGPU's queues: each kernel's time comes from timestamp queries written by its compute pass (where the
adapter has timestamp-query, as lavapipe does), eagerly and in Jit replays."""
from __future__ import annotations
import os, pathlib, re, subprocess, sys
from typing import Any
import numpy as np

PROGRAM = """
import numpy as np
from core import Tensor, Jit
from core.device.registry import Device
a = Tensor(np.arange(1024, dtype=np.float32).reshape(32, 32), device="WEBGPU")
print("RESULT", (a @ a).sum().item())
@Jit
def f(x): return (x * 2 + 1).realize()
for i in range(3): r = f(Tensor(np.full(16, i, np.float32), device="WEBGPU"))
print("JIT", r.numpy().tolist()[:2])
h = Device["WEBGPU"].hcq
print("TIMED", h.proc.timed, h.proc.queries)
"""
KERNEL = re.compile(r"^\*\*\* (\S+)\s+(\S+)\s+(\d+) (\S+)\s+shape (\[[^\]]*\])\s+tm\s+([\d.]+)us")

def test_debug2_times_every_kernel_with_queries(webgpu: Any, tmp_path: pathlib.Path) -> None:
  e = {k: v for k, v in os.environ.items() if k not in ("DEBUG", "PROFILE", "PROFILE_PATH", "DEV")}
  e.update(DEBUG="2", CORE_CACHE_DIR=str(tmp_path / "cache"))
  r = subprocess.run([sys.executable, "-c", PROGRAM], env=e, capture_output=True, text=True, timeout=300, cwd=tmp_path)
  assert r.returncode == 0, r.stderr
  out = re.sub(r"\x1b\[[0-9;]*m", "", r.stdout)
  ks = [m.groups() for ln in out.splitlines() if (m := KERNEL.match(ln))]
  assert len(ks) >= 4 and all(k[0] == "WEBGPU" and k[1] == "COMPUTE:0" for k in ks), out
  assert all(float(k[5]) > 0 for k in ks)
  m = np.arange(1024, dtype=np.float64).reshape(32, 32)
  want = float((m @ m).sum())
  assert abs(float(out.split("RESULT ")[1].split()[0]) - want) <= 1e-6 * want and "JIT [5.0, 5.0]" in out
  timed, queries = out.split("TIMED ")[1].split()[:2]
  assert queries == "False" or int(timed) >= len(ks)   # every kernel's pair went through the query set
