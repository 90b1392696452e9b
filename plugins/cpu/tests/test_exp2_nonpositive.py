"""exp2 of an input known to be <= 0 (EXP2_NONPOSITIVE, what softmax's x - max(x) is): decompose.fast_exp2_nonpositive drops
fast_exp2's overflow guard, builds 2**n from one factor and takes a polynomial of one degree less, within about 2 ulp."""
from __future__ import annotations
import copy, re, struct
import numpy as np
import pytest
from core import Tensor
from core.ir.dtype import dtypes
from core.ir.ops import Ops, UOp, EXP2_NONPOSITIVE
from core.schedule.kernelize import create_schedule
from core.helpers import host_machine
from cpu_kernels import RENDERERS
from test_vector_math import _run, _ulps, _exact_products

gen = np.random.default_rng(1)
X = np.concatenate([-gen.uniform(0, 260, 200000), -gen.uniform(0, 2, 30000), -np.arange(0, 260, 0.5),
                    [-0.0, 0.0, -np.inf, np.nan, -1e-40, -1e-45, -1e-8, -126, -149, -149.5, -150, -150.5, -151, -250, -251,
                     -251.5, -252, -252.5, -253, -254, -1e30]]).astype(np.float32)

def _nonpositive_exp2(t: Tensor) -> Tensor: return t._wrap(t.uop.exp2(nonpositive=True), t)

@pytest.mark.parametrize("ren", RENDERERS)
def test_nonpositive_exp2_within_about_two_ulp_and_special_values_exact(ren):
  got, _ = _run(ren, _nonpositive_exp2, X)
  np.testing.assert_array_equal(np.isnan(got), np.isnan(X))
  # LLVM 1.77, C 2.07 (no fused multiply-add) over 25M inputs; subnormal results, -inf -> 0 and NaN exact (_ulps asserts them)
  assert _ulps(got, X, np.exp2) <= 2.1

def _src32(fn, renderer=None) -> str:
  """fn's kernel as the LLVM renderer writes it for 8 lanes (AVX2): the bits path, where an AVX-512 host's 16 take vscalefps;
  or as `renderer` writes it."""
  from core.codegen.program import get_program, program_source
  from cpu_kernels import device
  items, _, _ = create_schedule([fn(Tensor(np.zeros_like(X))).uop])
  (item,) = [it for it in items if it.ast.op is Ops.SINK]
  return program_source(get_program(item.ast, renderer or device("LLVM").renderer.narrowed(32)))

def test_nonpositive_exp2_has_no_overflow_guard_and_one_shift():
  src, general = _src32(_nonpositive_exp2), _src32(lambda t: t.exp2())
  clamp_129 = "0x4060200000000000"   # 129.0, fast_exp2's upper clamp, as LLVM IR writes a float
  assert clamp_129 in general and clamp_129 not in src
  assert src.count(" shl ") == 1 and " lshr " not in src and general.count(" shl ") == 2

def test_nonpositive_exp2_takes_one_multiply_add_less():
  # AVX2's softmax is bound by the FMA/multiply pipes: a degree-5 polynomial (5 FMAs) where fast_exp2 takes degree 6
  src, general = _src32(_nonpositive_exp2), _src32(lambda t: t.exp2())
  fmas = re.compile(r"call <\d+ x float> @llvm\.fmuladd")
  assert len(fmas.findall(src)) == 5 and len(fmas.findall(general)) == 6

@pytest.mark.skipif(host_machine() != "x86_64", reason="renders x86-64 code")
def test_vscalefps_nonpositive_exp2_takes_one_multiply_add_less():
  # AVX-512 (vscalefps, vrndscaleps, vreduceps) takes the same degree-5 polynomial where x <= 0, so a softmax's exps
  # are the bits path's bit for bit (test_exp2_scalef); a general exp2 keeps degree 6
  # (rendering only, so any x86-64 host: the renderer is given the flags, as the narrowed renderer's test in test_exp2_scalef)
  from cpu_kernels import device
  wide = copy.copy(device("LLVM").renderer)
  wide.target(frozenset({"avx", "avx2", "fma", "avx512f", "avx512vl", "avx512dq"}))
  src, general = (_src32(f, wide) for f in (_nonpositive_exp2, lambda t: t.exp2()))
  fmas = re.compile(r"call <\d+ x float> @llvm\.fmuladd")
  assert "@llvm.x86.avx512.mask.scalef.ps.512(" in src and "@llvm.x86.avx512.mask.scalef.ps.512(" in general
  assert len(fmas.findall(src)) == 5 and len(fmas.findall(general)) == 6

@pytest.mark.parametrize("x", [float("-inf"), -1e30, -300.0, -252.0])
def test_nonpositive_exp2_far_below_range_takes_no_subnormal_product(x):
  # as fast_exp2 (test_vector_math): a softmax's masked lanes (-inf) multiply by an exact 0.0, no subnormal product (an x86 assist)
  from core.codegen.decompose import fast_exp2_nonpositive
  prods = _exact_products(fast_exp2_nonpositive(UOp.const(dtypes.float32, x)))
  assert prods and all(p == 0 or abs(p) >= 2.0 ** -126 for p in prods), prods

