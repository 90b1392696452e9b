"""Tensor cores on NV: the TC option's kernels (mma.sync m16n8k16, half and bfloat16 in, float accumulate) render for the PTX
and CUDA renderers, assemble with ptxas / NVRTC for sm_80 and sm_90 into cubins whose SASS has HMMA instructions, and run on
MOCK+NV, whose host build computes each WMMA lane by lane from the fragment layout, against numpy."""
from __future__ import annotations
import json, os, subprocess, sys, tempfile
import numpy as np
import pytest
from core.testing.helpers import missing_tool
from core import Tensor
from core.ir.dtype import dtypes
from core.ir.ops import Ops
from core.schedule.kernelize import create_schedule
from core.codegen.program import get_program, program_source, program_uops
from plugin_nv.renderer import PTXRenderer, CUDARenderer
from nv_test_kernels import have_nvrtc
from nvtools import find_tool, require

def matmul_ast(dt, m: int = 32, k: int = 64, n: int = 16):
  rng = np.random.default_rng(3)
  a = Tensor(rng.standard_normal((m, k)).astype(np.float32)).cast(dt).realize()
  b = Tensor(rng.standard_normal((k, n)).astype(np.float32)).cast(dt).realize()
  items, _, _ = create_schedule([(a.float() @ b.float()).uop])
  assert len(items) == 1
  return items[0].ast

def sass(cubin: bytes) -> str:
  """cuobjdump -sass of a cubin (cuobjdump runs nvdisasm, from the nvidia-cuda-nvdisasm wheel next to it)."""
  tool = require("cuobjdump")
  if (nvdisasm := find_tool("nvdisasm")) is None:
    missing_tool("nvdisasm not found: pip install nvidia-cuda-nvdisasm (the nv testing extra has it)")
  with tempfile.TemporaryDirectory() as d:
    p = os.path.join(d, "k.cubin")
    with open(p, "wb") as f: f.write(cubin)
    r = subprocess.run([tool, "-sass", p], capture_output=True, text=True, env={**os.environ, "NVDISASM_PATH": os.path.dirname(nvdisasm)})
    assert r.returncode == 0, r.stderr
    return r.stdout

@pytest.mark.parametrize("dt", [dtypes.float16, dtypes.bfloat16], ids=lambda d: d.name)
@pytest.mark.parametrize("R", [PTXRenderer, CUDARenderer])
def test_renderers_use_mma_sync(R, dt):
  p = get_program(matmul_ast(dt), R("sm_80"))
  w = [u for u in program_uops(p) if u.op is Ops.WMMA]
  assert [u.arg for u in w] == [f"NV:m16n8k16:{dt.name}:float32"]
  t = "f16" if dt is dtypes.float16 else "bf16"
  src = program_source(p)
  if R is CUDARenderer: assert f"mma.sync.aligned.m16n8k16.row.col.f32.{t}.{t}.f32" in src and "__launch_bounds__(32)" in src
  else: assert "@llvm.nvvm.mma.m16n8k16.row.col." + ("f32.f32" if t == "f16" else "bf16") in src

@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("dt", [dtypes.float16, dtypes.bfloat16], ids=lambda d: d.name)
def test_ptx_cubin_has_hmma(arch, dt):
  require("ptxas")
  from plugin_nv.compiler import PTXCompiler
  comp = PTXCompiler(arch)
  src = program_source(get_program(matmul_ast(dt), PTXRenderer(arch)))
  assert "mma.sync.aligned.m16n8k16.row.col.f32." + ("f16.f16" if dt is dtypes.float16 else "bf16.bf16") + ".f32" in comp.to_ptx(src)
  hmma = [ln for ln in sass(comp.compile(src)).splitlines() if "HMMA.16816.F32" in ln]
  assert hmma and all(("BF16" in ln) == (dt is dtypes.bfloat16) for ln in hmma)

@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("dt", [dtypes.float16, dtypes.bfloat16], ids=lambda d: d.name)
def test_cuda_cubin_has_hmma(arch, dt):
  if not have_nvrtc():
    missing_tool('no NVRTC here: pip install "plugin-nv[nvrtc]" (the testing extra has it)')
  from plugin_nv.compiler import NVRTCCompiler
  cubin = NVRTCCompiler(arch).compile(program_source(get_program(matmul_ast(dt), CUDARenderer(arch))))
  hmma = [ln for ln in sass(cubin).splitlines() if "HMMA.16816.F32" in ln]
  assert hmma and all(("BF16" in ln) == (dt is dtypes.bfloat16) for ln in hmma)

def test_tc_0_keeps_mma_out():
  from core.helpers import Context
  from core.codegen.opt.heuristic import TC  # noqa: F401  (registers the TC setting)
  with Context(TC=0): p = get_program(matmul_ast(dtypes.float16), PTXRenderer("sm_80"))
  assert not any(u.op is Ops.WMMA for u in program_uops(p)) and "mma" not in program_source(p)

SCRIPT = r'''
import json, numpy as np
from core import Tensor
from core.ir.dtype import dtypes
rng = np.random.default_rng(0)
out = {}
for m, k, n in [(32, 64, 16), (20, 30, 12), (48, 16, 40)]:
  for dt in (dtypes.float16, dtypes.bfloat16):
    a = Tensor(rng.standard_normal((m, k)).astype(np.float32)).cast(dt).realize()
    b = Tensor(rng.standard_normal((k, n)).astype(np.float32)).cast(dt).realize()
    want = a.float().numpy().astype(np.float64) @ b.float().numpy().astype(np.float64)
    out[f"{m}x{k}x{n}_{dt.name}"] = float(np.abs((a.float() @ b.float()).numpy() - want).max())
x = Tensor(rng.standard_normal((2, 16, 6, 6)).astype(np.float16)).realize()
w = Tensor(rng.standard_normal((16, 16, 3, 3)).astype(np.float16)).realize()
ref = x.float().numpy().astype(np.float64)
wf = w.float().numpy().astype(np.float64)
want = sum(np.einsum("bchw,oc->bohw", ref[:, :, i:i + 4, j:j + 4], wf[:, :, i, j]) for i in range(3) for j in range(3))
out["conv"] = float(np.abs(x.float().conv2d(w.float()).numpy() - want).max())
print("JSON" + json.dumps(out))
'''

@pytest.mark.parametrize("dev", ["MOCK+NV:PTX:sm_80", "MOCK+NV:CUDA:sm_90"])
def test_mock_nv_runs_tensor_core_kernels(dev):
  require("ptxas")
  if "CUDA" in dev and not have_nvrtc():
    missing_tool('no NVRTC here: pip install "plugin-nv[nvrtc]" (the testing extra has it)')
  # DEBUG=3 prints the applied opts: every matmul and the conv must have run on the tensor core
  r = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env={**os.environ, "DEV": dev, "DEBUG": "3"}, timeout=600)
  assert r.returncode == 0, r.stderr[-4000:]
  res = json.loads(next(ln for ln in r.stdout.splitlines() if ln.startswith("JSON"))[4:])
  assert all(v < 1e-3 for v in res.values()), res
  opts = [ln for ln in r.stdout.splitlines() if ln.startswith("opt r_")]
  assert sum("OptOps.TC" in ln for ln in opts) == 7, opts
