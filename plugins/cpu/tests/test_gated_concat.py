"""A concatenate of per-head tensors (gpt2's backward assembles dq, dk and dv so) reads each input at (32*r + l - o) // 64 and % 64
with the lane l < 32 beside 32*r: the index simplifier folds those to r's quotient and remainder (symbolic._block_split) and the
gate o <= 32*r + l, lane by lane, to one compare of r, so every input is one vector load a step; a load whose gate is the same in
every lane branches around a plain vector load rather than taking a masked load (one whose lanes are all off, at addresses
outside the buffer, ran gpt2's E_256_2304 2x slower in some processes on an Intel host). Results match numpy."""
import re
import numpy as np
import pytest
from cpu_kernels import host_like_renderer, run_rendered
from core import Tensor
from plugin_cpu.renderer import host_flags

def _heads_cat(a: Tensor, b: Tensor, c: Tensor) -> Tensor:
  return Tensor.cat(*(t.permute(1, 0, 2).reshape(t.shape[1], -1) for t in (a, b, c)), dim=1)

@pytest.mark.parametrize("simd_bytes", [32, 64])
def test_heads_concatenate_is_vector_loads_with_numpys_values(simd_bytes: int):
  xs = [np.random.default_rng(i).standard_normal((4, 16, 64)).astype(np.float32) for i in range(3)]
  rnd = host_like_renderer("LLVM", simd_bytes, threads=0)
  if simd_bytes == 64 and "avx512f" not in host_flags(): pytest.skip("runs AVX-512 code")
  out, src = run_rendered(rnd, _heads_cat, *xs)
  assert "load float" not in src and "@llvm.masked.load" not in src, src[:3000]
  loads = [int(n) for n in re.findall(r"= load <(\d+) x float>", src)]
  assert len(loads) >= 3 and min(loads) >= simd_bytes // 4 and "store <" in src, src[:3000]
  want = np.concatenate([x.transpose(1, 0, 2).reshape(16, -1) for x in xs], axis=1)
  np.testing.assert_array_equal(out.reshape(16, -1), want)
