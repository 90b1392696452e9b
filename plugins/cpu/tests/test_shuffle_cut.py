"""The LLVM renderer passes a pack's panel copy's register transposes through an empty asm halfway (renderer.shuffle_cuts): the
X86 instruction selector combines each shuffle with the chain below it, and a 16x16 transpose's 4 stages took ~7.5 ms of a
kernel's compile (x @ W.T's AVX-512 weight copy, pack._row_loop). Chains of at most 3 stages (AVX2's 8x8), joins into wider
vectors and shuffles that are not a panel's (a conv tile's row stores) are left whole. Results against numpy."""
import re
import numpy as np
import pytest
from cpu_kernels import host_like_renderer, run_item, sink_item
from core import Tensor
from core.codegen.program import get_program, program_source
import plugin_cpu.renderer as R
from plugin_cpu.renderer import host_flags

def _renderer(simd_bytes: int):
  rnd = host_like_renderer("LLVM", simd_bytes, threads=0)
  if simd_bytes == 64: rnd.l2_bytes = 2 << 20   # the Intel host's L2: its tiles copy the weights in transposed rows
  return rnd

def _cuts(src: str) -> list[str]: return re.findall(r'= call <(\d+) x float> asm "", "=v,0"', src)

def _linear(r: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
  return r.standard_normal((128, 512)).astype(np.float32), r.standard_normal((512, 512)).astype(np.float32)

@pytest.mark.parametrize("simd_bytes", [32, 64])
def test_a_panel_copys_16x16_transposes_are_cut_in_halves(simd_bytes, monkeypatch):
  x, w = _linear(np.random.default_rng(48))
  ast = sink_item(Tensor(x) @ Tensor(w).T).ast
  src = program_source(get_program(ast, _renderer(simd_bytes)))
  shuffles = len(re.findall(r"shufflevector <16 x float> %\w+, <16 x float> %", src))   # (two vectors': not a broadcast)
  # AVX-512: each 16x16 transpose's second stage (16 shuffles) cut, nothing else; AVX2's 8x8 (3 stages) is left whole
  assert (len(_cuts(src)), set(_cuts(src))) == ((shuffles // 4, {"16"}) if simd_bytes == 64 else (0, set())), src
  if simd_bytes == 64: assert shuffles and shuffles % 64 == 0
  monkeypatch.setattr(R, "SHUFFLE_CUT_DEPTH", 0)
  assert not _cuts(program_source(get_program(ast, _renderer(simd_bytes))))

def test_a_conv_tiles_shuffles_are_not_cut():
  r = np.random.default_rng(3)
  x, w = r.standard_normal((2, 64, 14, 14)).astype(np.float32), r.standard_normal((64, 64, 3, 3)).astype(np.float32)
  src = program_source(get_program(sink_item(Tensor(x).conv2d(Tensor(w), padding=1)).ast, _renderer(64)))
  assert "shufflevector" in src and not _cuts(src)

def test_cut_transposes_give_numpys_values():
  if "avx512f" not in host_flags(): pytest.skip("AVX-512 code")
  x, w = _linear(np.random.default_rng(49))
  bufs, src = run_item(sink_item(Tensor(x) @ Tensor(w).T), _renderer(64))
  assert _cuts(src)
  ref = x.astype(np.float64) @ w.T.astype(np.float64)
  np.testing.assert_allclose(bufs[0].numpy().reshape(ref.shape), ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())
