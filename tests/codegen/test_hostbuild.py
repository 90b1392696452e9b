"""Core's host code: LLVM IR compiled and loaded in process (core.device.hostjit), and host builds of GPU kernels
(core.codegen.hostbuild) that MOCK devices run: grid and block coverage, variables, barriers as work-item loops."""
from __future__ import annotations
import ctypes
import numpy as np
import pytest
from core.codegen.hostbuild import HostBuildError, host_build
from core.device.hostjit import HostCompiler, host_library
from core.ir.dtype import AddrSpace, dtypes
from core.ir.ops import UOp, Ops, AxisType
from core.testing.kernels import c, grid_kernel, lds_kernel, linear, loop_kernel, special

def test_host_library_runs_ir_and_resolves_libm():
  src = ("define void @f(ptr %p) {\nentry:\n  %x = load double, ptr %p\n  %y = call double @llvm.sin.f64(double %x)\n"
         "  store double %y, ptr %p\n  ret void\n}\ndeclare double @llvm.sin.f64(double)\n")
  fn = host_library(src).function("f", None, ctypes.c_void_p)
  v = (ctypes.c_double * 1)(0.5)
  fn(ctypes.addressof(v))
  assert v[0] == np.sin(0.5)

def test_host_library_names_a_missing_function():
  with pytest.raises(RuntimeError, match="no function named 'nope'"): host_library("define void @g() {\nentry:\n  ret void\n}\n").address("nope")

def test_host_objects_are_cached_on_disk(tmp_path, monkeypatch):
  monkeypatch.setenv("CORE_CACHE_DIR", str(tmp_path))
  src = "define i32 @h() {\nentry:\n  ret i32 7\n}\n"
  a, b = HostCompiler(), HostCompiler()
  obj = a.compile_cached(src)
  assert (a.cache_misses, b.compile_cached(src), b.cache_hits) == (1, obj, 1)

def test_host_build_covers_the_grid_and_block():
  g0, g1, l0 = 5, 3, 4
  b = host_build("grid_k", grid_kernel(g0, g1, l0))
  assert (b.nbufs, b.nvars, b.local_size) == (1, 1, (l0, 1, 1))
  out = np.full(g0 * g1 * l0, -1, np.int32)
  b.run([out.ctypes.data, 7], (g0, g1, 1), (l0, 1, 1))
  y, x, lx = np.meshgrid(np.arange(g1), np.arange(g0), np.arange(l0), indexing="ij")
  np.testing.assert_array_equal(out, (x + 100 * y + 10000 * lx + 7).reshape(-1))

def test_host_build_runs_only_the_dispatched_grid():
  b = host_build("grid_k", grid_kernel(5, 3, 4))
  out = np.full(60, -1, np.int32)
  b.run([out.ctypes.data, 0], (2, 1, 1), (4, 1, 1))   # a smaller grid than the kernel's: only those workgroups write
  assert (out[:8] >= 0).all() and (out[8:] == -1).all()

def test_host_build_splits_a_large_grid_over_threads_without_gaps():
  # 997 workgroups (prime: the ranges given to the threads are uneven) each write their own slot
  b = host_build("grid_big", grid_kernel(997, 1, 1))
  out = np.full(997, -1, np.int32)
  b.run([out.ctypes.data, 3], (997, 1, 1), (1, 1, 1))
  np.testing.assert_array_equal(out, np.arange(997) + 3)

def test_host_build_runs_barriers_as_work_item_loops():
  # each workgroup reverses its slice through LDS: every work-item's store must land before any work-item's load
  b = host_build("lds_k", lds_kernel(local=64, groups=4))
  assert b.local_size == (64, 1, 1)
  inp, out = np.arange(256, dtype=np.float32), np.zeros(256, np.float32)
  b.run([out.ctypes.data, inp.ctypes.data], (4, 1, 1), (64, 1, 1))
  np.testing.assert_array_equal(out, inp.reshape(4, 64)[:, ::-1].reshape(-1))

