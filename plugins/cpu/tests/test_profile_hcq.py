"""DEBUG=2 and PROFILE=1 on the CPU's command queue: each kernel's time comes from TIMESTAMP packets around its launch (core's
timestamps stage), eagerly and in Jit replays; the direct path (DIRECT+CPU) times the call."""
from __future__ import annotations
import json, os, re, subprocess, sys
import pytest

PROGRAM = """
import numpy as np
from core import Tensor, Jit
a = Tensor(np.arange(4096, dtype=np.float32).reshape(64, 64))
print("RESULT", (a @ a).sum().item())
@Jit
def f(x): return (x * 2 + 1).realize()
for i in range(3): r = f(Tensor(np.full(16, i, np.float32)))
print("JIT", r.numpy().tolist()[:2])
"""
KERNEL = re.compile(r"^\*\*\* (\S+)\s+(\S+)\s+(\d+) (\S+)\s+shape (\[[^\]]*\])\s+tm\s+([\d.]+)us")

def run(tmp_path, dev: str, **env: str) -> str:
  e = {k: v for k, v in os.environ.items() if k not in ("DEBUG", "PROFILE", "PROFILE_PATH")}
  e.update(env, DEV=dev, CORE_CACHE_DIR=str(tmp_path / "cache"))
  r = subprocess.run([sys.executable, "-c", PROGRAM], env=e, capture_output=True, text=True, timeout=300, cwd=tmp_path)
  assert r.returncode == 0, r.stderr
  return re.sub(r"\x1b\[[0-9;]*m", "", r.stdout)

@pytest.mark.parametrize("dev, track", [("CPU", "COMPUTE:0"), ("DIRECT+CPU", "direct")])
def test_debug2_times_every_kernel(tmp_path, dev, track):
  out = run(tmp_path, dev, DEBUG="2")
  ks = [m.groups() for ln in out.splitlines() if (m := KERNEL.match(ln))]
  # the matmul with its sum, and the Jit's kernel on each of its three calls (the replays are reported too)
  assert len(ks) >= 4 and all(k[0] == "CPU" and k[1] == track for k in ks), out
  assert all(float(k[5]) > 0 for k in ks) and [int(k[2]) for k in ks] == list(range(1, len(ks) + 1))
  want = float((__import__("numpy").arange(4096, dtype="float64").reshape(64, 64) @ __import__("numpy").arange(4096, dtype="float64").reshape(64, 64)).sum())
  got = float(out.split("RESULT ")[1].split()[0])
  assert abs(got - want) <= 1e-6 * want and "JIT [5.0, 5.0]" in out
  assert [ln for ln in out.splitlines() if ln.startswith("*** total: ")] == [ln for ln in out.splitlines() if ln.startswith(f"*** total: {len(ks)} kernels")] != []

def test_profile_trace_puts_hcq_kernels_on_their_queue(tmp_path):
  run(tmp_path, "CPU", PROFILE="1")
  evs = json.loads((tmp_path / "profile.json").read_text())["traceEvents"]
  threads = {e["tid"]: e["args"]["name"] for e in evs if e["name"] == "thread_name"}
  kernels = [e for e in evs if e.get("cat") == "kernel"]
  assert len(kernels) >= 4 and {threads[e["tid"]] for e in kernels} == {"COMPUTE:0"}
  assert all(e["dur"] > 0 for e in kernels)
  # kernels of one queue run one after another: sorted by start, none begins before the previous one ended
  ks = sorted(kernels, key=lambda e: e["ts"])
  assert all(b["ts"] >= a["ts"] + a["dur"] - 1e-3 for a, b in zip(ks, ks[1:]))
  assert any(e.get("cat") == "compile" for e in evs)
