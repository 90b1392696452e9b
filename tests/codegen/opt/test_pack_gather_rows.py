"""A packed copy whose vectors gather (q @ k.T's k, x @ W.T's W: the panel's columns are rows of the input, its lanes a row
apart) reads a register's width of neighbours along the input's contiguous axis a step (pack._row_loop): the expander then
loads those rows whole and transposes them in registers instead of a scalar load and an insert a lane. A reduce axis the
width does not divide keeps the scalar copy, and so does a tile that unrolls the reduce (the Zen-5-like renderer's 4 x 4 by 2:
its copy reads pairs already). Checked against numpy on AVX2-like and big-L2 AVX-512-like renderers."""
from __future__ import annotations
import numpy as np
import pytest
from core.ir.ops import Ops, AxisType, UOp
from core.codegen.opt import Kernel, OptOps
from core.codegen.opt.heuristic import hand_coded
from core.codegen.opt.pack import read_index, linear_strides
from opt_helpers import run_ast, host_renderer, product_item

rng = np.random.default_rng(47)

def _renderer(simd_bytes: int):
  rnd = host_renderer(simd_bytes)
  if simd_bytes == 64: rnd.l2_bytes = 2 << 20   # this Intel host's: the big-L2 tiles where the renderer has them
  return rnd

def _rows_expected(kern: Kernel, lanes: int, d: int) -> int:
  return lanes if d % lanes == 0 and OptOps.UNROLL not in [o.op for o in kern.applied] else 1

def _copy_rows(ast: UOp) -> int:
  """The size of the packed copy's register axis along which its source is contiguous (1: none)."""
  stores = [u for u in ast.toposort() if u.op is Ops.STORE and u.src[0].op is Ops.INDEX and u.src[0].src[0].op is Ops.DEFINE_REG]
  assert len(stores) == 1, stores
  ld = stores[0].src[1]
  rngs = [r for r in ld.toposort() if r.op is Ops.RANGE]
  strides = linear_strides(read_index(ld.src[0]), rngs)
  assert strides is not None
  return int(np.prod([r.src[0].arg for r in rngs if r.arg[1] is AxisType.UPCAST and abs(strides[r]) == 1]))

@pytest.mark.parametrize("simd_bytes", [32, 64])
@pytest.mark.parametrize("shape", [(3, 64, 64, 192), (2, 64, 36, 128), (1, 96, 64, 256)])
def test_gathering_copy_reads_rows(simd_bytes, shape):
  heads, m, d, n = shape
  q, k = rng.standard_normal((heads, m, d)).astype(np.float32), rng.standard_normal((heads, n, d)).astype(np.float32)
  item = product_item(lambda a, b: a @ b.transpose(-1, -2), q, k)
  rnd = _renderer(simd_bytes)
  kern = hand_coded(Kernel(item.ast, rnd))
  assert OptOps.PACK in [o.op for o in kern.applied], kern.applied
  lanes = simd_bytes // 4
  # a register's width of k's contiguous axis a copy step where it divides the head width, else one element (36 % 8, 36 % 16)
  assert _copy_rows(kern.ast) == _rows_expected(kern, lanes, d)
  got, _ = run_ast(item, kern.ast, rnd)
  want = np.einsum("hmd,hnd->hmn", q.astype(np.float64), k.astype(np.float64))
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())

@pytest.mark.parametrize("simd_bytes", [32, 64])
def test_linear_weight_copy_reads_rows(simd_bytes):
  x, w = rng.standard_normal((128, 512)).astype(np.float32), rng.standard_normal((512, 512)).astype(np.float32)
  item = product_item(lambda a, b: a @ b.T, x, w)
  rnd = _renderer(simd_bytes)
  kern = hand_coded(Kernel(item.ast, rnd))
  assert OptOps.PACK in [o.op for o in kern.applied], kern.applied
  assert _copy_rows(kern.ast) == _rows_expected(kern, simd_bytes // 4, 512)
  got, _ = run_ast(item, kern.ast, rnd)
  want = x.astype(np.float64) @ w.T.astype(np.float64)
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
