"""A packed panel's copy reads at most one output vector's rows of an input whose rows lie a page or more apart (pack.
_row_group_loops): x @ W.T packs column panels of W [n, k], and one copy step over all of a panel's columns read that many rows
of W; at k * 4 bytes = a page those lines share one set of a VIPT L1 (64 rows of a 64-column panel for 12 ways on the Zen 5).
The panel's layout, the kernel's opts and its results stay as they were; checked against numpy on AVX2-like and AVX-512-like
renderers."""
from __future__ import annotations
import numpy as np
import pytest
from core.ir.ops import Ops, AxisType, UOp
from core.codegen.opt import Kernel, OptOps
from core.codegen.opt.heuristic import hand_coded
from core.codegen.opt.pack import PAGE_BYTES, read_index, linear_strides
from opt_helpers import run_ast, host_renderer, product_item

rng = np.random.default_rng(40)
REGISTER = (AxisType.UPCAST, AxisType.UNROLL)

def _copy_load(ast: UOp) -> UOp:
  """The load of the (one) packed copy: the value stored into the panel."""
  stores = [u for u in ast.toposort() if u.op is Ops.STORE and u.src[0].op is Ops.INDEX and u.src[0].src[0].op is Ops.DEFINE_REG]
  assert len(stores) == 1, stores
  return stores[0].src[1]

def _rows_a_step(ast: UOp, row_elems: int) -> int:
  """Rows of the source (row_elems apart) one copy step reads: the sizes of its register axes of that stride or more."""
  ld = _copy_load(ast)
  rngs = [r for r in ld.toposort() if r.op is Ops.RANGE]
  strides = linear_strides(read_index(ld.src[0]), rngs)
  assert strides is not None
  return int(np.prod([r.src[0].arg for r in rngs if r.arg[1] in REGISTER and abs(strides[r]) >= row_elems]))

@pytest.mark.parametrize("simd_bytes", [32, 64])
@pytest.mark.parametrize("k", [PAGE_BYTES // 4, PAGE_BYTES // 4 + 16, 768, "near"])
def test_copy_reads_one_vectors_rows_a_step_where_they_lie_a_page_apart(simd_bytes, k):
  # "near": one vector's rows of W span half a page, so the next vector's rows lie within it: the whole panel a step
  page_apart = k != "near"
  k = PAGE_BYTES // simd_bytes // 2 if k == "near" else k
  rows, n = 128, 256
  x, w = rng.standard_normal((rows, k)).astype(np.float32), rng.standard_normal((n, k)).astype(np.float32)
  item = product_item(lambda a, b: a @ b.T, x, w)
  rnd = host_renderer(simd_bytes)
  kern = hand_coded(Kernel(item.ast, rnd))
  assert OptOps.PACK in [o.op for o in kern.applied], kern.applied
  lanes = simd_bytes // 4
  panel_cols = int(np.prod([o.amt for o in kern.applied if o.op is OptOps.UPCAST and o.axis == 1]))
  assert panel_cols > lanes   # a panel of several vectors: the case where a step over all its columns reads more rows
  # W's rows a page apart or more: one vector's rows a step (the other column vectors are copy loops); closer: the whole panel
  assert _rows_a_step(kern.ast, k) == (lanes if page_apart else panel_cols)
  got, _ = run_ast(item, kern.ast, rnd)
  want = x.astype(np.float64) @ w.T.astype(np.float64)
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
