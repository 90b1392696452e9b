"""A kernel that computes a wild address on a MOCK GPU (run by its host build, core/codegen/hostbuild.py) is a fault the device
reports, naming the kernel and the address, and the device gives correct results right after (the direct and HCQ CPU are
tests/engine/test_faults.py's: there a wild address may land in mapped memory, so their test uses a foreign pointer). The wild address comes from a corrupted index: a test-only wrapper around the linearizer moves the
input's index 2**28 elements away in the kernels it builds while the test asks for it. Each case runs in a subprocess (a
regression would kill the process, not fail a test)."""
from __future__ import annotations
import json, os, subprocess, sys
import pytest

PROGRAM = r"""
import json
import numpy as np
from core import Tensor
from core.ir.ops import Ops, UOp
from core.ir.dtype import dtypes
import core.codegen.program as program
SHIFT = 1 << 28
corrupt = {"on": False}
plain = program.linearize
def shifted(sink):
  if not corrupt["on"]: return plain(sink)
  # the first load's index, 2**28 elements on: the kernel reads far outside its input
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
print(json.dumps({"device": x.device, "error": err, "after": (x * 2).numpy().tolist(), "sum": float((x * 3).sum().numpy())}))
"""

@pytest.mark.parametrize("dev", ["MOCK+AMD", "MOCK+NV"])
def test_wild_index_is_a_fault_naming_kernel_and_address_and_the_device_goes_on(dev: str) -> None:
  env = {**os.environ, "DEV": dev, "HCQ_TIMEOUT": "30"}
  env.pop("DEBUG", None)
  r = subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True, timeout=600)
  assert r.returncode == 0, r.stderr[-3000:]
  out = json.loads(r.stdout.strip().splitlines()[-1])
  assert out["error"] is not None, f"{dev}: the wild read raised nothing"
  kind, msg = out["error"]
  assert "E_64" in msg and "0x" in msg, msg   # the kernel (x + 1 over 64 floats) and an address
  assert kind == "HCQError" and "KernelFault" in msg and "accessed address" in msg, msg
  assert out["after"] == [2.0 * i for i in range(64)] and out["sum"] == 3 * sum(range(64))
