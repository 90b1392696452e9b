"""A product with few rows whose inputs both run along the reduce axis (a batch-8 Linear, x @ W.T with W stored [out, in]) takes
vector partial sums along the reduce axis, each load reused across a small rows x columns register tile (heuristic._reuse_outputs,
at most half the vector registers of accumulators), the columns on the threads: its rows are too few for a packed panel to be
reused by MM_PACK_REUSE row blocks (_packed_product), and the register tile without the panel gathered each column vector a
reduce row apart (ResNet-18's fc, 8x512 @ 1000x512.T: 256 two-lane accumulators). So do products of up to FEW_ROW_PASSES
passes of that tile's rows over W (_plain_product), and no more passes than vector steps along the reduce axis; more rows pack. The tile is read from
the optimizer's opts on AVX2-like (8 lanes, 16 registers) and AVX-512-like (16 lanes, 32) renderers; results against numpy."""
from __future__ import annotations
import numpy as np
import pytest
from core.codegen.opt import Kernel, OptOps
from core.codegen.opt.heuristic import hand_coded
from core.codegen.program import program_uops
from core.ir.ops import Ops
from opt_helpers import run_ast, host_renderer, product_item

rng = np.random.default_rng(39)

def _linear(rows: int, k: int, n: int):
  x, w = rng.standard_normal((rows, k)).astype(np.float32), rng.standard_normal((n, k)).astype(np.float32)
  return product_item(lambda a, b: a @ b.T, x, w), x.astype(np.float64) @ w.T.astype(np.float64)

def _tiled(rows: int, k: int, n: int, simd_bytes: int):
  """(the product's optimized kernel, a checker of its results against numpy, the renderer)."""
  item, want = _linear(rows, k, n)
  rnd = host_renderer(simd_bytes)
  kern = hand_coded(Kernel(item.ast, rnd))
  def check() -> None:
    got, _ = run_ast(item, kern.ast, rnd)
    np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
  return kern, check, rnd

@pytest.mark.parametrize("simd_bytes", [32, 64])
@pytest.mark.parametrize("rows, k, n", [(8, 512, 1000), (3, 500, 1000), (4, 768, 3072), (2, 96, 40)])
def test_few_rows_sum_along_the_reduce_with_loads_reused(simd_bytes, rows, k, n):
  kern, check, rnd = _tiled(rows, k, n, simd_bytes)
  ops = [o.op for o in kern.applied]
  # no padded, packed column tile: the reduce axis (the last) unrolled first, then rows x columns of accumulators (only the
  # rows padded: 3 rows beside 4 columns are 12 accumulators, more than AVX2's 8, so 2-row tiles over 4 rows there)
  assert OptOps.PACK not in ops and all(o.axis == 0 for o in kern.applied if o.op is OptOps.PADTO), kern.applied
  assert ops[0] is OptOps.UNROLL and kern.applied[0].axis == 2, kern.applied
  ups = [o for o in kern.applied if o.op is OptOps.UPCAST]
  acc = int(np.prod([o.amt for o in ups]))
  assert 1 in {o.axis for o in ups} and 4 <= acc <= rnd.simd_regs // 2, kern.applied
  check()

@pytest.mark.parametrize("simd_bytes", [32, 64])
def test_one_row_stays_a_matrix_vector_product(simd_bytes):
  kern, check, _ = _tiled(1, 768, 3072, simd_bytes)
  assert kern.applied[0].op is OptOps.UNROLL and OptOps.PACK not in [o.op for o in kern.applied], kern.applied
  check()

# the bound: 16 passes over W by the reduce path's tile of rows (half the vector registers over 4 columns: 2 rows with 16
# registers, 4 with 32), so 32 rows on AVX2-like renderers and 64 on AVX-512-like ones; one row block more packs
# (rows no tile of 2-4 divides are padded to one up to FEW_ROW_PAD_ROWS: 31 on both; 61 on 64 bytes pack)
@pytest.mark.parametrize("simd_bytes, rows, packs", [(32, 16, False), (32, 32, False), (32, 48, True), (32, 31, False),
                                                     (64, 16, False), (64, 64, False), (64, 80, True), (64, 31, False),
                                                     (64, 61, True)])
