"""bfloat16 x bfloat16 -> float32 matmul (the bench's matmul_bf16 row) on both CPU renderers: numpy's product of the same bf16
values, within what rounding each product (or the result) to bf16 allows; the inputs themselves are exact. On a CPU with
AVX512_BF16 the LLVM renderer's kernel must use the dot-product instruction (vdpbf16ps); with the feature masked off
(CPU_BF16_DOT=0), and with the C renderer, the plain path must give the same results."""
import os, subprocess, sys
import pytest
from plugin_cpu.bf16dot import host_bf16_dot

CHILD = """
import conftest, sys, numpy as np
from core import Tensor, Device
from core.ir.dtype import dtypes
from core.schedule.kernelize import create_schedule
from core.codegen.program import get_program, program_source
native = []
rng = np.random.default_rng(7)
def bf16_exact(x):
  bits = x.view(np.uint32)
  return ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).astype(np.uint32).view(np.float32)
for n, k, m in ((64, 96, 80), (33, 130, 47), (128, 256, 128)):
  a, b = bf16_exact(rng.standard_normal((n, k), dtype=np.float32)), bf16_exact(rng.standard_normal((k, m), dtype=np.float32))
  ta, tb = Tensor(a).cast("bfloat16"), Tensor(b).cast("bfloat16")
  assert np.array_equal(ta.float().numpy(), a)   # the inputs are bf16 values: the cast is exact
  out = ta.matmul(tb, dtype="float32")
  items, _, _ = create_schedule([out.uop])
  native.append(any("llvm.x86.avx512bf16.dpbf16ps" in program_source(get_program(it.ast, Device[Device.DEFAULT].renderer)) for it in items))
  assert out.dtype is dtypes.float32, out.dtype
  got, want = out.numpy(), a.astype(np.float64) @ b
  # a product rounded to bf16 is off by at most 2**-9 of itself: the error is at most that share of sum(|a*b|)
  bound = 2.0 ** -8 * (np.abs(a).astype(np.float64) @ np.abs(b)) + 1e-5 * np.abs(want).max()
  err = np.abs(got - want)
  assert (err <= bound).all(), (n, k, m, float(err.max()), float(bound.min()))
  # and it is a real product: far from a wrong layout (a transposed b, a skipped reduce step) in every entry but a few
  assert np.abs(got - want).mean() < 0.02 * np.abs(want).mean(), (n, k, m)
print(*["native" if x else "plain" for x in native], "ok")
"""

@pytest.mark.parametrize("ren, mask", [("C", False), ("LLVM", False), ("LLVM", True)])
def test_bf16_matmul_float32_sums(ren, mask):
  env = dict(os.environ, DEV=f"CPU:{ren}")
  env.pop("PYTHONSAFEPATH", None)   # the child imports conftest from its working folder (this one)
  env.pop("CPU_BF16_DOT", None)
  env["CPU_AMX"] = "0"   # the vector path: an AMX host's LLVM renderer takes the 128x256x128 product to tiles (test_amx)
  if mask: env["CPU_BF16_DOT"] = "0"
  res = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, env=env, timeout=600,
                       cwd=os.path.dirname(os.path.abspath(__file__)))
  assert res.returncode == 0 and res.stdout.split()[-1:] == ["ok"], res.stderr[-3000:]
  # the instruction exactly where the CPU has it, the LLVM renderer renders and the feature is not masked off (a CPU with it
  # whose kernels don't use it fails here)
  with_dot = ren == "LLVM" and not mask and host_bf16_dot()
  # (33x130 @ 130x47: 47 columns hold no whole vector of 16, that kernel keeps the plain path either way)
  paths = res.stdout.split()[-4:-1]
  assert paths[0] == paths[2] == ("native" if with_dot else "plain") and (with_dot or paths[1] == "plain"), res.stdout
