"""Tensor cores on METAL: the TC option's kernels use simdgroup_matrix 8x8 (half and float in, float accumulate). Their MSL passes
the Linux check (clang++ against the host <metal_stdlib>, as C++ and as C++ for OpenCL), and MOCK+METAL runs it as C++, where
the shim's simdgroup_multiply_accumulate exchanges the 32 threads' elements through the layout in core.device.tensor_core;
results against numpy."""
from __future__ import annotations
import json, os, subprocess, sys
import numpy as np
import pytest
from core import Tensor
from core.ir.ops import Ops
from core.schedule.kernelize import create_schedule
from core.codegen.program import get_program, program_source, program_uops
from plugin_metal.renderer import MetalRenderer
from plugin_metal.shim import RUNNER
from core.device.tensor_core import tensor_core
from metal_tools import need_cxx

def matmul_ast(dt, m: int = 16, k: int = 24, n: int = 8):
  rng = np.random.default_rng(5)
  a, b = Tensor(rng.standard_normal((m, k)).astype(dt)).realize(), Tensor(rng.standard_normal((k, n)).astype(dt)).realize()
  items, _, _ = create_schedule([(a.float() @ b.float()).uop])
  assert len(items) == 1
  return items[0].ast

@pytest.mark.parametrize("dt,t", [(np.float16, "half"), (np.float32, "float")])
def test_msl_uses_simdgroup_matrices(dt, t):
  p = get_program(matmul_ast(dt), MetalRenderer())
  assert [u.arg for u in program_uops(p) if u.op is Ops.WMMA] == [f"METAL:m8n8k8:{np.dtype(dt).name}:float32"]
  src = program_source(p)
  assert f"simdgroup_{t}8x8 ma, mb;" in src and "simdgroup_multiply_accumulate(mc, ma, mb, mc);" in src
  assert f"core_simdgroup_mma_{t}(" in src.split("kernel void")[1]   # called from the kernel, defined before it

@pytest.mark.parametrize("dt", [np.float16, np.float32])
def test_msl_passes_the_check_compiler(dt):
  need_cxx()
  from plugin_metal.compiler import MetalCheckCompiler
  src = program_source(get_program(matmul_ast(dt, 20, 30, 12), MetalRenderer()))
  assert MetalCheckCompiler().compile(src) == src.encode()

def test_mock_tables_are_the_layout():
  # the dispatcher's tables come from the same LaneLayout the optimizer used: A's owner of (0, 2) is lane 1 element 0, etc.
  tc = tensor_core("METAL:m8n8k8:float16:float32")
  line = next(ln for ln in RUNNER.splitlines() if ln.startswith("static const unsigned char core_sg_a_owner"))
  owners = [int(x) for x in line.split("{")[1].split("}")[0].split(",")]
  assert owners == [tc.a.owner(r, c)[0] * 2 + tc.a.owner(r, c)[1] for r in range(8) for c in range(8)]
  assert owners[2] == 2 and owners[8] == 4   # (0, 2): lane 1; (1, 0): lane 2

SCRIPT = r'''
import json, numpy as np
from core import Tensor
rng = np.random.default_rng(0)
out = {}
for m, k, n in [(32, 64, 16), (20, 30, 12), (8, 8, 8), (40, 16, 24)]:
  for dt in (np.float16, np.float32):
    a, b = rng.standard_normal((m, k)).astype(dt), rng.standard_normal((k, n)).astype(dt)
    out[f"{m}x{k}x{n}_{np.dtype(dt).name}"] = float(np.abs((Tensor(a).float() @ Tensor(b).float()).numpy() -
                                                        a.astype(np.float64) @ b.astype(np.float64)).max())
h1, h2 = rng.standard_normal((24, 40)).astype(np.float16), rng.standard_normal((40, 16)).astype(np.float16)
out["half_out"] = float(np.abs((Tensor(h1) @ Tensor(h2)).numpy().astype(np.float64) - h1.astype(np.float64) @ h2.astype(np.float64)).max())
x, w = rng.standard_normal((2, 8, 6, 6)).astype(np.float16), rng.standard_normal((16, 8, 3, 3)).astype(np.float16)
xf, wf = x.astype(np.float64), w.astype(np.float64)
want = sum(np.einsum("bchw,oc->bohw", xf[:, :, i:i + 4, j:j + 4], wf[:, :, i, j]) for i in range(3) for j in range(3))
out["conv"] = float(np.abs(Tensor(x).float().conv2d(Tensor(w).float()).numpy() - want).max())
print("JSON" + json.dumps(out))
'''

def test_mock_metal_runs_tensor_core_kernels():
  need_cxx()
  r = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env={**os.environ, "DEV": "MOCK+METAL", "DEBUG": "3"},
                     timeout=900)
  assert r.returncode == 0, r.stderr[-4000:]
  res = json.loads(next(ln for ln in r.stdout.splitlines() if ln.startswith("JSON"))[4:])
  half_out = res.pop("half_out")
  assert all(v < 1e-3 for v in res.values()), res
  assert half_out < 0.05   # rounded to half at the end: |result| up to ~20, half's spacing there is 2**-6
  opts = [ln for ln in r.stdout.splitlines() if ln.startswith("opt r_")]
  assert sum("OptOps.TC" in ln for ln in opts) == 10, opts
