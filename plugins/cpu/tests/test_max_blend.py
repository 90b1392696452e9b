"""float32 max and exp2 in AVX2 code (an x86 CPU without AVX-512F: plugin_cpu.renderer.max_blend_lanes, decompose.fast_exp2's
bits path): max as vmaxps (`a > b ? a : b`) with a blended back where it is a NaN, three instructions where the compare form
took four, bit for bit the compare form's values; exp2's 2**n in four integer ops. Rendered for a Haswell's flags, so the
same code runs on AVX2 and AVX-512 hosts."""
from __future__ import annotations
import copy, re
import numpy as np
import pytest
from plugin_cpu.compiler import arch_flags, host_flags
from plugin_cpu.renderer import extra_rules
from cpu_kernels import device, run_rendered
from test_max_fixup import bits, max_of_pairs, nan_rows
from test_vector_math import EXP2_X, _ulps

pytestmark = pytest.mark.skipif(not {"avx2", "fma"} <= host_flags(), reason="runs AVX2 code: an x86 host with avx2 and fma")
MAX_PS = r"@llvm\.x86\.(avx\.max\.ps\.256|sse\.max\.ps)\("

def _renderers(simd: int):
  """The LLVM renderer for a Haswell (AVX2, FMA) with `simd`-byte vectors (64: vectors of 16 lanes, rendered as 8-lane pieces),
  with the vmaxps + blend rule (new) and without it (old: the compare form)."""
  new = copy.copy(device("LLVM").renderer)
  new.target(arch_flags("haswell"))
  new.simd_width = simd
  old = copy.copy(new)
  old.extra_matcher = extra_rules(simd)
  return new, old

@pytest.mark.parametrize("simd", [32, 64, 16])
def test_elementwise_max_is_the_compare_form_bit_for_bit(simd):
  src, old_src = max_of_pairs(*_renderers(simd))
  assert re.search(MAX_PS, src) and not re.search(r"fcmp o[gl]t <\d+ x float>", src), src
  assert not re.search(MAX_PS, old_src)

@pytest.mark.parametrize("cols", [1000, 1001, 256, 17])
def test_row_max_and_softmax_keep_nans(cols):
  x = nan_rows(cols)
  new, old = _renderers(32)
  for fn, ref in ((lambda t: t.max(-1), lambda: x.max(-1)), (lambda t: t.softmax(-1), None), (lambda t: t.log_softmax(-1), None)):
    got, src = run_rendered(new, fn, x)
    want, _ = run_rendered(old, fn, x)
    # softmax's row max (MAX_NO_NAN) is the plain select in both renderers; a row max alone of whole vectors keeps the blend
    if cols % 8 == 0: assert bool(re.search(MAX_PS, src)) == (ref is not None)
    np.testing.assert_array_equal(bits(got), bits(want))
    if ref is not None: np.testing.assert_array_equal(got, ref())
  with np.errstate(invalid="ignore"):
    e = np.exp(x.astype(np.float64) - x.max(-1, keepdims=True))
    np.testing.assert_allclose(run_rendered(new, lambda t: t.softmax(-1), x)[0].reshape(x.shape), e / e.sum(-1, keepdims=True),
                               rtol=1e-5, atol=1e-7)
  assert np.isnan(got.reshape(x.shape)[1:5]).all() and not np.isnan(got.reshape(x.shape)[[0, 5, 6, 7, 8]]).any()

def test_softmax_row_max_is_vmaxps_without_nan_compares():
  # the kernel's x86 code for a Haswell: softmax's row max needs no NaN kept (MAX_NO_NAN), so each vector max is one vmaxps
  # (`a > b ? a : b`), where a max that keeps NaN takes a NaN compare and a blend more (vcmpunordps, vblendvps), the compare
  # form an ordered compare too (vcmpltps); one vmaxps more is exp2's clamp. The last 4 lanes of a row are scalar maxes
  from core.device.compiler import LLVMTarget, llvm_compile_here
  x = np.random.default_rng(0).standard_normal((64, 1000)).astype(np.float32)
  _, src = run_rendered(_renderers(32)[0], lambda t: t.softmax(-1), x)
  asm = llvm_compile_here(LLVMTarget("x86_64-unknown-linux-gnu", "haswell", "", 2, "pic", "default"), src, assembly=True).decode()
  count = lambda pat: len(re.findall(pat, asm))
  assert count(r"\bvmaxps\b") >= 4 and not re.search(r"\bvcmpunord[ps]s\b", asm), asm
  assert not re.search(r"\bvcmp(lt|le|nle|nlt|gt|ge)ps\b", asm), asm

@pytest.mark.parametrize("simd", [32, 64])
def test_exp2_within_one_and_a_bit_ulp(simd):
  got, src = run_rendered(_renderers(simd)[0], lambda t: t.exp2(), EXP2_X)
  assert not re.search(r"exp2|scalef", src)
  assert _ulps(got, EXP2_X, np.exp2) <= 1.5
