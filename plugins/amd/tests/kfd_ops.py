"""The ops the KFD+AMD tests run (on the simulated driver in CI, on a real GPU in tests/hw): each result next to numpy's.
Run as a script under DEV=KFD+AMD it prints one JSON line `RESULT {...}`."""
from __future__ import annotations
import json
import numpy as np

def run_ops() -> dict:
  """{name: max abs error against numpy} for a representative set of ops, plus facts about the device that ran them."""
  from core.device.registry import Device
  from core.tensor import Tensor
  rng = np.random.default_rng(0)
  out: dict = {}
  dev = Device["AMD"]
  out["hcq"], out["arch"] = type(dev.hcq).__name__, dev.hcq.arch
  a, b = rng.standard_normal((33, 47)).astype(np.float32), rng.standard_normal((47, 29)).astype(np.float32)
  ta, tb = Tensor(a, device="AMD"), Tensor(b, device="AMD")
  out["copy_in_out"] = float(np.abs(ta.numpy() - a).max())
  out["elementwise"] = float(np.abs(((ta * 3 + 1).exp2() - (ta - 2).abs().sqrt()).numpy() - (np.exp2(a * 3 + 1) - np.sqrt(np.abs(a - 2)))).max())
  out["matmul"] = float(np.abs((ta @ tb).numpy() - a @ b).max())
  out["reduce_sum"] = float(np.abs(ta.sum(1).numpy() - a.sum(1)).max())
  out["reduce_max"] = float(np.abs(ta.max(0).numpy() - a.max(0)).max())
  i = rng.integers(-1000, 1000, (64,), dtype=np.int32)
  out["int32"] = float(np.abs(((Tensor(i, device="AMD") * 7) // 3).numpy() - (i * 7) // 3).max())
  # cross-queue and cross-device: a CPU tensor copied in (the COPY queue waits on the CPU's signal), computed on, copied out
  c = rng.standard_normal((128,)).astype(np.float32)
  t = (Tensor(c, device="CPU").to("AMD") * 2 + Tensor(np.ones(128, np.float32), device="AMD")).to("CPU")
  out["cross_device"] = float(np.abs(t.numpy() - (c * 2 + 1)).max())
  # AMD -> AMD copy (the SDMA engine), then compute on the copy
  out["device_copy"] = float(np.abs((ta.contiguous().clone() + 1).numpy() - (a + 1)).max())
  return out

if __name__ == "__main__":
  print("RESULT " + json.dumps(run_ops()))
