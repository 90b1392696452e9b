"""Faults stay contained: a kernel that reads a wild address raises an error naming the kernel and the address, on every
interface (the HCQ and direct CPU, the HCQ MOCK devices), and the device gives correct results right after. Each case runs in a
subprocess (a regression would kill the process, not fail a test)."""
from __future__ import annotations
import pytest
from core.testing.faults import check_wild_index, run_case

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
if dev.allocator.supports_external_ptr:
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
  out, kind, msg = run_case(PROGRAM, dev)
  if out["how"] == "from_blob": assert kind == ("HCQError" if out["hcq"] else "KernelFault") and "SIGSEGV" in msg, msg
  else: assert kind == "HCQError" and f"{0x10:#x}" in msg, msg
  assert out["after"] == [float(i + 1) for i in range(64)] and out["sum"] == 3 * sum(range(64))

# A kernel on a MOCK GPU (run by its host build, core/codegen/hostbuild.py) that computes a wild address itself
# (core.testing.faults.WILD_INDEX). (On the CPU such an address may land in mapped memory, so the CPU cases above use a foreign
# pointer.) MOCK+QCOM and MOCK+METAL run the same check in their plugins' tests.
@pytest.mark.parametrize("dev", ["MOCK+AMD", "MOCK+NV"])
def test_wild_index_in_a_host_build_is_a_fault_naming_kernel_and_address_and_the_device_goes_on(dev: str) -> None:
  check_wild_index(dev)