@pytest.mark.parametrize("dt, np_dt", [(dtypes.float32, np.float32), (dtypes.float16, np.float16)])
def test_host_build_runs_loops_registers_and_variables(dt, np_dt):
  b = host_build(f"loop_{dt.name}", loop_kernel(dt, Ops.SIN))
  inp, out = np.linspace(-3, 3, 512).astype(np_dt), np.zeros(64, np_dt)
  b.run([out.ctypes.data, inp.ctypes.data, 3], (64, 1, 1), (1, 1, 1))
  tol = 1e-5 if dt is dtypes.float32 else 2e-2
  np.testing.assert_allclose(out, (np.sin(inp.astype(np.float64)) * 3).reshape(64, 8).sum(1), rtol=tol, atol=tol)

def test_host_build_rounds_bfloat16_to_nearest_even():
  # float -> bfloat16 goes through the module's own __truncsfbf2: ties go to the even mantissa, NaN stays NaN
  n = 4
  inp, out = UOp.param(1, dtypes.float32.ptr(n)), UOp.param(0, dtypes.bfloat16.ptr(n))
  g = special("gidx0", n)
  b = host_build("to_bf16", linear(out, inp, out.index(g).store(inp.index(g).load().cast(dtypes.bfloat16))))
  bits = [0x3F808000, 0x3F818000, 0x3F80C000, 0x7FC00001]   # tie -> even (down), tie -> even (up), above the tie, NaN
  src = np.array(bits, np.uint32).view(np.float32)
  dst = np.zeros(n, np.uint16)
  b.run([dst.ctypes.data, src.ctypes.data], (n, 1, 1), (1, 1, 1))
  assert [hex(v) for v in dst[:3]] == ["0x3f80", "0x3f82", "0x3f81"]
  assert np.isnan(np.array([int(dst[3]) << 16], np.uint32).view(np.float32)[0])

def test_host_build_refuses_a_barrier_inside_a_loop():
  out = UOp.param(0, dtypes.float32.ptr(64))
  lid = special("lidx0", 64)
  lds = UOp(Ops.DEFINE_LOCAL, dtypes.float32.ptr(64, AddrSpace.LOCAL), (), 0)
  r = UOp(Ops.RANGE, dtypes.int32, (c(4),), (0, AxisType.REDUCE))
  st = lds.index(lid).store(r.cast(dtypes.float32))
  bar = UOp(Ops.BARRIER, dtypes.void, (st,))
  body = out.index(lid).store(lds.after(bar).index(c(63) - lid).load()).end(r)
  with pytest.raises(HostBuildError, match="inside a loop"): host_build("loop_bar", linear(body))

def test_host_build_checks_the_argument_count():
  b = host_build("grid_k", grid_kernel(2, 1, 1))
  with pytest.raises(HostBuildError, match="1 arguments, expected 2"): b.run([0], (1, 1, 1), (1, 1, 1))

# *** the fault guard: accesses through a buffer argument stay inside the allocation it points into ***

def _shift_kernel(shift: int, gate: bool = False) -> list[UOp]:
  """out[g] = in[g + shift] + 1 over 64 work-groups; `gate`: the load only where g + shift < 64 (else 0)."""
  out, inp = UOp.param(0, dtypes.float32.ptr(64)), UOp.param(1, dtypes.float32.ptr(64))
  g = special("gidx0", 64)
  i = g + c(shift)
  idx = inp.index(i, i < c(64)) if gate else inp.index(i)
  return linear(out, inp, out.index(g).store(idx.load() + c(1.0, dtypes.float32)))

def _spans(*arrs: np.ndarray) -> list[tuple[int, int]]: return [(a.ctypes.data, a.ctypes.data + a.nbytes) for a in arrs]

