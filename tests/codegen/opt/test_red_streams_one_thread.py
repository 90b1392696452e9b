"""A reduction along memory on a renderer without a thread pool (one core, CPU_THREADS=1) reads far-apart rows at once, as each
thread block does on a pool: more memory streams in flight than one row after another. AVX-512 targets read RED_STREAMS_ALONE
(two) rows, AVX2 ones and rows that share a load (a matrix-vector product's vector) RED_STREAMS (four); small ones keep one."""
from __future__ import annotations
import numpy as np
import pytest
from core import Tensor
from core.codegen.opt import Kernel, OptOps
from core.codegen.opt.heuristic import RED_STREAMS, hand_coded
from plugin_cpu.compiler import arch_flags
from plugin_cpu.renderer import CPULLVMRenderer
from test_reduce_speed_opts import AVX2, _run, _single_kernel

class OneCore(AVX2):
  """AVX2 lanes, no pool: renderer.threads 0, as the CPU renderers report for a single thread."""
  threads = 0

def _one_core(arch: str) -> CPULLVMRenderer:
  """The LLVM renderer for CPU model `arch` (its flags whether or not this CPU has them: the values run on the default device)."""
  ren = CPULLVMRenderer()
  ren.arch = arch
  ren.target(arch_flags(arch, runs_here=False))
  ren.threads = 0   # as CPU_THREADS=1 renders
  return ren

@pytest.mark.parametrize("arch, rows", [("x86-64-v4", 2), ("haswell", 4), ("znver3", 4)])   # RED_STREAMS_ALONE, RED_STREAMS
def test_a_big_sum_on_one_thread_reads_far_apart_rows_at_once(arch, rows):
  item, want = _single_kernel(lambda a: a.sum(axis=1), (1024, 512))
  k = hand_coded(Kernel(item.ast, _one_core(arch)))
  ops = [o.op for o in k.applied]
  assert OptOps.THREAD not in ops and ops[-2:] == [OptOps.TILE, OptOps.UPCAST], k.applied
  assert k.applied[-1].amt == rows and k.applied[-2].amt * rows == 1024, k.applied   # 1/rows of the rows apart
  got = _run(item, k.applied)
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-3)

def test_a_matvec_on_one_thread_reads_as_many_rows_as_a_pool_block():
  # the vector's loads serve every row read at once: four rows per vector load, as on a pool
  v = np.random.default_rng(1).standard_normal(512).astype(np.float32)
  item, want = _single_kernel(lambda a: a @ (Tensor(v) if isinstance(a, Tensor) else v), (1024, 512))
  k = hand_coded(Kernel(item.ast, _one_core("x86-64-v4")))
  assert [o.op for o in k.applied][-2:] == [OptOps.TILE, OptOps.UPCAST] and k.applied[-1].amt == RED_STREAMS, k.applied
  got = _run(item, k.applied)
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-3)

def test_a_small_sum_on_one_thread_reads_one_row_at_a_time():
  item, want = _single_kernel(lambda a: a.sum(axis=1), (64, 256))   # 16K elements: from the caches
  k = hand_coded(Kernel(item.ast, OneCore()))
  assert OptOps.TILE not in [o.op for o in k.applied], k.applied
  got = _run(item, k.applied)
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-3)
