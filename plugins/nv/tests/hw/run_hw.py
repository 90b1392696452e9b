"""The NV plugin on an NVIDIA GPU, in one go (meant to finish in under 8 minutes on one GPU): core's conformance suite on every
interface this machine has (NVK+NV: /dev/nvidiactl; CUDA+NV: libcuda), then fp16 and fp32 4096x4096 matmul timings on each,
against torch (cuBLAS) when torch with CUDA is installed. Prints a summary; exits 1 when a conformance run fails.

  python plugins/nv/tests/hw/run_hw.py [--skip-conformance] [--size 4096] [--iters 10]

Target (issue 17): fp16 matmul at least 0.5x cuBLAS. The ratio is printed, never asserted. This script has not run yet: no
machine with an NVIDIA GPU was available where it was written."""
from __future__ import annotations
import argparse, json, os, subprocess, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", "..", ".."))
sys.path.insert(0, HERE)
from conftest import has_interface  # noqa: E402

CONFORMANCE_TIMEOUT_S = 150   # per interface: two interfaces and the timings stay under 8 minutes

MATMUL = r'''
import json, sys, time
import numpy as np
from core import Tensor
from core.device.registry import Device
n, iters, dt = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
npdt = np.float16 if dt == "half" else np.float32
rng = np.random.default_rng(0)
a, b = Tensor(rng.standard_normal((n, n)).astype(npdt)).realize(), Tensor(rng.standard_normal((n, n)).astype(npdt)).realize()
dev = Device[Device.DEFAULT]
c = (a @ b).realize()   # compile and warm up
dev.synchronize()
best = float("inf")
for _ in range(iters):
  t = time.perf_counter()
  c = (a @ b).realize()
  dev.synchronize()
  best = min(best, time.perf_counter() - t)
ref = a.numpy()[:64].astype(np.float32) @ b.numpy().astype(np.float32)
err = float(np.abs(c.numpy()[:64].astype(np.float32) - ref).max() / np.abs(ref).max())
print("RESULT " + json.dumps({"s": best, "tflops": 2 * n ** 3 / best / 1e12, "rel_err": err}))
'''

def conformance(dev: str) -> tuple[bool, str]:
  env = {k: v for k, v in os.environ.items() if k != "NVK_SIM"}
  env.update(DEV=dev, HCQ_TIMEOUT="30")
  try:
    p = subprocess.run([sys.executable, "-m", "pytest", "--core-conformance", "-q", "-p", "no:cacheprovider", "-n", "8"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=CONFORMANCE_TIMEOUT_S)
  except subprocess.TimeoutExpired: return False, f"timed out after {CONFORMANCE_TIMEOUT_S} s"
  tail = [ln for ln in p.stdout.splitlines() if " passed" in ln or " failed" in ln]
  return p.returncode == 0, tail[-1] if tail else p.stdout[-500:]

def core_matmul(dev: str, n: int, iters: int, dt: str) -> dict | str:
  env = {k: v for k, v in os.environ.items() if k != "NVK_SIM"}
  env.update(DEV=dev)
  try: p = subprocess.run([sys.executable, "-c", MATMUL, str(n), str(iters), dt], env=env, capture_output=True, text=True, timeout=120)
  except subprocess.TimeoutExpired: return "timed out after 120 s"
  lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
  return json.loads(lines[-1][7:]) if lines else (p.stderr.strip().splitlines() or ["no output"])[-1]

def torch_matmul(n: int, iters: int, dt: str) -> dict | str:
  try: import torch
  except ImportError: return "torch not installed"
  if not torch.cuda.is_available(): return "torch has no CUDA device"
  tdt = torch.float16 if dt == "half" else torch.float32
  torch.backends.cuda.matmul.allow_tf32 = False   # fp32 as fp32, as core computes it
  a, b = torch.randn(n, n, dtype=tdt, device="cuda"), torch.randn(n, n, dtype=tdt, device="cuda")
  a @ b
  torch.cuda.synchronize()
  best = float("inf")
  for _ in range(iters):
    t = time.perf_counter()
    a @ b
    torch.cuda.synchronize()
    best = min(best, time.perf_counter() - t)
  return {"s": best, "tflops": 2 * n ** 3 / best / 1e12}

def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--skip-conformance", action="store_true")
  ap.add_argument("--size", type=int, default=4096)
  ap.add_argument("--iters", type=int, default=10)
  args = ap.parse_args()
  start, failed = time.monotonic(), False
  devs = [d for d, i in (("NVK+NV", "NVK"), ("CUDA+NV", "CUDA")) if has_interface(i) is None]
  if not devs:
    print(f"no NVIDIA GPU here: {has_interface('NVK')}; {has_interface('CUDA')}. Nothing ran.")
    return 2
  for dev in devs if not args.skip_conformance else []:
    ok, line = conformance(dev)
    failed |= not ok
    print(f"conformance {dev}: {'ok' if ok else 'FAILED'}: {line}", flush=True)
  for dt in ("half", "float"):
    ref = torch_matmul(args.size, args.iters, dt)
    print(f"matmul {args.size} {dt} torch/cuBLAS: {ref}", flush=True)
    for dev in devs:
      got = core_matmul(dev, args.size, args.iters, dt)
      ratio = f", {got['tflops'] / ref['tflops']:.2f}x cuBLAS" if isinstance(got, dict) and isinstance(ref, dict) else ""
      target = " (target for fp16: >= 0.5x)" if dt == "half" and ratio else ""
      print(f"matmul {args.size} {dt} {dev}: {got}{ratio}{target}", flush=True)
  print(f"done in {time.monotonic() - start:.0f} s")
  return 1 if failed else 0

if __name__ == "__main__": sys.exit(main())