SOFTMAXES = {"softmax": lambda t: t.softmax(-1), "softmax_dtype": lambda t: t.softmax(-1, dtype=dtypes.float32),
             "log_softmax": lambda t: t.log_softmax(-1), "softmax_axis0": lambda t: t.softmax(0)}

@pytest.mark.parametrize("name", SOFTMAXES)
def test_softmax_tells_exp2_its_input_is_nonpositive_and_matches_numpy(name):
  fn = SOFTMAXES[name]
  items, _, _ = create_schedule([fn(Tensor(np.zeros((6, 37), np.float32))).uop])
  exps = [u for it in items if it.ast.op is Ops.SINK for u in it.ast.toposort() if u.op is Ops.EXP2]
  assert exps and all(u.arg == EXP2_NONPOSITIVE for u in exps)
  # rows far apart in scale, a masked row (-inf lanes), tiny differences whose exps are subnormal relative to the max
  x = (gen.standard_normal((6, 37)) * [[1], [10], [100], [1], [1], [1]]).astype(np.float32)
  x[3, ::2] = -np.inf
  x[4] += 300
  x[5, :5] = -150
  with np.errstate(divide="ignore"):
    ax = 0 if name == "softmax_axis0" else -1
    d = x.astype(np.float64) - x.max(ax, keepdims=True)
    ref = d - np.log(np.exp(d).sum(ax, keepdims=True)) if name == "log_softmax" else np.exp(d) / np.exp(d).sum(ax, keepdims=True)
  np.testing.assert_allclose(fn(Tensor(x)).numpy(), ref, rtol=2e-6, atol=1e-7)

@pytest.mark.skipif(host_machine() != "x86_64", reason="renders x86-64 code")
@pytest.mark.parametrize("roundps", [True, False], ids=["zen", "intel"])
def test_avx_nonpositive_exp2_rounds_by_roundps(roundps, monkeypatch):
  # without AVX-512 (renderer.pm_exp2_roundeven) n = roundeven(x), one vroundps, where it was r - 1.5*2**23 after r = x + 1.5*2**23:
  # the same n, so the same values; the rounding constant is added once (r: the exponent's bits) and never subtracted. Every form:
  # exp2 of x <= 0 (log_softmax's), the scaled one a softmax's stash sums (2**63 * exp2) and the general one. Not on an Intel
  # host (EXP2_ROUNDPS off: vroundps is two uops there): r - 1.5*2**23, the constant added and subtracted, the same values
  import plugin_cpu.renderer as R
  from cpu_kernels import device
  monkeypatch.setattr(R, "EXP2_ROUNDPS", roundps)
  avx2 = copy.copy(device("LLVM").renderer)
  avx2.target(frozenset({"avx", "avx2", "fma"}))
  def rounding(s: int) -> str: return "0x%016X" % struct.unpack("<Q", struct.pack("<d", 12582912.0 + 127 + s))[0]
  def rounds_once(src: str, s: int) -> bool:
    uses = len(re.findall(rf"= f(add|sub) <\d+ x float> [^\n]*{rounding(s)}", src))
    return bool(re.search(r"@llvm\.roundeven\.v\d+f32\(", src)) == roundps and uses == (1 if roundps else 2)
  src = _src32(_nonpositive_exp2, avx2)
  assert rounds_once(src, 125), src
  got, _ = _run("LLVM", _nonpositive_exp2, X, avx2)
  np.testing.assert_array_equal(np.isnan(got), np.isnan(X))
  assert _ulps(got, X, np.exp2) <= 2.1
  # a general exp2 (sigmoid's, gelu's) the same way: 1.5 * 2**23 + 254 added once
  from test_vector_math import EXP2_X
  src = _src32(lambda t: t.exp2(), avx2)
  assert rounds_once(src, 127), src
  assert _ulps(_run("LLVM", lambda t: t.exp2(), EXP2_X, avx2)[0], EXP2_X, np.exp2) <= 1.5
  x = gen.standard_normal((16, 1000)).astype(np.float32) * 30
  x[3, ::2] = -np.inf
  from core.codegen.program import get_program, program_source
  items, _, _ = create_schedule([Tensor(x).softmax(-1).uop])
  (item,) = [it for it in items if it.ast.op is Ops.SINK]
  avx2.fma_exp_shift = False   # with it the rounding constant is the row's (stash._fma_shift, test_fma_exp_shift), not a literal
  src = program_source(get_program(item.ast, avx2))
  assert rounds_once(src, 63), src
  e = np.exp(x.astype(np.float64) - x.max(-1, keepdims=True))
  np.testing.assert_allclose(_run("LLVM", lambda t: t.softmax(-1), x, avx2)[0], e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)
