"""AVX2 code's softmax takes its exp2 argument (x - max) * (1 / ln 2) as one FMA, x * (1 / ln 2) + a per-row pivot, with the
pivot's rounding taken back out by the clamp (core.codegen.stash._fma_shift, Renderer.fma_exp_shift): one op less per 8 floats,
and within 80 ulp of float64 (66 seen) on rows of any magnitude where the two-op form took up to 128."""
from __future__ import annotations
import copy
import numpy as np
import pytest
from core import Tensor
from core.ir.ops import Ops
from core.schedule.kernelize import create_schedule
from core.codegen.decompose import EXP2_SCALED
from cpu_kernels import arch_renderer, host_like_renderer, run_rendered

def _avx2(shift: bool):
  rnd = host_like_renderer("LLVM", 32)   # AVX2's rules on any x86 host (narrowed on an AVX-512 one): exp2 by the bits path
  rnd.fma_exp_shift = shift
  return rnd

def test_the_renderer_takes_it_where_exp2_takes_the_bits_path_and_mulacc_fuses():
  assert arch_renderer("LLVM", "znver3").fma_exp_shift is True
  assert arch_renderer("LLVM", "x86-64-v4").fma_exp_shift is False   # vscalefps: exps unscaled, no per-row factor to cancel
  no_fma = copy.copy(arch_renderer("LLVM", "znver3"))
  no_fma.target(frozenset({"avx"}))   # llvm.fmuladd would round the product first
  assert no_fma.fma_exp_shift is False and no_fma.scaled_exp2 is True
  assert arch_renderer("C", "znver3").fma_exp_shift is False

def test_the_exp2_argument_is_one_fma_clamped_at_the_rows_bound():
  from core.codegen.lowerer import lower_kernel
  from core.codegen.opt import optimize
  from core.codegen.opt.expander import expand_kernel
  rnd = _avx2(True)
  (item,) = [it for it in create_schedule([Tensor(np.zeros((64, 1000), np.float32)).softmax(-1).uop])[0] if it.ast.op is Ops.SINK]
  sink = expand_kernel(optimize(item.ast, rnd), vectorize=True, masked=rnd.masked_vectors, simd_bytes=rnd.simd_width)
  def arg(shift: bool):
    (e,) = {u for u in lower_kernel(sink, None, 0, rnd.scratch_bytes, True, False, shift)[0].toposort() if u.op is Ops.EXP2}
    assert e.arg == EXP2_SCALED
    return e.src[0]
  assert arg(False).op is Ops.MUL
  x = arg(True)
  assert x.op is Ops.WHERE and x.src[0].op is Ops.CMPLT and x.src[2].op is Ops.MULACC and x.src[0].src == (x.src[2], x.src[1])

def _ulps(got: np.ndarray, want: np.ndarray) -> float:
  w32 = want.astype(np.float32)
  step = np.maximum(np.spacing(np.abs(w32)).astype(np.float64), 2.0 ** -149)
  same = (got == w32) | (np.isnan(got) & np.isnan(want))
  return float(np.where(same, 0.0, np.abs(got.astype(np.float64) - want) / step).max())

def _rows(cols: int) -> np.ndarray:
  rng = np.random.default_rng(cols)
  rows = [rng.standard_normal(cols) * 30, rng.random(cols) * 220 - 110, np.linspace(-180, 100, cols)]   # exps across the range
  for e in (20, 22, 24, 26, 28, 29, 30, 31, 40, 126, 127):   # pivots rounded by up to 64, and the rows past 2**30
    for sign in (1.0, -1.0):
      rows.append(sign * 2.0 ** e + rng.standard_normal(cols) * 40)
      rows.append(np.float32(sign * 2.0 ** e) + np.arange(cols) * np.spacing(np.float32(2.0 ** e)))   # neighbours of the max
  x = np.array(rows, np.float32)
  special = np.array([rng.standard_normal(cols)] * 5, np.float32)
  special[0, ::3], special[1, :], special[2, 1] = -np.inf, -np.inf, np.inf
  special[3, 2], special[4, :2] = np.nan, 3.4e38
  return np.concatenate([x, special])

@pytest.mark.parametrize("cols", [1000, 1001, 17])
def test_softmax_within_80_ulp_of_float64_on_rows_of_any_magnitude(cols):
  x = _rows(cols)
  with np.errstate(all="ignore"):
    d = x.astype(np.float64) - np.max(np.where(np.isnan(x), -np.inf, x), -1, keepdims=True)
    want = np.exp(d) / np.exp(d).sum(-1, keepdims=True)
  got = run_rendered(_avx2(True), lambda t: t.softmax(-1), x)[0].reshape(x.shape)
  np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
  assert _ulps(got, want) <= 80   # 63 here, 66 the most seen (softmax 4096x1000 of 30 * randn); 112-114 in two roundings
