"""A softmax's stashed exps are 2**63 times exp on the CPU's bits path (decompose.EXP2_SCALED, core.codegen.stash): the factor
cancels in e * (1 / sum e), so exp2 takes one multiply less (no 2**-125) and the outputs are the unscaled kernel's, bit for bit."""
from __future__ import annotations
import copy
import numpy as np
import pytest
from core import Tensor
from core.ir.ops import Ops
from core.schedule.kernelize import create_schedule
from core.codegen.decompose import EXP2_SCALED
from core.codegen.program import get_program, program_source, program_uops
from plugin_cpu.renderer import llvm_rules
from cpu_kernels import host_like_renderer, run_rendered

EXP2_M125 = "0x3820000000000000"   # 2**-125, the unscaled exp2's last factor, as LLVM IR writes a float
AVX2 = frozenset({"avx", "avx2", "fma"})
AVX512 = AVX2 | {"avx512f", "avx512vl", "avx512dq", "avx512bw"}

def _renderer(scaled: bool = True, simd: int = 32):
  rnd = host_like_renderer("LLVM", simd)
  rnd.extra_matcher, rnd.scaled_exp2 = llvm_rules(AVX2, simd), scaled
  rnd.fma_exp_shift = False   # the row's pivot in one FMA changes the exps' bits (test_fma_exp_shift): this file checks the scale
  return rnd

def _program(fn, shape, rnd):
  (item,) = [it for it in create_schedule([fn(Tensor(np.zeros(shape, np.float32))).uop])[0] if it.ast.op is Ops.SINK]
  return get_program(item.ast, rnd)

@pytest.mark.parametrize("simd", [32, 64])
@pytest.mark.parametrize("shape", [(4096, 1000), (64, 1001), (8, 256)])
def test_softmax_stashes_scaled_exps_without_a_constant_multiply(simd, shape):
  p = _program(lambda t: t.softmax(-1), shape, _renderer(True, simd))
  assert EXP2_M125 not in program_source(p)
  unscaled = _program(lambda t: t.softmax(-1), shape, _renderer(False, simd))
  assert EXP2_M125 in program_source(unscaled)

def test_the_stash_marks_softmax_exp2_scaled():
  from core.codegen.lowerer import lower_kernel
  from core.codegen.opt import optimize
  from core.codegen.opt.expander import expand_kernel
  rnd = _renderer()
  (item,) = [it for it in create_schedule([Tensor(np.zeros((64, 1000), np.float32)).softmax(-1).uop])[0] if it.ast.op is Ops.SINK]
  sink = expand_kernel(optimize(item.ast, rnd), vectorize=True, masked=rnd.masked_vectors, simd_bytes=rnd.simd_width)
  args = lambda scaled: {u.arg for u in lower_kernel(sink, None, 0, rnd.scratch_bytes, scaled)[0].toposort() if u.op is Ops.EXP2}
  assert args(True) == {EXP2_SCALED} and args(False) == {"nonpositive"}

@pytest.mark.parametrize("fn", [lambda t: t.softmax(-1) * 2, lambda t: t.log_softmax(-1), lambda t: t.exp().sum(-1, keepdim=True) * t])
def test_other_row_kernels_keep_exp_unscaled(fn):
  # the output is not E times 1 / sum(E) alone (a factor, a log, a product with the input): nothing to cancel the scale
  assert all(u.arg != EXP2_SCALED for u in program_uops(_program(fn, (64, 1000), _renderer())) if u.op is Ops.EXP2)

def test_avx512_exp2_takes_vscalefps_unscaled():
  rnd = copy.copy(host_like_renderer("LLVM", 32))
  rnd.target(AVX512)
  assert rnd.scaled_exp2 is False
  rnd.target(AVX2)
  assert rnd.scaled_exp2 is True

@pytest.mark.parametrize("cols", [1000, 1001, 256, 17])
def test_scaled_softmax_equals_unscaled_bit_for_bit(cols):
  x = (np.random.default_rng(cols).standard_normal((10, cols)) * 3).astype(np.float32)
  x[1, cols // 2], x[2, :], x[3, ::2], x[9, 0] = np.nan, -np.inf, -np.inf, np.inf
  x[4] += 300
  x[5] *= 100   # exps down to 0 across the whole range
  x[6, : cols // 2] = -150
  x[7, : cols // 2] = -90   # exps of about 1e-39: subnormal outputs
  got, _ = run_rendered(_renderer(True), lambda t: t.softmax(-1), x)
  want, _ = run_rendered(_renderer(False), lambda t: t.softmax(-1), x)
  got, want = got.reshape(x.shape), want.reshape(x.shape)
  normal = ~(np.abs(want) < 2.0 ** -126)
  np.testing.assert_array_equal(got[normal], want[normal])   # NaN rows included
  # subnormal outputs round once (the unscaled exp rounded to a subnormal before its division): within one step of each other
  assert np.abs(got[~normal].astype(np.float64) - want[~normal]).max(initial=0) <= 2.0 ** -149
  assert np.isnan(got[[1, 2, 9]]).all() and (got[7, : cols // 2] > 0).all()

def test_a_scaled_exp2_given_avx512_rules_keeps_the_bits_path():
  # vscalefps computes exp2 unscaled: an EXP2_SCALED must not take it (target() makes none there; a renderer set up by hand may)
  for scaled in (True, False):
    rnd = _renderer(scaled, 64)
    rnd.extra_matcher = llvm_rules(AVX512, 64)
    assert ("scalef" in program_source(_program(lambda t: t.softmax(-1), (64, 1000), rnd))) is not scaled
