"""The PTX renderer: nvptx64 LLVM IR (kernel ABI, %tid/%ctaid, shared memory, barriers), its per-arch declarations, and the
transcendental decompositions it asks codegen for (checked against numpy)."""
from __future__ import annotations
import math
import numpy as np
import pytest
from core.ir.dtype import dtypes, DType
from core.ir.ops import UOp, Ops
from core.ir.pattern import graph_rewrite
from nv_test_kernels import ARCH_NAMES, evaluate, loop_kernel, shared_kernel
from plugin_nv.renderer import ARCHS, DEFAULT_ARCH, PTXRenderer, arch_info, pm_nv_math

def test_shared_kernel_ir():
  src = PTXRenderer("sm_90").render("rev", shared_kernel(threads=128, blocks=8))
  assert src.startswith('target triple = "nvptx64-nvidia-cuda"\n')
  assert "define ptx_kernel void @rev(ptr addrspace(1) noalias align 4 %data0, ptr addrspace(1) noalias align 4 %data1) #0 {" in src
  assert "call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()" in src and "call i32 @llvm.nvvm.read.ptx.sreg.tid.x()" in src
  assert "@rev.temp0 = internal addrspace(3) global [128 x float] undef, align 16" in src
  assert src.index("store float") < src.index("call void @llvm.nvvm.barrier0()") < src.index("load float, ptr addrspace(3)")
  assert 'attributes #0 = { nounwind "nvvm.reqntid"="128,1,1" }' in src

def test_loop_kernel_ir_params_and_private_memory():
  src = PTXRenderer("sm_80").render("loop", loop_kernel(dtypes.float64))
  assert "define ptx_kernel void @loop(ptr addrspace(1) noalias align 8 %data0, ptr addrspace(1) noalias align 8 %data1, i32 %n) #0 {" in src
  assert "%acc0 = alloca [1 x double], align 16" in src and "%ridx1.addr = alloca i32" in src
  assert '"nvvm.reqntid"="1,1,1"' in src and "sreg.tid" not in src

def test_block_size_limits():
  with pytest.raises(ValueError, match=r"kernel k: a block of 2048x1x1 threads; NV allows 1024 in all"):
    PTXRenderer().render("k", shared_kernel(threads=2048))

def test_declarations_per_arch():
  assert set(ARCHS) == set(ARCH_NAMES) and DEFAULT_ARCH == "sm_90" and PTXRenderer().arch == "sm_90"
  for a in ARCH_NAMES:
    r = PTXRenderer(a)
    assert r.arch == a and r.device == "NV" and r.suffix == "PTX" and r.has_local and r.has_shared
    assert r.shared_max == 48 * 1024 and r.local_max == (1024, 1024, 64) and r.global_max == (2**31 - 1, 65535, 65535)
    assert {dtypes.bool, dtypes.int32, dtypes.float32, dtypes.float16, dtypes.bfloat16, dtypes.float64} <= r.supported_dtypes
    assert not r.supported_dtypes & set(dtypes.fp8s)
  assert [arch_info(a).sm for a in ARCH_NAMES] == [80, 86, 89, 90, 100, 120]
  assert {a: arch_info(a).ptx for a in ("sm_80", "sm_90", "sm_100", "sm_120")} == \
    {"sm_80": "+ptx80", "sm_90": "+ptx80", "sm_100": "+ptx86", "sm_120": "+ptx87"}

def test_unknown_arch_is_a_clear_error():
  with pytest.raises(ValueError, match=r"NV arch 'sm_75' is not supported: choose one of sm_80, sm_86, sm_89, sm_90, sm_100, sm_120"):
    PTXRenderer("sm_75")
  with pytest.raises(ValueError, match="not supported"): arch_info("gfx1100")

def test_undecomposed_transcendental_is_refused_not_passed_to_llvm():
  # LLVM's NVPTX backend aborts the whole process on llvm.sin; the renderer must stop first with an exception
  x = UOp.param(0, dtypes.float32.ptr(4))
  ld = x.index(UOp.const(dtypes.int32, 0)).load()
  with pytest.raises(NotImplementedError, match=r"llvm.sin of float has no NVPTX lowering"):
    PTXRenderer().render("k", [*dict.fromkeys(x.index(UOp.const(dtypes.int32, 0)).store(ld.sin()).toposort())])

# *** the decompositions pm_nv_math makes, evaluated on numpy arrays with a correctly rounded fma ***

