"""The bf16 dot product's operands on the LLVM renderer: two 16-lane bf16 rows interleaved into one 32-lane operand are read
as 32-lane registers whose upper halves are masked off (llvm.masked.load, no lane past the 16 read), not as 16-lane loads that
LLVM widened by 256-bit broadcast loads; results against numpy. Only on a CPU with AVX512_BF16 (the renderer uses the
instruction only there)."""
import re
import numpy as np
import pytest
from core import Tensor, Device
from core.schedule.kernelize import create_schedule
from core.codegen.program import get_program, program_source
from plugin_cpu.bf16dot import host_bf16_dot

def _bf16_exact(x: np.ndarray) -> np.ndarray:
  bits = x.view(np.uint32)
  return ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).astype(np.uint32).view(np.float32)

@pytest.mark.parametrize("n, k, m", [(128, 256, 128), (64, 512, 96), (8, 64, 32)])
def test_bf16_dot_reads_whole_registers(n, k, m):
  rnd = Device[Device.DEFAULT].renderer
  if not (host_bf16_dot() and "LLVM" in type(rnd).__name__ and "bfloat16" in str(getattr(rnd, "vector_dtypes", ""))):
    pytest.skip("the LLVM renderer on a CPU with AVX512_BF16")
  rng = np.random.default_rng(3)
  a, b = _bf16_exact(rng.standard_normal((n, k), dtype=np.float32)), _bf16_exact(rng.standard_normal((k, m), dtype=np.float32))
  # (the inputs realized in bf16 first, as the bench row has them: a cast fused into the product loads float32)
  out = Tensor(a).cast("bfloat16").realize().matmul(Tensor(b).cast("bfloat16").realize(), dtype="float32")
  items, _, _ = create_schedule([out.uop])
  src = "\n".join(program_source(get_program(it.ast, rnd)) for it in items)
  assert "llvm.x86.avx512bf16.dpbf16ps" in src
  # every interleave of two loaded rows takes 32-lane registers, read under a mask of their lower 16 lanes (the other operand,
  # a pair of the row-side input broadcast, is no load)
  assert "@llvm.masked.load.v32bf16" in src and "shufflevector <32 x bfloat>" in src
  loaded = set(re.findall(r"(%\w+) = load <16 x bfloat>", src))
  pairs = re.findall(r"shufflevector <16 x bfloat> (%\w+), <16 x bfloat> (%\w+), <32 x i32>", src)
  assert not [p for p in pairs if set(p) & loaded], [p for p in pairs if set(p) & loaded][:2]
  got, want = out.numpy(), a.astype(np.float64) @ b
  # the products are exact in float32, summed in float32
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
