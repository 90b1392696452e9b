"""Compile-only on the NULL device, per arch: a representative set of Tensor programs is scheduled, rendered and compiled
with the AMD renderer, and the prep hook's rewrite accepts every code object with the program's own argument counts.
Each arch runs in a subprocess: a kernel LLVM cannot lower aborts that process, not the test run."""
from __future__ import annotations
import json, os, subprocess, sys
import pytest
from amd_test_kernels import ARCH_NAMES

SCRIPT = r'''
import json, numpy as np
from core.tensor.tensor import Tensor
from core.ir.dtype import dtypes
from core.ir.ops import UOp, Ops
from core.ir.pattern import graph_rewrite
from core.engine import run
from plugin_amd.prep import AMDProgramData, pm_prep_program
x = Tensor(np.linspace(-3, 3, 96, dtype=np.float32).reshape(8, 12))
w = Tensor(np.ones((12, 5), dtype=np.float32))
progs = [x + 1, x.exp2().log2(), x.sin(), x.sqrt(), x.relu().max(1), x.sum(0), x @ w, x.softmax(1), x.pow(Tensor(2.5)),
         x.cast(dtypes.float16) * 2, x.cast(dtypes.bfloat16).sum(1), x.cast(dtypes.float64).sin() + x.cast(dtypes.float64).exp2(),
         x.cast(dtypes.float64).log2() ** x.cast(dtypes.float64), x.cast(dtypes.int32) // 3 + x.cast(dtypes.int32) % 5,
         x.cast(dtypes.int64) * 7 >> 1, x.cast(dtypes.uint8) & 3, (x > 0).where(x, -x), x.cumsum(1), x[::2, 3:9].flip(0).contiguous(),
         Tensor.arange(100).reshape(10, 10).T.contiguous(), x.reshape(2, 4, 12).mean(axis=(0, 2)), x.argmax(1),
         Tensor(np.ones((1, 2, 6, 6), np.float32)).conv2d(Tensor(np.ones((3, 2, 3, 3), np.float32)))]
for p in progs: p.realize()
out = {"kernels": 0, "prepped": 0, "waves": []}
for r in list(run._runners.values()):
  done = graph_rewrite(r.program, pm_prep_program)   # the compiled PROGRAM (SINK, DEVICE, LINEAR, SOURCE, BINARY)
  out["kernels"] += 1
  if isinstance(done.arg, AMDProgramData) and len(done.arg.arg_offsets) == sum(u.op is Ops.PARAM for u in r.program.src[2].src) + len(r.spec.vars):
    out["prepped"] += 1
  out["waves"].append(done.arg.wave_size)
print("RESULT " + json.dumps(out))
'''

@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_null_device_compiles_and_preps(arch: str):
  env = dict(os.environ, DEV=f"NULL:AMD:{arch}", CORE_DISABLE_COMPILER_CACHE="1")
  p = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=900)
  assert p.returncode == 0, f"{arch}: exit {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-6000:]}"
  res = json.loads(next(ln for ln in p.stdout.splitlines() if ln.startswith("RESULT "))[7:])
  assert res["kernels"] >= 20 and res["prepped"] == res["kernels"], res
  assert set(res["waves"]) == {64 if arch.startswith("gfx9") else 32}
