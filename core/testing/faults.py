"""Fault containment checks a device plugin's tests share: a kernel that computes a wild index must raise an error naming the
kernel and the address, and the device must give correct results right after (core/codegen/access_guard.py on MOCK devices).
Each case runs in a subprocess, so a regression kills that process, not the test run."""
from __future__ import annotations
import json, os, subprocess, sys
from typing import Any

# A test-only wrapper around the linearizer moves the input's index 2**28 elements away in the kernels built while `corrupt` is
# on; the renderer's output is kept, so a test can see which accesses a guarded source checks.
WILD_INDEX = r"""
import json
import numpy as np
from core import Tensor
from core.device.registry import Device
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
sources = {}
renderer = Device[x.device].renderer
render = renderer.render
def keep(name, uops):
  src = render(name, uops)
  sources.setdefault("wild" if corrupt["on"] else "plain", []).append(src)
  return src
renderer.render = keep
np.testing.assert_equal((x + 2).numpy(), np.arange(64) + 2)
corrupt["on"] = True
try:
  (x + 1).numpy()
  err = None
except Exception as e: err = [type(e).__name__, str(e)]
corrupt["on"] = False
print(json.dumps({"error": err, "after": (x * 2).numpy().tolist(), "sum": float((x * 3).sum().numpy()), "sources": sources}))
"""

def run_case(program: str, dev: str) -> tuple[dict[str, Any], str, str]:
  """Runs `program` under DEV=dev in a subprocess; its last stdout line (JSON), and the error it caught (kind, message), which
  must name the kernel (x + 1 over 64 floats: E_64) and an address."""
  env = {**os.environ, "DEV": dev, "HCQ_TIMEOUT": "30"}
  env.pop("DEBUG", None)
  r = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=600)
  assert r.returncode == 0, r.stderr[-3000:]
  out = json.loads(r.stdout.strip().splitlines()[-1])
  assert out["error"] is not None, f"{dev}: the wild access raised nothing"
  kind, msg = out["error"]
  assert "E_64" in msg and "0x" in msg, msg
  return out, kind, msg

def check_wild_index(dev: str) -> dict[str, Any]:
  """The wild index raises HCQError carrying `KernelFault: kernel E_64 accessed address ...`, and the same device then gives
  the right results. Returns the case's output (its `sources`: what the renderer made, plain and wild)."""
  out, kind, msg = run_case(WILD_INDEX, dev)
  assert kind == "HCQError" and "KernelFault: kernel E_64 accessed address" in msg, msg
  assert out["after"] == [2.0 * i for i in range(64)] and out["sum"] == 3 * sum(range(64))
  return out