def test_rows_up_to_the_bound_sum_along_the_reduce(simd_bytes, rows, packs):
  kern, check, rnd = _tiled(rows, 256, 200, simd_bytes)
  ops = [o.op for o in kern.applied]
  assert (OptOps.PACK in ops) is packs, kern.applied
  if not packs:
    # one vector a step along the reduce, then a rows x columns tile of at most half the registers
    assert ops[0] is OptOps.UNROLL and kern.applied[0].axis == 2 and kern.applied[0].amt == simd_bytes // 4, kern.applied
    acc = int(np.prod([o.amt for o in kern.applied if o.op is OptOps.UPCAST]))
    assert acc == rnd.simd_regs // 2, kern.applied
  check()

@pytest.mark.parametrize("simd_bytes, rows, tile", [(32, 31, 2), (32, 17, 2), (32, 3, 2), (64, 31, 4), (64, 17, 4), (64, 7, 4)])
def test_rows_no_tile_divides_are_padded_to_one(simd_bytes, rows, tile):
  """31 or 17 rows take the 2- or 4-row tile over rows padded to it (32, 18 or 20), not a 1-row tile; the padded rows'
  outputs are never stored (every store to the output gated); values against numpy."""
  item, want = _linear(rows, 256, 200)
  rnd = host_renderer(simd_bytes)
  kern = hand_coded(Kernel(item.ast, rnd))
  pads = [o for o in kern.applied if o.op is OptOps.PADTO]
  assert len(pads) == 1 and pads[0].axis == 0 and pads[0].amt == tile and OptOps.PACK not in [o.op for o in kern.applied], kern.applied
  assert any(o.op is OptOps.UPCAST and o.axis == 0 and o.amt == tile for o in kern.applied), kern.applied
  got, spec = run_ast(item, kern.ast, rnd)
  stores = [u for u in program_uops(spec) if u.op is Ops.STORE and u.src[0].op is Ops.INDEX and u.src[0].src[0].op is Ops.PARAM]
  assert stores and all(len(s.src[0].src) > 2 for s in stores)
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())

# and no more passes than the reduce path's vector steps along the reduce axis (K / lanes): a short reduction's horizontal sums
# cost more than a packed panel (attention's q @ k.T per head, K = 64: 4 steps on 16 lanes, 8 on 8)
@pytest.mark.parametrize("simd_bytes, rows, k, packs", [(64, 16, 64, False), (64, 20, 64, True), (64, 32, 64, True),
                                                        (64, 32, 128, False), (64, 48, 128, True), (64, 64, 256, False),
                                                        (32, 16, 64, False), (32, 24, 64, True), (32, 32, 128, False)])
def test_short_reductions_take_fewer_passes(simd_bytes, rows, k, packs):
  kern, check, _ = _tiled(rows, k, 256, simd_bytes)
  assert (OptOps.PACK in [o.op for o in kern.applied]) is packs, kern.applied
  check()

@pytest.mark.parametrize("simd_bytes", [32, 64])
def test_attention_block_scores_pack(simd_bytes):
  """A causal attention's 64-row query block against its keys, 12 heads, head size 64 (sdpa's split rows): packed on both."""
  q, kk = rng.standard_normal((12, 64, 64)).astype(np.float32), rng.standard_normal((12, 256, 64)).astype(np.float32)
  item = product_item(lambda a, b: a @ b.transpose(-1, -2), q, kk)
  want = q.astype(np.float64) @ kk.astype(np.float64).transpose(0, 2, 1)
  rnd = host_renderer(simd_bytes)
  kern = hand_coded(Kernel(item.ast, rnd))
  assert OptOps.PACK in [o.op for o in kern.applied], kern.applied
  got, _ = run_ast(item, kern.ast, rnd)
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
