"""A fused row kernel's sum of products (layernorm's variance) keeps ROW_FMA_VECTORS vectors of partial results, each its own
accumulator updated by one FMA a loop step (heuristic._row_pass). Copies of a step summed into one update are one chain of FMAs
through the accumulator (lowerer.fuse_mulacc), which waits an FMA latency per copy. Values from numpy on AVX2-like and
AVX-512-like renderers."""
from __future__ import annotations
import numpy as np
import pytest
from core import Tensor
from core.ir.ops import Ops
from core.schedule.kernelize import create_schedule
from core.codegen.program import get_program, program_uops
from core.codegen.opt import Kernel
from core.codegen.opt import heuristic
from core.codegen.opt.heuristic import hand_coded
from opt_helpers import run_ast, host_renderer

rng = np.random.default_rng(41)

def _layernorm(rows: int, cols: int) -> tuple[object, np.ndarray]:
  """(the fused layernorm kernel's schedule item, numpy's result in float64)."""
  x = rng.standard_normal((rows, cols)).astype(np.float32) * 3 + 1
  w, b = rng.standard_normal(cols).astype(np.float32), rng.standard_normal(cols).astype(np.float32)
  (item,) = [it for it in create_schedule([(Tensor(x).layernorm(-1) * Tensor(w) + Tensor(b)).uop])[0] if it.ast.op is Ops.SINK]
  y = x.astype(np.float64) - x.mean(-1, keepdims=True, dtype=np.float64)
  return item, y / np.sqrt((y * y).mean(-1, keepdims=True) + 1e-5) * w + b

def _fma_chains(item, rnd) -> list[tuple[int, int]]:
  """(lanes, FMAs from the accumulator's read to its store) of each accumulator update that takes an FMA."""
  out = []
  for u in program_uops(get_program(item.ast, rnd)):
    if u.op is Ops.STORE and u.src[0].op is Ops.INDEX and u.src[0].src[0].after_base.op is Ops.DEFINE_REG and u.src[1].op is Ops.MULACC:
      n, v = 0, u.src[1]
      while v.op is Ops.MULACC: n, v = n + 1, v.src[2]
      out.append((u.src[1].dtype.count, n))
  return out

@pytest.mark.parametrize("simd_bytes", [32, 64])
@pytest.mark.parametrize("cols", [1024, 768])
def test_variance_one_fma_a_step_per_accumulator(simd_bytes, cols):
  rnd = host_renderer(simd_bytes)
  item, _ = _layernorm(16, cols)
  lanes = simd_bytes // 4
  # 8 vectors side by side (768 and 1024 are multiples of 8 x 16 lanes), each updated by one FMA a step
  assert _fma_chains(item, rnd) == [(heuristic.ROW_FMA_VECTORS * lanes, 1)]

def test_without_the_rule_copies_chain(monkeypatch):
  # what the rule replaces: 2 vectors of partial results, each step's 2 copies one chain of 2 FMAs
  monkeypatch.setattr(heuristic, "ROW_FMA_VECTORS", 0)
  item, _ = _layernorm(16, 1024)
  assert _fma_chains(item, host_renderer(64)) == [(32, 2)]

@pytest.mark.parametrize("simd_bytes", [32, 64])
@pytest.mark.parametrize("rows, cols", [(33, 1024), (5, 768), (7, 1000), (3, 96), (4, 40)])   # 1000, 40: padded or part vectors
def test_layernorm_values(simd_bytes, rows, cols):
  rnd = host_renderer(simd_bytes)
  item, want = _layernorm(rows, cols)
  got, _ = run_ast(item, hand_coded(Kernel(item.ast, rnd)).ast, rnd)
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-4)
