"""The OpenCL C renderer: kernel shape (address spaces, work-item functions, barrier, reqd_work_group_size), half native with
cl_khr_fp16 and through vload_half/vstore_half (computed in float, rounded per op) without it; results on the OpenCL driver."""
from __future__ import annotations
from typing import Any
import numpy as np
import pytest
from core.ir.dtype import dtypes
from core.ir.ops import UOp, Ops
from core.testing.kernels import c, lds_kernel, linear, loop_kernel, special
from plugin_qcom.renderer import ADRENO, CLCaps, OpenCLRenderer

def half_kernel(n: int = 8) -> list[UOp]:
  """out[i] = a[i] * b[i] + 1 + k in half, with int variable k: one rounding per op."""
  out, a, b = (UOp.param(i, dtypes.float16.ptr(n)) for i in range(3))
  k = UOp(Ops.DEFINE_VAR, dtypes.int32, (), ("k", 0, 10))
  i = special("gidx0", n)
  v = a.index(i).load() * b.index(i).load() + c(1.0, dtypes.float16) + k.cast(dtypes.float16)
  return linear(out, a, b, k, out.index(i).store(v))

def test_kernel_signature_ids_local_memory_and_barrier() -> None:
  src = OpenCLRenderer().render("rev", lds_kernel(16, 4))
  assert "__kernel __attribute__((reqd_work_group_size(16,1,1))) void rev(__global float* restrict data0, __global const float* restrict data1)" in src
  assert "int gidx0 = (int)get_group_id(0);" in src and "int lidx0 = (int)get_local_id(0);" in src
  assert "__local float temp0[16];" in src and "barrier(CLK_LOCAL_MEM_FENCE);" in src

def test_adreno_half_is_native() -> None:
  src = OpenCLRenderer(ADRENO).render("h", half_kernel())
  assert src.startswith("#pragma OPENCL FP_CONTRACT OFF\n#pragma OPENCL EXTENSION cl_khr_fp16 : enable")
  assert "__global half* restrict data0" in src and "__global const half* restrict data1" in src and "vload_half" not in src and "const int k" in src

def test_half_without_fp16_goes_through_vload_half() -> None:
  src = OpenCLRenderer(CLCaps(fp16=False)).render("h", half_kernel())
  assert "cl_khr_fp16" not in src and "vload_half(0, (data1+gidx0))" in src and "vstore_half(" in src
  assert "core_rh(" in src   # each half result rounded back to half precision

def test_work_group_over_the_device_limit_is_refused() -> None:
  with pytest.raises(ValueError, match="a work-group of 2048x1x1 items; the device allows 1024"):
    OpenCLRenderer(ADRENO).render("rev", lds_kernel(2048, 1))

def test_double_only_where_the_device_has_it() -> None:
  assert dtypes.float64 not in OpenCLRenderer(ADRENO).supported_dtypes
  assert dtypes.float64 in OpenCLRenderer(CLCaps(fp64=True)).supported_dtypes

def _run(clctx: Any, caps: CLCaps, uops: list, args: list[np.ndarray], groups: tuple, local: tuple, vals: tuple = ()) -> list[np.ndarray]:
  from plugin_qcom.compiler import CLCompiler
  from plugin_qcom.iface_cl import CLAllocator, CLProgram
  from core.device.allocator import BufferSpec
  src = OpenCLRenderer(caps).render("k", uops)
  prg = CLProgram(clctx, "k", CLCompiler(clctx).compile(src))
  alloc = CLAllocator("QCOM", clctx)
  bufs = [alloc.alloc(a.nbytes, BufferSpec()) for a in args]
  for b, a in zip(bufs, args): alloc._copyin(b, memoryview(a.copy()).cast("B"))
  prg(*bufs, global_size=groups, local_size=local, vals=vals)
  outs = [np.empty_like(a) for a in args]
  for b, o in zip(bufs, outs): alloc._copyout(memoryview(o).cast("B"), b)
  return outs

def test_reverse_through_local_memory_runs(clctx: Any) -> None:
  from plugin_qcom.iface_cl import caps_of
  x = np.arange(64, dtype=np.float32)
  out = _run(clctx, caps_of(clctx), lds_kernel(16, 4), [np.zeros(64, np.float32), x], (4, 1, 1), (16, 1, 1))[0]
  np.testing.assert_array_equal(out, x.reshape(4, 16)[:, ::-1].ravel())

def test_register_loop_with_a_variable_runs(clctx: Any) -> None:
  from plugin_qcom.iface_cl import caps_of
  x = np.random.default_rng(0).standard_normal(512).astype(np.float32)
  out = _run(clctx, caps_of(clctx), loop_kernel(dtypes.float32, Ops.SQRT), [np.zeros(64, np.float32), np.abs(x)], (64, 1, 1), (1, 1, 1), vals=(3,))[0]
  np.testing.assert_allclose(out, (np.sqrt(np.abs(x)) * 3).reshape(64, 8).sum(1), rtol=1e-5)

def test_half_rounds_like_numpy_on_the_driver(clctx: Any) -> None:
  from plugin_qcom.iface_cl import caps_of
  rng = np.random.default_rng(1)
  a, b = (rng.uniform(-200, 200, 8).astype(np.float16) for _ in range(2))
  out = _run(clctx, caps_of(clctx), half_kernel(), [np.zeros(8, np.float16), a, b], (8, 1, 1), (1, 1, 1), vals=(3,))[0]
  want = (a * b + np.float16(1)) + np.float16(3)   # numpy rounds every half op, as the kernel must
  np.testing.assert_array_equal(out, want)
