"""Jit replay cost per kernel: the HCQ path (DEV=CPU: patch inputs, one submit program, wait on a signal) versus the direct
path (DEV=DIRECT+CPU: one ctypes call per kernel). Small tensors, so the time is the launch overhead, not the math.
Run: python bench/hcq_replay.py   (each DEV runs in its own process)"""
from __future__ import annotations
import json, os, subprocess, sys

CODE = """
import time, json, numpy as np
from core import Tensor
from core.tensor.jit import Jit
KERNELS = {kernels}
@Jit
def f(x):
  for i in range(KERNELS): x = (x * 1.0001 + 1).contiguous()
  return x
out = {{}}
for n in (1, 2, 3): f(Tensor(np.ones(16, np.float32))).realize()   # eager, capture, first replay
xs = [Tensor(np.full(16, i, np.float32)).realize() for i in range(4)]
ts = []
for r in range(30):
  st = time.perf_counter(); f(xs[r % 4]).realize(); ts.append(time.perf_counter() - st)
print(json.dumps({{"per_kernel_us": min(ts) / KERNELS * 1e6, "replay": type(f.replay).__name__}}))
"""

def measure(dev: str, kernels: int) -> dict:
  res = subprocess.run([sys.executable, "-c", CODE.format(kernels=kernels)], env={**os.environ, "DEV": dev}, capture_output=True, text=True)
  if res.returncode != 0: raise RuntimeError(f"DEV={dev} failed:\n{res.stderr[-2000:]}")
  return json.loads(res.stdout.strip().splitlines()[-1])

if __name__ == "__main__":
  for k in (1, 10, 50):
    hcq, direct = measure("CPU", k), measure("DIRECT+CPU", k)
    print(f"{k:3d} kernels: HCQ ({hcq['replay']}) {hcq['per_kernel_us']:8.2f} us/kernel   direct ({direct['replay']}) "
          f"{direct['per_kernel_us']:8.2f} us/kernel   HCQ/direct {hcq['per_kernel_us'] / direct['per_kernel_us']:.2f}x")