def _decomposed(op: Ops, dt: DType, *args: np.ndarray) -> np.ndarray:
  leaves = [UOp(Ops.DEFINE_VAR, dt, (), (f"a{i}", 0, 1)) for i in range(len(args))]
  out = graph_rewrite(UOp(op, dt, tuple(leaves)), pm_nv_math, name="nv transcendentals")
  assert not [u.op for u in out.toposort() if u.op in (Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.POW)]
  return evaluate(out, dict(zip(leaves, args)))

def _ulps(got: np.ndarray, want: np.ndarray) -> float:
  fin = np.isfinite(want)
  assert np.array_equal(np.isnan(got), np.isnan(want)) and np.array_equal(got[np.isinf(want)], want[np.isinf(want)])
  return float(np.max(np.abs(got[fin].astype(np.float64) - want[fin]) / np.spacing(np.abs(want[fin]).astype(got.dtype))))

RNG = np.random.default_rng(17)
SPECIAL = [0.0, -0.0, 1.0, -1.0, math.inf, -math.inf, math.nan]

def test_float64_exp2():
  x = np.concatenate([RNG.uniform(-30, 30, 150), RNG.uniform(-1100, 1100, 150), [-1074.0, -1075.5, 1023.5, 1024.0] + SPECIAL])
  with np.errstate(all="ignore"): want = np.exp2(x)
  assert _ulps(_decomposed(Ops.EXP2, dtypes.float64, x), want) <= 2

def test_float64_log2():
  x = np.concatenate([np.exp(RNG.uniform(-700, 700, 150)), RNG.uniform(0.6, 1.6, 150), [5e-324, 1e-310, 2.0, 0.5] + SPECIAL])
  with np.errstate(all="ignore"): want = np.log2(x)
  assert _ulps(_decomposed(Ops.LOG2, dtypes.float64, x), want) <= 3

def test_float64_sin():
  x = np.concatenate([RNG.uniform(-7, 7, 150), RNG.uniform(-1e6, 1e6, 100), [math.pi, math.pi / 2, 1e-300, 1e9] + SPECIAL])
  with np.errstate(all="ignore"): want = np.sin(x)
  assert _ulps(_decomposed(Ops.SIN, dtypes.float64, x), want) <= 2

def test_float32_sin_goes_through_float64():
  x = np.concatenate([RNG.uniform(-100, 100, 200), SPECIAL]).astype(np.float32)
  with np.errstate(all="ignore"): want = np.sin(x.astype(np.float64)).astype(np.float32)
  assert _ulps(_decomposed(Ops.SIN, dtypes.float32, x), want) <= 1

def test_float32_exp2_and_log2_use_core_vector_math():
  x = np.concatenate([RNG.uniform(-20, 20, 200), SPECIAL]).astype(np.float32)
  assert _ulps(_decomposed(Ops.EXP2, dtypes.float32, x), np.exp2(x.astype(np.float64)).astype(np.float32)) <= 2
  y = np.concatenate([np.exp(RNG.uniform(-80, 80, 200)), SPECIAL]).astype(np.float32)
  with np.errstate(all="ignore"): want = np.log2(y.astype(np.float64)).astype(np.float32)
  assert _ulps(_decomposed(Ops.LOG2, dtypes.float32, y), want) <= 3

def test_half_goes_through_float32():
  out = graph_rewrite(UOp(Ops.EXP2, dtypes.float16, (UOp(Ops.DEFINE_VAR, dtypes.float16, (), ("a", 0, 1)),)), pm_nv_math)
  assert out.op is Ops.CAST and out.dtype is dtypes.float16 and out.src[0].dtype is dtypes.float32
  x = np.array([0.5, -3.0, 10.0, -20.0, 15.9], np.float16)
  assert np.array_equal(_decomposed(Ops.EXP2, dtypes.float16, x), np.exp2(x.astype(np.float64)).astype(np.float16))

def test_pow_signs_and_nans():
  b = np.array([2.0, -2.0, -2.0, 0.5, 3.0, -8.0, 0.0, 10.0, math.nan])
  e = np.array([10.0, 3.0, 0.5, -2.0, 0.0, 1 / 3, 2.0, 1.5, 0.0])
  got = _decomposed(Ops.POW, dtypes.float64, b, e)
  assert np.allclose(got, [1024.0, -8.0, math.nan, 4.0, 1.0, math.nan, 0.0, 10.0 ** 1.5, 1.0], rtol=1e-15, equal_nan=True)
