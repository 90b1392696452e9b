"""An elementwise kernel's AVX-512 code on a core with a 2 MiB L2 (heuristic.big_l2: the Intel server core) steps one vector a
loop iteration (heuristic._one_vector_steps) where it has few arithmetic ops (EW_ONE_VECTOR_ALUS); a 1 MiB L2 (the Zen 5's, host_like_renderer), AVX2 code and the C renderer (no
`big_l2_tiles`) keep two. Sources rendered for any host; results against numpy where this host runs AVX-512."""
from __future__ import annotations
import numpy as np
import pytest
from core import Tensor
from core.codegen.opt import Kernel, OptOps
from core.codegen.opt.heuristic import BIG_L2_BYTES, EW_ONE_VECTOR_ALUS, hand_coded
from core.schedule.kernelize import create_schedule
from cpu_kernels import host_like_renderer, run_item

def _renderer(ren: str, simd: int, l2: int, threads: int = 0):
  rnd = host_like_renderer(ren, simd, threads=threads)
  rnd.l2_bytes = l2
  return rnd

def _mul_add(n: int, rng: np.random.Generator):
  a, b = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
  (item,), _, _ = create_schedule([(Tensor(a).realize() * Tensor(b).realize() + 1).uop])
  return item, a * b + np.float32(1)

def _step(k: Kernel) -> int:
  """Elements of the contiguous loop's step: its UPCAST."""
  return next(o.amt for o in k.applied if o.op is OptOps.UPCAST)

@pytest.mark.parametrize("ren, simd, l2, threads, step", [
  ("LLVM", 64, BIG_L2_BYTES, 0, 16), ("LLVM", 64, BIG_L2_BYTES, 2, 16), ("LLVM", 64, 1 << 20, 2, 32),
  ("LLVM", 32, BIG_L2_BYTES, 2, 16), ("C", 64, BIG_L2_BYTES, 2, 32)],
  ids=["avx512 2 MiB", "avx512 2 MiB 2 threads", "avx512 1 MiB", "avx2 2 MiB", "C 2 MiB"])
def test_big_l2_avx512_steps_one_vector(ren, simd, l2, threads, step):
  k = hand_coded(Kernel(_mul_add(1 << 20, np.random.default_rng(0))[0].ast, _renderer(ren, simd, l2, threads)))
  assert _step(k) == step, k.applied

def test_more_arithmetic_keeps_two_vectors():
  # a chain of x * b + a past EW_ONE_VECTOR_ALUS ops (below ALU_HEAVY: gpt2_block's GELU, 30 ops, ran slower with one vector)
  rng = np.random.default_rng(1)
  a, b = Tensor(rng.standard_normal(1 << 20, dtype=np.float32)).realize(), Tensor(rng.standard_normal(1 << 20, dtype=np.float32)).realize()
  x = a
  for _ in range(EW_ONE_VECTOR_ALUS // 2 + 1): x = x * b + a
  (item,), _, _ = create_schedule([x.uop])
  assert _step(hand_coded(Kernel(item.ast, _renderer("LLVM", 64, BIG_L2_BYTES, 2)))) == 32

@pytest.mark.skipif("avx512f" not in __import__("plugin_cpu.compiler", fromlist=["host_flags"]).host_flags(), reason="runs AVX-512 code")
@pytest.mark.parametrize("n", [1 << 20, 1000 * 16 + 48])
def test_one_vector_steps_give_numpys_results(n):
  # a length that is a multiple of one vector but not of two (16048 = 1003 x 16)
  item, want = _mul_add(n, np.random.default_rng(n))
  rnd = _renderer("LLVM", 64, BIG_L2_BYTES, threads=2)
  k = hand_coded(Kernel(item.ast, rnd))
  assert _step(k) == 16, k.applied
  bufs, _ = run_item(item, rnd, ast=k.ast)
  np.testing.assert_array_equal(bufs[0].numpy(), want)
