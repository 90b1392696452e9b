"""float32 exp2 on AVX-512 by vscalefps (plugin_cpu.renderer.pm_exp2_scalef): p * 2**n in one instruction, where 2**n from the
float's bits takes 4 integer ops and a second multiply. Both round p * 2**n once, so the results are the bits path's bit for bit:
overflow to inf, underflow through the subnormals to 0, NaN and -inf included. Other targets keep the bits path."""
from __future__ import annotations
import copy, re, warnings
import numpy as np
import pytest
from core import Tensor
from core.ir.ops import Ops
from core.schedule.kernelize import create_schedule
from core.codegen.program import get_program, program_source
from core.helpers import host_machine
from plugin_cpu.compiler import host_flags
from plugin_cpu.renderer import CPULLVMRenderer, extra_rules, llvm_rules, scalef_lanes
from cpu_kernels import device, run_rendered

gen = np.random.default_rng(5)
X = np.concatenate([gen.uniform(-160, 140, 20000), gen.uniform(-2, 2, 4000), gen.uniform(-152, -124, 4000),
                    [np.nan, np.inf, -np.inf, 0.0, -0.0, 1, 127.99, 128, 128.5, 200, -126, -126.5, -149, -149.5, -150, -150.5, -151,
                     -254, -300, -1e30, 1e30, 1e-8, 2.5, -3.25]]).astype(np.float32)   # 28024 = 3503 rows of 8
avx512 = pytest.mark.skipif(16 not in scalef_lanes(host_flags()), reason="runs AVX-512 code: a host with avx512f")

def _run(rnd, fn, x: np.ndarray) -> tuple[np.ndarray, str]:
  got, src = run_rendered(rnd, fn, x)
  return got.reshape(x.shape), src

def _renderers(simd: int):
  """The host LLVM renderer at `simd` bytes with the vscalefps rule (new) and without it (old)."""
  new = copy.copy(device("LLVM").renderer)
  new.simd_width, new.extra_matcher = simd, llvm_rules(host_flags(), simd)
  old = copy.copy(new)
  old.extra_matcher = extra_rules(simd)
  return new, old

def _exp2_rows(t: Tensor) -> Tensor: return t.reshape(-1, 8).exp2()

@avx512
@pytest.mark.parametrize("simd", [64, 32, 16])
@pytest.mark.parametrize("fn", [lambda t: t.exp2(), _exp2_rows], ids=["flat", "rows_of_8"])
def test_exp2_by_vscalefps_is_the_bits_path_bit_for_bit(simd, fn):
  new, old = _renderers(simd)
  got, src = _run(new, fn, X)
  want, old_src = _run(old, fn, X)
  assert re.search(r"call <\d+ x float> @llvm\.x86\.avx512\.mask\.scalef\.ps\.(128|256|512)\(", src)
  assert "scalef" not in old_src
  np.testing.assert_array_equal(np.isnan(got), np.isnan(X))
  np.testing.assert_array_equal(got.view(np.uint32)[~np.isnan(X)], want.view(np.uint32)[~np.isnan(X)])
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    exact = np.exp2(X.astype(np.float64)).astype(np.float32)
  edge = ~np.isfinite(exact) | (exact == 0) | ~np.isfinite(X)   # inf, 0 (below -150, -inf) and NaN exactly as float64 gives them
  np.testing.assert_array_equal(got[edge], exact[edge])

@avx512
def test_softmax_rows_take_vscalefps():
  x = (gen.standard_normal((37, 1000)) * 3).astype(np.float32)
  x[5, ::3] = -np.inf
  new, old = _renderers(64)
  got, src = _run(new, lambda t: t.softmax(-1), x)
  want, old_src = _run(old, lambda t: t.softmax(-1), x)
  assert "@llvm.x86.avx512.mask.scalef.ps.512(" in src and "scalef" not in old_src
  # a softmax's exp of x - max <= 0 takes decompose.fast_exp2_nonpositive's degree-5 polynomial on both paths (before,
  # vscalefps took fast_exp2's degree 6: 1-4 ulp apart in 56% of the elements), shifted by 1/2 where AVX-512DQ splits its
  # argument at floor(t) (test_softmax_exp_splits_at_the_floor): not the bits path's bit for bit there
  if "avx512dq" not in host_flags(): np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
  e = np.exp(x.astype(np.float64) - x.max(-1, keepdims=True))
  np.testing.assert_allclose(got, e / e.sum(-1, keepdims=True), rtol=4e-6, atol=0)
  assert (got[5, ::3] == 0).all()   # exp(-inf) is exactly 0

@pytest.mark.skipif(not {"avx", "avx2"} <= host_flags(), reason="renders for an AVX2 x86-64 CPU: a host with AVX2")
def test_avx2_and_the_c_renderer_keep_the_bits_path():
  # no vscalefps without AVX-512: 2**n from the float's bits (the shifts), in LLVM IR for haswell and in the C renderer's source
  (item,) = [it for it in create_schedule([Tensor(X).exp2().uop])[0] if it.ast.op is Ops.SINK]
  llvm = program_source(get_program(item.ast, CPULLVMRenderer(arch="haswell")))
  c = program_source(get_program(item.ast, device("C").renderer))
  assert "scalef" not in llvm and "scalef" not in c
  assert re.search(r"= shl <\d+ x i32>", llvm) and "<<" in c

