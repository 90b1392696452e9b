"""A reduction along memory on a renderer without a thread pool (one core, CPU_THREADS=1) reads RED_STREAMS far-apart rows at
once, as each thread block does on a pool: more memory streams in flight than one row after another. Small ones keep one row."""
from __future__ import annotations
import numpy as np
from core.codegen.opt import Kernel, OptOps
from core.codegen.opt.heuristic import RED_STREAMS, hand_coded
from test_reduce_speed_opts import AVX2, _run, _single_kernel

class OneCore(AVX2):
  """AVX2 lanes, no pool: renderer.threads 0, as the CPU renderers report for a single thread."""
  threads = 0

def test_a_big_sum_on_one_thread_reads_far_apart_rows_at_once():
  item, want = _single_kernel(lambda a: a.sum(axis=1), (1024, 512))
  k = hand_coded(Kernel(item.ast, OneCore()))
  ops = [o.op for o in k.applied]
  assert OptOps.THREAD not in ops and ops[-2:] == [OptOps.TILE, OptOps.UPCAST], k.applied
  assert k.applied[-1].amt == RED_STREAMS and k.applied[-2].amt * RED_STREAMS == 1024, k.applied   # a quarter of the rows apart
  got = _run(item, k.applied)
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-3)

def test_a_small_sum_on_one_thread_reads_one_row_at_a_time():
  item, want = _single_kernel(lambda a: a.sum(axis=1), (64, 256))   # 16K elements: from the caches
  k = hand_coded(Kernel(item.ast, OneCore()))
  assert OptOps.TILE not in [o.op for o in k.applied], k.applied
  got = _run(item, k.applied)
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-3)
