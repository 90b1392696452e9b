"""A MULACC whose product was already rendered in its block (softmax stashes exp's last product and sums it): the LLVM renderer
adds that value where it rendered an FMA that multiplied again (core.codegen.llvm_ir._render_alu)."""
from __future__ import annotations
import re
import numpy as np
import pytest
from core import Tensor
from core.ir.ops import Ops
from core.schedule.kernelize import create_schedule
from core.codegen.program import get_program, program_source
from plugin_cpu.renderer import llvm_rules
from cpu_kernels import device, host_like_renderer, run_rendered

EXP2_M125 = "0x3820000000000000"   # 2**-125, exp2's last factor (decompose.fast_exp2_nonpositive), as LLVM IR writes a float

def _src(fn, x: np.ndarray, rnd) -> str:
  items, _, _ = create_schedule([fn(Tensor(x)).uop])
  (item,) = [it for it in items if it.ast.op is Ops.SINK]
  return program_source(get_program(item.ast, rnd))

def _renderers():
  """32- and 64-byte renderers whose exp2 takes the bits path on any host (AVX2's rules: an AVX-512 CPU's exp2 is vscalefps,
  with no product by 2**-125 to reuse)."""
  out = {}
  for simd in (32, 64):
    out[f"{simd}-byte"] = rnd = host_like_renderer("LLVM", simd)
    rnd.extra_matcher = llvm_rules(frozenset({"avx", "avx2", "fma"}), simd)
    rnd.scaled_exp2 = False   # exp2's value with its last factor, 2**-125 (scaled, test_stash, its last product is p * 2**(n+63))
  return out

@pytest.mark.parametrize("which", ["32-byte", "64-byte"])
@pytest.mark.parametrize("shape", [(4096, 1000), (64, 1000), (8, 256)])
def test_softmax_sums_its_stashed_exp_with_an_add(which, shape):
  rnd = _renderers()[which]
  src = _src(lambda t: t.softmax(-1), np.zeros(shape, np.float32), rnd)
  # the exp's product by 2**-125 is stored (the stash) and summed: one fmul by the constant, then an fadd of that value (a row
  # the vectors pad, AVX-512's 1000 = 62 x 16 + 8, sums the value with its padding lanes selected off: no product to reuse)
  fmuls = re.findall(rf"(%v\d+) = fmul <(\d+) x float> %v\d+, <(?:float {EXP2_M125}(?:, )?)+>", src)
  assert fmuls, src
  if shape[1] % (rnd.simd_width // 4) == 0:
    for v, n in fmuls: assert re.search(rf"= fadd <{n} x float> {v}, %v\d+\n", src), src
  assert not re.search(rf"fmuladd[^\n]*{EXP2_M125}", src), src

def test_a_product_only_the_sum_uses_stays_one_fma():
  x = np.zeros((64, 1000), np.float32)
  src = _src(lambda t: (t * t).sum(-1), x, device("LLVM").renderer)
  assert "@llvm.fmuladd" in src and not re.search(r"= fmul <\d+ x float>", src), src

@pytest.mark.parametrize("cols", [1000, 1001, 256, 17])
def test_softmax_values_match_numpy(cols):
  x = (np.random.default_rng(cols).standard_normal((9, cols)) * 3).astype(np.float32)
  x[1, cols // 2], x[2, :] = np.nan, -np.inf
  x[3] += 300
  x[4, : cols // 2] = -150   # exps of 2**-216: subnormal before the last factor's rounding, 0 after it
  got, _ = run_rendered(device("LLVM").renderer, lambda t: t.softmax(-1), x)
  with np.errstate(invalid="ignore"):
    d = x.astype(np.float64) - x.max(-1, keepdims=True)
    ref = np.exp(d) / np.exp(d).sum(-1, keepdims=True)
  got = got.reshape(x.shape)
  assert np.isnan(got[1:3]).all()
  np.testing.assert_allclose(got[[0, 3, 4, 5, 6, 7, 8]], ref[[0, 3, 4, 5, 6, 7, 8]], rtol=2e-6, atol=1e-7)
  np.testing.assert_allclose(got.sum(-1)[[0, 3, 4, 5]], 1.0, rtol=1e-5)
