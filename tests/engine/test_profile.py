"""What DEBUG=2 and PROFILE=1 report: a line per kernel and copy with shape, time and rates, a total at exit, and a Chrome
trace of kernels, copies and compiles. Runs on core's PYTHON device (the direct path) in a subprocess, so the exit hook runs;
the CPU plugin's tests cover the HCQ path (times from queue timestamps)."""
from __future__ import annotations
import json, os, re, subprocess, sys
import pytest
from core.device.profiler import Event, chrome_trace

PROGRAM = """
import numpy as np
from core import Tensor
a = Tensor(np.arange(64, dtype=np.float32).reshape(8, 8), device="PYTHON")
b = (a * 2 + 1).sum(1)
print("RESULT", b.numpy().tolist())
c = b.to("PYTHON:1")
print("RESULT2", c.numpy().tolist())
"""

def run(tmp_path, **env: str) -> subprocess.CompletedProcess:
  e = {k: v for k, v in os.environ.items() if k not in ("DEBUG", "PROFILE", "PROFILE_PATH")}
  e.update(env, CORE_CACHE_DIR=str(tmp_path / "cache"))
  r = subprocess.run([sys.executable, "-c", PROGRAM], env=e, capture_output=True, text=True, timeout=300, cwd=tmp_path)
  assert r.returncode == 0, r.stderr
  return r

KERNEL = re.compile(r"^\*\*\* (\S+)\s+(\S+)\s+(\d+) (\S+)\s+shape (\[[^\]]*\])\s+tm\s+([\d.]+)us \(\s*([\d.]+) GFLOP/s\s+([\d.]+) GB/s\)$")

def test_debug2_prints_each_kernel_with_shape_time_and_rates_and_a_total(tmp_path):
  out = run(tmp_path, DEBUG="2").stdout
  plain = re.sub(r"\x1b\[[0-9;]*m", "", out)
  lines = [m for ln in plain.splitlines() if (m := KERNEL.match(ln))]
  assert lines, out
  dev, track, seq, name, shape, tm, gflops, gbs = lines[0].groups()
  assert (dev, track, seq) == ("PYTHON", "direct", "1") and float(tm) > 0 and json.loads(shape)
  assert any(ln.startswith("*** PYTHON:1") and " copy " in ln and "from PYTHON" in ln for ln in plain.splitlines()), out
  total = [ln for ln in plain.splitlines() if ln.startswith("*** total: ")]
  assert len(total) == 1 and f"{len(lines)} kernels" in total[0]
  assert "RESULT [64.0, 192.0, 320.0, 448.0, 576.0, 704.0, 832.0, 960.0]" in out

def test_profile_writes_a_chrome_trace_of_kernels_copies_and_compiles(tmp_path):
  out = run(tmp_path, PROFILE="1", PROFILE_PATH=str(tmp_path / "trace.json")).stdout
  assert "*** profile:" in out and "*** total" not in out   # no DEBUG output asked for
  trace = json.loads((tmp_path / "trace.json").read_text())
  evs = trace["traceEvents"]
  spans = [e for e in evs if e["ph"] == "X"]
  assert {e["cat"] for e in spans} == {"kernel", "copy", "compile"}
  for e in spans: assert e["dur"] >= 0 and isinstance(e["ts"], float) and e["pid"] >= 1 and e["tid"] >= 1
  names = {e["args"]["name"] for e in evs if e["ph"] == "M" and e["name"] == "process_name"}
  assert names == {"PYTHON", "PYTHON:1"}
  kernels = [e for e in spans if e["cat"] == "kernel"]
  assert all(e["args"]["shape"] and e["args"]["ops"] >= 0 for e in kernels)
  assert [e for e in spans if e["cat"] == "copy"][0]["args"]["bytes"] == 32

def test_profile_default_path_is_profile_json_in_the_working_folder(tmp_path):
  run(tmp_path, PROFILE="1")
  assert json.loads((tmp_path / "profile.json").read_text())["traceEvents"]

def test_chrome_trace_gives_each_device_a_process_and_each_queue_a_thread():
  evs = [Event("kernel", "k", "AMD", "COMPUTE:0", 1000, 500), Event("copy", "c", "AMD", "COPY:0", 2000, 250, {"bytes": 8}),
         Event("kernel", "k2", "CPU", "COMPUTE:0", 3000, 100)]
  t = chrome_trace(evs)["traceEvents"]
  procs = {e["args"]["name"]: e["pid"] for e in t if e["name"] == "process_name"}
  threads = {(e["pid"], e["args"]["name"]): e["tid"] for e in t if e["name"] == "thread_name"}
  assert set(procs) == {"AMD", "CPU"} and len(threads) == 3
  x = [e for e in t if e["ph"] == "X"]
  assert [(e["ts"], e["dur"]) for e in x] == [(1.0, 0.5), (2.0, 0.25), (3.0, 0.1)]
  assert x[1]["tid"] == threads[(procs["AMD"], "COPY:0")] != x[0]["tid"]

@pytest.mark.parametrize("level", ["0", "1"])
def test_no_report_below_debug2(tmp_path, level):
  out = run(tmp_path, DEBUG=level).stdout
  assert "***" not in out and not (tmp_path / "profile.json").exists()
