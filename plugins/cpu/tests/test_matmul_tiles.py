"""Matmul register tiles come from the host's vector registers (renderer.simd_regs, simd_width): on a simulated AVX2 host (8-wide
ymm, 16 registers; code built for Haswell) the tile fits 16 registers and gives numpy's results, and the default device's tile
fits its renderer's registers (the host's, unless DEV names another CPU, e.g. DEV=CPU:LLVM:znver3)."""
from __future__ import annotations
import platform
import numpy as np
import pytest
from core import Tensor
from core.device.registry import Device
from core.codegen.opt import Kernel, OptOps
from core.codegen.opt.heuristic import hand_coded, MM_MIN_ACC
from core.schedule.kernelize import create_schedule
from plugin_cpu.renderer import CPULLVMRenderer
from cpu_kernels import run_item

x86 = platform.machine().lower() in ("x86_64", "amd64")

def _tile(k: Kernel, lanes: int) -> tuple[int, int]:
  """(vectors along the output row, rows) of the register tile the optimizer chose: the UPCASTs after the first (the lanes),
  of its axis (the columns) or of the other (the rows; upcast before the second column vector where that saves registers)."""
  ups = [o for o in k.applied if o.op is OptOps.UPCAST]
  assert ups and ups[0].amt == lanes, k.applied
  cols = [o.amt for o in ups[1:] if o.axis == ups[0].axis]
  rows = [o.amt for o in ups[1:] if o.axis != ups[0].axis]
  assert len(cols) <= 1 and len(rows) == 1, k.applied
  return (cols or [1])[0], rows[0]

def _matmul_item(n: int, kk: int, m: int, rng: np.random.Generator):
  a, b = rng.standard_normal((n, kk), dtype=np.float32), rng.standard_normal((kk, m), dtype=np.float32)
  items, _, _ = create_schedule([(Tensor(a).realize() @ Tensor(b).realize()).uop])
  assert len(items) == 1
  return items[0], a.astype(np.float64) @ b

def _run(item, k: Kernel, renderer, compiler) -> tuple[np.ndarray, str]:
  bufs, src = run_item(item, renderer, compiler, k.ast)
  return bufs[0].numpy(), src

@pytest.mark.skipif(not x86, reason="builds code for an x86-64 AVX2 CPU (Haswell)")
@pytest.mark.parametrize("n, kk, m", [(128, 64, 128), (100, 96, 72), (64, 256, 48)])
def test_avx2_tile_fits_and_matches_numpy(n, kk, m):
  from plugin_cpu.compiler import LLVMCompiler
  item, want = _matmul_item(n, kk, m, np.random.default_rng(n + kk + m))
  rnd = CPULLVMRenderer(arch="haswell")   # as on an AVX2 host: 32-byte vectors, 16 of them
  assert (rnd.simd_width, rnd.simd_regs) == (32, 16)
  k = hand_coded(Kernel(item.ast, rnd))
  cols, rows = _tile(k, 8)
  # the accumulators, one vector of each column and the broadcast value fit the 16 ymm registers, with enough accumulators
  # to hide the FMA latency
  assert cols * rows + cols + 1 <= 16 and cols * rows >= MM_MIN_ACC, k.applied
  got, src = _run(item, k, rnd, LLVMCompiler(cpu="haswell"))
  assert "<8 x float>" in src and "<16 x float>" not in src
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())

def test_device_tile_fits_its_registers():
  item, want = _matmul_item(256, 128, 256, np.random.default_rng(0))
  rnd = Device["CPU"].renderer
  assert rnd.simd_regs == (32 if rnd.simd_width == 64 or not x86 else 16)
  k = hand_coded(Kernel(item.ast, rnd))
  cols, rows = _tile(k, rnd.simd_width // 4)
  assert cols * rows + cols + 1 <= rnd.simd_regs and cols * rows >= MM_MIN_ACC, k.applied
  got, _ = _run(item, k, rnd, Device["CPU"].compiler)
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