@pytest.mark.skipif(host_machine() != "x86_64", reason="renders x86-64 code")
def test_a_narrowed_renderer_takes_the_narrower_cpus_exp2():
  # rendering only, so any x86-64 host: an AVX-512 target takes vscalefps, the same renderer narrowed to 32 bytes (AVX2) does not
  (item,) = [it for it in create_schedule([Tensor(X).exp2().uop])[0] if it.ast.op is Ops.SINK]
  wide = copy.copy(device("LLVM").renderer)
  wide.target(frozenset({"avx", "avx2", "fma", "avx512f", "avx512vl"}))
  narrow = wide.narrowed(32)
  assert (wide.simd_width, narrow.simd_width, narrow.simd_regs, narrow.flags) == (64, 32, 16, frozenset({"avx", "avx2", "fma"}))
  assert "scalef" in program_source(get_program(item.ast, wide))
  assert "scalef" not in program_source(get_program(item.ast, narrow))

@avx512
@pytest.mark.skipif("avx512dq" not in host_flags(), reason="vreduceps: a host with avx512dq")
@pytest.mark.parametrize("simd", [64, 32, 16])
def test_vscalefps_exp2_splits_x_in_two_instructions(simd):
  # n = round(x) by llvm.roundeven (vrndscaleps) and x - n by vreduceps, unclamped, not the clamp's compares and the add and
  # subtracts of 1.5 * 2**23 + 254: the values are the bits path's (above), inf, -inf and NaN included
  new, old = _renderers(simd)
  got, src = _run(new, lambda t: t.exp2(), X)
  want, old_src = _run(old, lambda t: t.exp2(), X)
  assert re.search(r"@llvm\.roundeven\.v\d+f32\(", src) and re.search(r"@llvm\.x86\.avx512\.mask\.reduce\.ps\.(128|256|512)\(", src)
  for const in ("0x4168001FC0000000", "0xC06FC00000000000"):   # 1.5 * 2**23 + 254 and the clamp at -254
    assert const not in src and const in old_src
  np.testing.assert_array_equal(got.view(np.uint32)[~np.isnan(X)], want.view(np.uint32)[~np.isnan(X)])
  np.testing.assert_array_equal(np.isnan(got), np.isnan(X))

@avx512
@pytest.mark.skipif("avx512dq" not in host_flags(), reason="vreduceps: a host with avx512dq")
def test_softmax_exp_splits_at_the_floor(monkeypatch):
  # exp2 of (x - max) * 1/ln 2: t = that + 1/2 in the multiply's place (one FMA), f = t - floor(t) by vreduceps rounding down
  # (immediate 9) and vscalefps flooring t itself (decompose.fast_exp2_floor): no vrndscaleps (llvm.roundeven)
  import plugin_cpu.renderer as renderer
  x = (gen.standard_normal((40, 1000)) * 3).astype(np.float32)
  x[1, ::3], x[2, :-1], x[3, ::7], x[4] = -np.inf, -np.inf, np.nan, -np.inf   # masked lanes, one lane left, NaN, a row of -inf
  x[5] += 3e38                  # the largest maxima next to small ones
  x[6] -= 3e38
  x[7] *= 1e30                  # one lane 1, the rest 0
  x[8, :500] -= 150             # exps through the subnormals
  x[9] = np.arange(1000, dtype=np.float32) * -0.5   # t at every half: floor and nearest split differently
  new, _ = _renderers(64)
  got, src = _run(new, lambda t: t.softmax(-1), x)
  assert re.search(r"@llvm\.x86\.avx512\.mask\.reduce\.ps\.512\(<16 x float> %\w+, i32 9,", src) and "@llvm.roundeven" not in src
  x64 = x.astype(np.float64)
  with np.errstate(invalid="ignore"):
    e = np.exp(x64 - x64.max(-1, keepdims=True))
    want = e / e.sum(-1, keepdims=True)
  np.testing.assert_array_equal(np.isnan(got), np.isnan(want))   # a NaN lane or an all -inf row: NaN rows
  ok = ~np.isnan(want)
  np.testing.assert_allclose(got[ok], want[ok], rtol=4e-6, atol=3e-45)   # (two of the smallest subnormal's steps)
  assert (got[1, ::3] == 0).all() and got[2, -1] == 1 and (got[7][x[7] < x[7].max()] == 0).all()
  monkeypatch.setattr(renderer, "EXP2_FLOOR", False)
  _, old_src = _run(_renderers(64)[0], lambda t: t.softmax(-1), x)
  assert "@llvm.roundeven" in old_src and not re.search(r"mask\.reduce\.ps\.512\(<16 x float> %\w+, i32 9,", old_src)
