"""Faults stay contained: a kernel that reads a wild address raises an error naming the kernel and the address, on every
interface (the HCQ and direct CPU, the HCQ MOCK devices), and the device gives correct results right after. Each case runs in a
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

def run_case(program: str, dev: str) -> tuple[dict, str, str]:
  """Runs `program` under DEV=dev in a subprocess; its last stdout line (JSON), and the error it caught (kind, message)."""
  env = {**os.environ, "DEV": dev, "HCQ_TIMEOUT": "30"}
  env.pop("DEBUG", None)
  r = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=600)
  assert r.returncode == 0, r.stderr[-3000:]
  out = json.loads(r.stdout.strip().splitlines()[-1])
  assert out["error"] is not None, f"{dev}: the wild access raised nothing"
  kind, msg = out["error"]
  assert "E_64" in msg and "0x" in msg, msg   # the kernel (x + 1 over 64 floats) and an address
  return out, kind, msg

@pytest.mark.parametrize("dev", ["CPU", "DIRECT+CPU", "MOCK+AMD"])
def test_wild_address_is_an_error_naming_kernel_and_address_and_the_device_goes_on(dev: str) -> None:
  out, kind, msg = run_case(PROGRAM, dev)
  if out["how"] == "from_blob": assert kind == ("HCQError" if out["hcq"] else "KernelFault") and "SIGSEGV" in msg, msg
  else: assert kind == "HCQError" and f"{0x10:#x}" in msg, msg
  assert out["after"] == [float(i + 1) for i in range(64)] and out["sum"] == 3 * sum(range(64))

# A kernel on a MOCK GPU (run by its host build, core/codegen/hostbuild.py) that computes a wild address itself: a test-only
# wrapper around the linearizer moves the input's index 2**28 elements away in the kernels built while the test asks for it.
# (On the CPU such an address may land in mapped memory, so the CPU cases above use a foreign pointer.)
WILD_INDEX = r"""
import json
import numpy as np
from core import Tensor
from core.ir.ops import Ops, UOp
import core.codegen.program as program
SHIFT = 1 << 28
corrupt = {"on": False}
plain = program.linearize
def shifted(sink):
  if not corrupt["on"]: return plain(sink)
  idx = next(u for u in sink.toposort() if u.op is Ops.INDEX and u.src[0].op is Ops.PARAM and u.src[0].arg == 1)
  return plain(sink.substitute({idx: idx.replace(src=(idx.src[0], idx.src[1] + UOp.const(idx.src[1].dtype, SHIFT), *idx.src[2:]))}))
program.linearize = shifted
x = Tensor(np.arange(64, dtype=np.float32)).realize()
corrupt["on"] = True
try:
  (x + 1).numpy()
  err = None
except Exception as e: err = [type(e).__name__, str(e)]
corrupt["on"] = False
print(json.dumps({"error": err, "after": (x * 2).numpy().tolist(), "sum": float((x * 3).sum().numpy())}))
"""

@pytest.mark.parametrize("dev", ["MOCK+AMD", "MOCK+NV"])
def test_wild_index_in_a_host_build_is_a_fault_naming_kernel_and_address_and_the_device_goes_on(dev: str) -> None:
  out, kind, msg = run_case(WILD_INDEX, dev)
  assert kind == "HCQError" and "KernelFault: kernel E_64 accessed address" in msg, msg
  assert out["after"] == [2.0 * i for i in range(64)] and out["sum"] == 3 * sum(range(64))
