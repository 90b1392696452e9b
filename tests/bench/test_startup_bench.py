"""bench/startup.py runs: cold and warm start-up rows from new processes, with which of them loaded LLVM."""
from __future__ import annotations
import re
from bench_scripts import load_bench

def test_startup_bench_prints_cold_and_warm_rows(capsys):
  mod = load_bench("startup")
  mod.main(["--runs", "1", "--dev", "CPU:LLVM"])
  out = capsys.readouterr().out
  rows = {m.group(1): m for m in re.finditer(r"^\s+(cold compile cache|warm compile cache|import numpy \(reference\))\s+in-process\s+(\d+) ms"
                                              r".*cpu\s+(\d+) ms.*llvmlite loaded in (\d)/1$", out, re.M)}
  assert set(rows) == {"cold compile cache", "warm compile cache", "import numpy (reference)"}, out
  assert all(int(m.group(2)) > 0 for m in rows.values()), out
  # the cold run compiled (LLVM loaded); the warm one found everything in the cache the cold run filled
  assert rows["cold compile cache"].group(4) == "1" and rows["warm compile cache"].group(4) == "0", out