def test_host_build_wild_read_is_a_fault_naming_kernel_and_address():
  from core.device.compiled import KernelFault
  a, o = np.arange(64, dtype=np.float32), np.zeros(64, np.float32)
  b = host_build("wild_read", _shift_kernel(1 << 28))
  with pytest.raises(KernelFault, match="kernel wild_read accessed address") as e:
    b.run([o.ctypes.data, a.ctypes.data], (64, 1, 1), (1, 1, 1), _spans(o, a))
  # every work-item's read is wild: whichever thread came first, the address is one of them
  assert e.value.kernel == "wild_read" and (e.value.address - a.ctypes.data) // 4 - (1 << 28) in range(64) and f"{e.value.address:#x}" in str(e.value)
  # in range: the same kernel shape with shift 0 still runs, and so does one whose out-of-range reads are gated off
  host_build("in_range", _shift_kernel(0)).run([o.ctypes.data, a.ctypes.data], (64, 1, 1), (1, 1, 1), _spans(o, a))
  np.testing.assert_array_equal(o, a + 1)
  host_build("gated", _shift_kernel(60, gate=True)).run([o.ctypes.data, a.ctypes.data], (64, 1, 1), (1, 1, 1), _spans(o, a))
  np.testing.assert_array_equal(o, np.where(np.arange(64) < 4, np.arange(60, 124), 0) + 1)

def test_host_build_wild_write_is_skipped_and_reported():
  from core.device.compiled import KernelFault
  out = UOp.param(0, dtypes.int32.ptr(8))
  g = special("gidx0", 8)
  k = linear(out, out.index(g * c(3)).store(g))   # work-items 3..7 write past the 8 ints
  mem = np.full(32, -1, np.int32)   # the 8 ints of the buffer, then 24 a wild write would overwrite
  with pytest.raises(KernelFault, match="kernel wild_write accessed address"):
    host_build("wild_write", k).run([mem.ctypes.data], (8, 1, 1), (1, 1, 1), [(mem.ctypes.data, mem.ctypes.data + 32)])
  np.testing.assert_array_equal(mem, [0, -1, -1, 1, -1, -1, 2, -1] + [-1] * 24)   # only the in-range stores happened

def test_host_build_without_spans_is_unchecked_and_lds_is_not_checked():
  a, o = np.arange(64, dtype=np.float32), np.zeros(64, np.float32)
  host_build("in_range", _shift_kernel(0)).run([o.ctypes.data, a.ctypes.data], (64, 1, 1), (1, 1, 1))
  np.testing.assert_array_equal(o, a + 1)
  inp, out = np.arange(256, dtype=np.float32), np.zeros(256, np.float32)
  host_build("lds_k", lds_kernel(64, 4)).run([out.ctypes.data, inp.ctypes.data], (4, 1, 1), (64, 1, 1), _spans(out, inp))
  np.testing.assert_array_equal(out, inp.reshape(4, 64)[:, ::-1].reshape(-1))

def test_host_build_checks_only_accesses_the_ir_cant_prove_in_range():
  from core.codegen.hostbuild import HostKernelRenderer
  # every index of an in-range kernel is proven from its bounds: no check is rendered (loops vectorize as before)
  assert "oob.acc" not in HostKernelRenderer().render("in_range", _shift_kernel(0))
  assert "oob.acc" in HostKernelRenderer().render("shifted", _shift_kernel(1))   # in[g + 1] reaches in[64]

def test_host_build_buffer_smaller_than_declared_runs_fully_checked():
  from core.device.compiled import KernelFault
  a, o = np.arange(64, dtype=np.float32), np.zeros(64, np.float32)
  b = host_build("in_range", _shift_kernel(0))
  # the input's allocation ends halfway: the proven accesses can't be trusted, so a build checking every access runs
  short = [(o.ctypes.data, o.ctypes.data + 256), (a.ctypes.data, a.ctypes.data + 128)]
  with pytest.raises(KernelFault, match="kernel in_range accessed address") as e:
    b.run([o.ctypes.data, a.ctypes.data], (64, 1, 1), (1, 1, 1), short)
  assert 128 <= e.value.address - a.ctypes.data < 256
  np.testing.assert_array_equal(o, np.where(np.arange(64) < 32, a + 1, 1))   # the skipped loads read 0
