"""Compare the CPU plugin's renderers (C vs LLVM) with numpy on a few kernels: steady-state time and first-call time.
Run: python bench/renderers.py   (each DEV runs in its own process, so the compile caches don't mix)"""
from __future__ import annotations
import json, os, subprocess, sys, time

WORK = {"matmul 256": "a @ b", "a*b+1 on 1M": "x * y + 1", "sum of 1M": "x.sum()"}

def measure_core(dev: str) -> dict[str, tuple[float, float]]:
  code = f"""
import time, json, numpy as np
from core import Tensor
rng = np.random.default_rng(0)
a, b = Tensor(rng.standard_normal((256, 256), dtype=np.float32)).realize(), Tensor(rng.standard_normal((256, 256), dtype=np.float32)).realize()
x, y = Tensor(rng.standard_normal(1 << 20, dtype=np.float32)).realize(), Tensor(rng.standard_normal(1 << 20, dtype=np.float32)).realize()
out = {{}}
for name, expr in {WORK!r}.items():
  st = time.perf_counter(); eval(expr).realize(); first = time.perf_counter() - st
  ts = []
  for _ in range(20):
    st = time.perf_counter(); eval(expr).realize(); ts.append(time.perf_counter() - st)
  out[name] = (first, min(ts))
print(json.dumps(out))
"""
  env = {**os.environ, "DEV": dev, "CORE_DISABLE_COMPILER_CACHE": "1"}
  res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
  if res.returncode != 0: raise RuntimeError(f"DEV={dev} failed:\n{res.stderr[-2000:]}")
  return {k: tuple(v) for k, v in json.loads(res.stdout.strip().splitlines()[-1]).items()}

def measure_numpy() -> dict[str, float]:
  import numpy as np
  rng = np.random.default_rng(0)
  env = {"a": rng.standard_normal((256, 256), dtype=np.float32), "b": rng.standard_normal((256, 256), dtype=np.float32),
         "x": rng.standard_normal(1 << 20, dtype=np.float32), "y": rng.standard_normal(1 << 20, dtype=np.float32)}
  out = {}
  for name, expr in WORK.items():
    ts = []
    for _ in range(20):
      st = time.perf_counter(); eval(expr, {}, env); ts.append(time.perf_counter() - st)
    out[name] = min(ts)
  return out

if __name__ == "__main__":
  results = {dev: measure_core(dev) for dev in ("CPU:C", "CPU:LLVM")}
  npy = measure_numpy()
  print(f"{'work':16s} {'numpy':>10s} " + " ".join(f"{d + ' run':>14s} {'x numpy':>8s} {'first call':>11s}" for d in results))
  for name in WORK:
    row = f"{name:16s} {npy[name]*1e3:8.3f}ms "
    for dev, r in results.items():
      first, best = r[name]
      row += f"{best*1e3:12.3f}ms {npy[name]/best:8.2f} {first*1e3:9.1f}ms "
    print(row)
