"""The AMD renderer: amdgcn LLVM IR (kernel ABI, thread ids, LDS, barriers, private allocas) and its per-arch declarations."""
from __future__ import annotations
import pytest
from core.ir.dtype import dtypes
from core.ir.ops import Ops
from core.testing.kernels import lds_kernel, loop_kernel
from amd_test_kernels import ARCH_NAMES
from plugin_amd.renderer import ARCHS, DEFAULT_ARCH, AMDLLVMRenderer, arch_info

def test_lds_kernel_ir():
  src = AMDLLVMRenderer("gfx1100").render("rev", lds_kernel(local=64, groups=4))
  assert 'target triple = "amdgcn-amd-amdhsa"' in src
  assert "define amdgpu_kernel void @rev(ptr addrspace(1) noalias align 4 %data0, ptr addrspace(1) noalias align 4 %data1)" in src
  assert "call i32 @llvm.amdgcn.workgroup.id.x()" in src and "call i32 @llvm.amdgcn.workitem.id.x()" in src
  assert "@rev.temp0 = internal addrspace(3) global [64 x float] undef, align 16" in src
  # the barrier is fenced on both sides so LDS stores before it are visible after it
  assert ('fence syncscope("workgroup") release\n  call void @llvm.amdgcn.s.barrier()\n  fence syncscope("workgroup") acquire') in src
  assert src.index("store float") < src.index("call void @llvm.amdgcn.s.barrier()") < src.index("load float, ptr addrspace(3)")
  assert '"amdgpu-flat-work-group-size"="64,64"' in src

def test_work_group_size_attribute_is_the_product_of_local_ids():
  assert '"amdgpu-flat-work-group-size"="1,1"' in AMDLLVMRenderer().render("k", loop_kernel())
  assert '"amdgpu-flat-work-group-size"="128,128"' in AMDLLVMRenderer().render("k", lds_kernel(local=128, groups=2))
  with pytest.raises(ValueError, match="2048 work-items per workgroup, the most is 1024"): AMDLLVMRenderer().render("k", lds_kernel(local=2048))

def test_private_memory_is_addrspace_5():
  src = AMDLLVMRenderer().render("k", loop_kernel())
  assert "%acc0 = alloca [1 x float], align 16, addrspace(5)" in src and "%ridx1.addr = alloca i32, addrspace(5)" in src
  assert "ptr addrspace(5) %ridx1.addr" in src and "i32 %n)" in src
  assert " ptr %" not in src and "ptr," not in src   # no generic-address-space pointer left anywhere

def test_float64_transcendentals_go_through_float32():
  # LLVM has no float64 sin/exp2/log2/pow for amdgcn (it aborts the process): the renderer must never ask for them
  for op, fn in ((Ops.SIN, "sin"), (Ops.EXP2, "exp2"), (Ops.LOG2, "log2"), (Ops.SQRT, "sqrt")):
    src = AMDLLVMRenderer().render("k", loop_kernel(dtypes.float64, op))
    if fn == "sqrt": assert "@llvm.sqrt.f64" in src   # v_sqrt_f64 exists: kept
    else: assert f"@llvm.{fn}.f64" not in src and f"call float @llvm.{fn}.f32" in src and f"@amd.f32.{fn}.f64" in src

def test_declarations_per_arch():
  assert set(ARCHS) == set(ARCH_NAMES) and DEFAULT_ARCH == "gfx1100"
  for a in ARCH_NAMES:
    r = AMDLLVMRenderer(a)
    assert r.arch == a and r.device == "AMD" and r.has_local and r.has_shared
    assert r.info.wave == (64 if a.startswith("gfx9") else 32)
    assert r.shared_max == (160 if a == "gfx950" else 64) * 1024
    assert {dtypes.bool, dtypes.int32, dtypes.float32, dtypes.float16, dtypes.float64} <= r.supported_dtypes
    assert r.local_max is not None and r.global_max is not None and max(r.local_max) == 1024
  assert AMDLLVMRenderer().arch == "gfx1100"

def test_unknown_arch_is_a_clear_error():
  with pytest.raises(ValueError, match=r"AMD arch 'gfx803' is not supported: choose one of gfx90a, gfx942, gfx950, gfx1100, gfx1201"):
    AMDLLVMRenderer("gfx803")
  with pytest.raises(ValueError, match="not supported"): arch_info("sm_90")
