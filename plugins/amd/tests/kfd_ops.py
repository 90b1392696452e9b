"""The ops the KFD+AMD tests run (on the simulated driver in CI, on a real GPU in tests/hw): each result next to numpy's.
Run as a script under DEV=KFD+AMD it prints one JSON line `RESULT {...}`."""
from __future__ import annotations
import json, math
import numpy as np

# what each error may be: copies, max, int32 and the float ops of cross_device/device_copy (x*2 is exact, then one rounding,
# as numpy's) are exact; elementwise is relative: its exp2 input 3a + 1 (|.| <= 13) is rounded to float32, which exp2 turns into
# up to 13 * ln 2 * 2**-24 of relative error, plus a few ulp (2**-23) of exp2, sqrt and the subtraction. matmul and reduce_sum
# are float32 sums of K = 47 terms in whatever order (and with or without FMA) the device adds them: the classic bound on such
# a sum is K * 2**-24 (one rounding of each term's share, gamma_K to first order) times the sum of the terms' magnitudes, so
# their errors are measured against float64 in units of that sum and bounded by K * 2**-24 whatever the device, host or compiler
K = 47
BOUNDS = {"copy_in_out": 0.0, "elementwise": 13 * math.log(2) * 2**-24 + 8 * 2**-23, "matmul": K * 2**-24, "reduce_sum": K * 2**-24,
          "reduce_max": 0.0, "int32": 0.0, "cross_device": 0.0, "device_copy": 0.0}

def run_ops() -> dict:
  """{name: max error against numpy (absolute; relative for "elementwise"; for "matmul" and "reduce_sum" against float64 in units
  of the sum of the terms' magnitudes)} for a representative set of ops, plus facts about the device that ran them."""
  from core.device.registry import Device
  from core.tensor import Tensor
  rng = np.random.default_rng(0)
  out: dict = {}
  dev = Device["AMD"]
  out["hcq"], out["arch"] = type(dev.hcq).__name__, dev.hcq.arch
  a, b = rng.standard_normal((33, K)).astype(np.float32), rng.standard_normal((K, 29)).astype(np.float32)
  ta, tb = Tensor(a, device="AMD"), Tensor(b, device="AMD")
  out["copy_in_out"] = float(np.abs(ta.numpy() - a).max())
  # exp2(3a + 1) reaches 2**13, where a float32 ulp is 1e-3: the error is relative to the value (one that is < 1 counts as 1)
  want = np.exp2(a.astype(np.float64) * 3 + 1) - np.sqrt(np.abs(a.astype(np.float64) - 2))
  got = ((ta * 3 + 1).exp2() - (ta - 2).abs().sqrt()).numpy()
  out["elementwise"] = float((np.abs(got - want) / np.maximum(np.abs(want), 1)).max())
  a64, b64 = a.astype(np.float64), b.astype(np.float64)
  out["matmul"] = float((np.abs((ta @ tb).numpy() - a64 @ b64) / (np.abs(a64) @ np.abs(b64))).max())
  out["reduce_sum"] = float((np.abs(ta.sum(1).numpy() - a64.sum(1)) / np.abs(a64).sum(1)).max())
  out["reduce_max"] = float(np.abs(ta.max(0).numpy() - a.max(0)).max())
  i = rng.integers(-1000, 1000, (64,), dtype=np.int32)
  out["int32"] = float(np.abs(((Tensor(i, device="AMD") * 7) // 3).numpy() - (i * 7) // 3).max())
  # cross-device: a tensor of core's built-in PYTHON device copied in, computed on, copied out
  c = rng.standard_normal((128,)).astype(np.float32)
  t = (Tensor(c, device="PYTHON").to("AMD") * 2 + Tensor(np.ones(128, np.float32), device="AMD")).to("PYTHON")
  out["cross_device"] = float(np.abs(t.numpy() - (c * 2 + 1)).max())
  # AMD -> AMD copy (the SDMA engine), then compute on the copy
  out["device_copy"] = float(np.abs((ta.contiguous().clone() + 1).numpy() - (a + 1)).max())
  return out

if __name__ == "__main__":
  print("RESULT " + json.dumps(run_ops()))
