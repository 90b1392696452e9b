"""float32 max on AVX-512 by vmaxps and vfixupimmps (plugin_cpu.renderer.pm_max_fixup): `a > b ? a : b`, with a put back where it
is a NaN, in two instructions where the compare-based form takes four. The values are the compare-based form's bit for bit: NaN
from either operand, ties (signed zeros) give b."""
from __future__ import annotations
import copy, re
import numpy as np
import pytest
from plugin_cpu.compiler import host_flags
from plugin_cpu.renderer import CPULLVMRenderer, extra_rules, llvm_rules, pm_exp2_scalef, scalef_lanes
import plugin_cpu.renderer as renderer
from cpu_kernels import device, run_rendered, run_on_renderer

SPECIAL = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 1e-40, -1e-40, 3.4e38, -3.4e38, 2.5, 7.0]
A, B = (np.array(v, np.float32) for v in zip(*[(a, b) for a in SPECIAL for b in SPECIAL]))   # every ordered pair: 196
avx512 = pytest.mark.skipif(16 not in scalef_lanes(host_flags()), reason="runs AVX-512 code: a host with avx512f")

def _renderers(simd: int) -> tuple[CPULLVMRenderer, CPULLVMRenderer]:
  """The host LLVM renderer at `simd` bytes with the vmaxps + vfixupimmps rule (new) and without it (old; vscalefps in both)."""
  new = copy.copy(device("LLVM").renderer)
  new.simd_width, new.extra_matcher = simd, llvm_rules(host_flags(), simd)
  old = copy.copy(new)
  old.extra_matcher = pm_exp2_scalef(scalef_lanes(host_flags())) + extra_rules(simd)
  return new, old

def bits(x: np.ndarray) -> np.ndarray: return x.view(np.uint32)

def max_of_pairs(new: CPULLVMRenderer, old: CPULLVMRenderer) -> tuple[str, str]:
  """The elementwise max of every ordered pair (A, B) rendered by `new` and by `old`: bit for bit the same, and the compare
  form's values (a where a > b or a is NaN, else b). Returns both sources."""
  got, src = run_rendered(new, lambda a, b: a.maximum(b), A, B)
  want, old_src = run_rendered(old, lambda a, b: a.maximum(b), A, B)
  np.testing.assert_array_equal(bits(got), bits(want))
  np.testing.assert_array_equal(bits(got), bits(np.where((A > B) | np.isnan(A), A, B)))
  return src, old_src

def nan_rows(cols: int) -> np.ndarray:
  """9 rows of `cols` float32: a NaN in the middle, first, last (rows 1-3), all -inf (4), signed zeros (5, 6), the rest random."""
  x = (np.random.default_rng(cols).standard_normal((9, cols)) * 3).astype(np.float32)
  x[1, cols // 2], x[2, 0], x[3, -1], x[4, :] = np.nan, np.nan, np.nan, -np.inf
  x[5, ::2], x[6, :] = -0.0, 0.0
  return x

@avx512
@pytest.mark.parametrize("simd", [64, 32, 16])
def test_elementwise_max_is_the_compare_form_bit_for_bit(simd):
  src, old_src = max_of_pairs(*_renderers(simd))
  assert re.search(r"@llvm\.x86\.avx512\.mask\.fixupimm\.ps\.(128|256|512)\(", src) and not re.search(r"fcmp uno <\d+ x float>", src)
  assert "fixupimm" not in old_src and re.search(r"fcmp uno <\d+ x float>", old_src)

@avx512
@pytest.mark.parametrize("cols", [1000, 1001, 256, 17])
def test_row_max_and_softmax_keep_nans(cols, monkeypatch):
  # softmax's exps as the bits path splits them (at the nearest integer, not the floor: test_exp2_scalef), to compare bit for bit
  monkeypatch.setattr(renderer, "EXP2_FLOOR", False)
  x = nan_rows(cols)
  new, old = _renderers(64)
  for fn, ref in ((lambda t: t.max(-1), lambda: x.max(-1)), (lambda t: t.softmax(-1), None)):
    got, src = run_rendered(new, fn, x)
    want, _ = run_rendered(old, fn, x)
    # a row of whole vectors: its row max is vector maxes, vmaxps + vfixupimmps alone, vmaxps in softmax (MAX_NO_NAN)
    if cols % 8 == 0: assert ("fixupimm" in src) == (ref is not None)
    if ref is None:   # softmax's exps: which sign a NaN gets is the order of an FMA's operands (IEEE 754 leaves it open)
      got, want = (np.where(np.isnan(v), np.float32(np.nan), v) for v in (got, want))
    np.testing.assert_array_equal(bits(got), bits(want))
    if ref is not None: np.testing.assert_array_equal(got, ref())
  assert np.isnan(got.reshape(x.shape)[1:5]).all() and not np.isnan(got.reshape(x.shape)[[0, 5, 6, 7, 8]]).any()

@pytest.mark.parametrize("renderer", ["LLVM", "C"])
def test_max_with_nans_matches_numpy_on_both_renderers(renderer):
  run_on_renderer(renderer, """
x = np.random.default_rng(1).standard_normal((5, 1000)).astype(np.float32)
x[1, 100], x[2, 999], x[3, :], x[4, ::3] = np.nan, np.nan, -np.inf, -0.0
np.testing.assert_array_equal(Tensor(x).max(-1).numpy(), x.max(-1))
np.testing.assert_array_equal(Tensor(x).maximum(Tensor(x[::-1].copy())).numpy(), np.maximum(x, x[::-1]))
for y in (x, x[:, :999].copy(), np.random.default_rng(2).standard_normal((3, 7001)).astype(np.float32)):   # odd rows, over scratch_bytes
  e = np.exp(y.astype(np.float64) - y.max(-1, keepdims=True))
  with np.errstate(invalid="ignore"): want = e / e.sum(-1, keepdims=True)
  np.testing.assert_allclose(Tensor(y).softmax(-1).numpy(), want, rtol=1e-5, atol=1e-7)
print("ok")""")
