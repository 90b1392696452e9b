"""The bf16 dot product's operands on the LLVM renderer: two 16-lane bf16 rows interleaved into one 32-lane operand are read
as 32-lane registers whose upper halves are masked off (llvm.masked.load, no lane past the 16 read), not as 16-lane loads that
LLVM widened by 256-bit broadcast loads; a packed panel is stored interleaved and read whole, no shuffle in the reduce loop;
results against numpy. Results only on a CPU with AVX512_BF16 (the renderer uses the instruction only there)."""
import copy, re
import numpy as np
import pytest
from core import Tensor, Device
from core.ir.dtype import dtypes
from core.schedule.kernelize import create_schedule
from core.codegen.program import get_program, program_source
from plugin_cpu.bf16dot import host_bf16_dot
from plugin_cpu.compiler import host_machine
from plugin_cpu.renderer import CPULLVMRenderer

def _bf16_exact(x: np.ndarray) -> np.ndarray:
  bits = x.view(np.uint32)
  return ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).astype(np.uint32).view(np.float32)

# (shapes whose column panel is read in place, not packed: see the next test for packed ones)
@pytest.mark.parametrize("n, k, m", [(64, 512, 96), (8, 64, 32)])
def test_bf16_dot_reads_whole_registers(n, k, m, monkeypatch):
  rnd = Device[Device.DEFAULT].renderer
  monkeypatch.setattr(rnd, "amx", False, raising=False)   # an AMX host's matmuls take tiles (test_amx): the vector path here
  if not (host_bf16_dot() and "LLVM" in type(rnd).__name__ and dtypes.bfloat16 in rnd.vector_dtypes):
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

@pytest.mark.skipif(host_machine() != "x86_64", reason="renders x86-64 code")
@pytest.mark.parametrize("n, k, m", [(128, 256, 128), (64, 96, 80), (96, 1024, 64)])
def test_bf16_dot_packed_panel_is_stored_interleaved(n, k, m, monkeypatch):
  # rendering only, for a target with AVX512_BF16 on any x86-64 host: the copy into the packed column panel writes each pair of
  # the unrolled reduce's rows as one 32-lane interleave, and every dot product's column operand is a whole 32-lane load of it
  # (before, each was a shuffle of two loaded rows in the reduce loop: vpermt2w)
  monkeypatch.delenv("CPU_BF16_DOT", raising=False)   # the target's own flags decide, whatever the environment masks
  rnd = copy.copy(CPULLVMRenderer())
  rnd.target(frozenset({"avx", "avx2", "fma", "avx512f", "avx512vl", "avx512dq", "avx512_bf16"}))
  out = Tensor.empty(n, k, dtype="bfloat16").matmul(Tensor.empty(k, m, dtype="bfloat16"), dtype="float32")
  items, _, _ = create_schedule([out.uop])
  src = "\n".join(program_source(get_program(it.ast, rnd)) for it in items)
  cols = re.findall(r"dpbf16ps\.512\(<16 x float> %\w+, <32 x bfloat> %\w+, <32 x bfloat> (%\w+)\)", src)
  whole = set(re.findall(r"(%\w+) = load <32 x bfloat>, ptr", src))
  assert cols and set(cols) <= whole, sorted(set(cols) - whole)[:4]
  assert "store <32 x bfloat>" in src and "masked.load.v32bf16" not in src
  if not (host_bf16_dot() and dtypes.bfloat16 in Device[Device.DEFAULT].renderer.vector_dtypes):
    pytest.skip("values need a CPU with AVX512_BF16 (the structure is checked)")
  # and on a CPU with the instruction, the device's kernels (the same choice; tiles off on an AMX host) give numpy's products,
  # summed in float32
  monkeypatch.setattr(Device[Device.DEFAULT].renderer, "amx", False, raising=False)
  rng = np.random.default_rng(5)
  a, b = _bf16_exact(rng.standard_normal((n, k), dtype=np.float32)), _bf16_exact(rng.standard_normal((k, m), dtype=np.float32))
  got = Tensor(a).cast("bfloat16").realize().matmul(Tensor(b).cast("bfloat16").realize(), dtype="float32").numpy()
  want = a.astype(np.float64) @ b
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
