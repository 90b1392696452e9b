"""Faults stay contained: a kernel that reads a wild address raises an error naming the kernel and the address, on every
interface (the HCQ and direct CPU, an HCQ MOCK device), and the device gives correct results right after. Each case runs in a
subprocess (a regression would kill the process, not fail a test)."""
from __future__ import annotations
import json, os, subprocess, sys
import pytest

# the wild address comes from a corrupted argument: a foreign pointer (Tensor.from_blob) where the device can take one, else
# the input address patched into a cached HCQ submission overwritten with it
PROGRAM = r"""
import json, struct, sys
import numpy as np
from core import Tensor
from core.device.registry import Device
WILD = 0x10
x = Tensor(np.arange(64, dtype=np.float32)).realize()
dev = Device[x.device]
out = {"device": x.device, "hcq": dev.hcq is not None}
def attempt(fn):
  try:
    fn()
    return None
  except Exception as e: return [type(e).__name__, str(e)]
if getattr(dev.allocator, "supports_external_ptr", False):
  out["how"] = "from_blob"
  out["error"] = attempt(lambda: (Tensor.from_blob(WILD, (64,), dtype="float32") + 1).numpy())
else:
  out["how"] = "patched submission"
  np.testing.assert_equal((x + 1).numpy(), np.arange(64) + 1)   # lowers and caches this schedule's submission
  from core.engine.run import _submissions
  sub = next(reversed(_submissions.values()))
  for i, view, target, off, fmt, mask, *_ in sub._fast_patches:
    if i != 1: continue   # slot 1: the input x (slot 0 is the result)
    if view is not None: struct.pack_into(fmt, view, off, WILD & mask)
    else:
      from core.hcq.patches import write_value
      write_value(target, off, WILD, struct.calcsize(fmt))
  out["error"] = attempt(lambda: (x + 1).numpy())   # x's address did not change: the corrupted one is used
  sub.last_addrs = [None] * len(sub.last_addrs)     # the test's corruption undone: the next run patches every address
out["after"] = (x + 1).numpy().tolist()
out["sum"] = float((x * 3).sum().numpy())
print(json.dumps(out))
"""

@pytest.mark.parametrize("dev", ["CPU", "DIRECT+CPU", "MOCK+AMD"])
def test_wild_address_is_an_error_naming_kernel_and_address_and_the_device_goes_on(dev: str) -> None:
  env = {**os.environ, "DEV": dev}
  env.pop("DEBUG", None)
  r = subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True, timeout=300)
  assert r.returncode == 0, r.stderr[-3000:]
  out = json.loads(r.stdout.strip().splitlines()[-1])
  assert out["error"] is not None, f"{dev}: the wild read raised nothing"
  kind, msg = out["error"]
  assert "E_64" in msg and "0x" in msg, msg   # the kernel (x + 1 over 64 floats) and an address
  if out["how"] == "from_blob": assert kind == ("HCQError" if out["hcq"] else "KernelFault") and "SIGSEGV" in msg, msg
  else: assert kind == "HCQError" and f"{0x10:#x}" in msg, msg
  assert out["after"] == [float(i + 1) for i in range(64)] and out["sum"] == 3 * sum(range(64))
