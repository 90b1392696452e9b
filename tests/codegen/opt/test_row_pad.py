"""Rows of no whole number of vectors (softmax's 1000 on AVX-512's 16 lanes): PADTO on a reduce axis (the padded iterations
load nothing and the reduction takes its identity there: 0 for a sum, -inf for a max), and the fused row kernels
(heuristic._row_pass) padding the output loop and every reduction over the row to whole masked vectors, with softmax's exp
still stashed once (core.codegen.stash under the output's gate). Results against numpy on AVX2-like and AVX-512-like renderers."""
from __future__ import annotations
import numpy as np
import pytest
from core import Tensor
from core.ir.ops import Ops, AxisType
from core.ir.dtype import dtypes
from core.schedule.kernelize import create_schedule
from core.device.registry import Device
from core.codegen.opt import Kernel, Opt, OptOps
from core.codegen.opt.heuristic import hand_coded
from core.codegen.program import program_uops
from core.codegen.stash import STASH_ARG
from opt_helpers import run_ast, kernel_of as _kernel_of, host_renderer

rng = np.random.default_rng(21)

def kernel_of(fn, *shapes): return _kernel_of(fn, *shapes, rng=rng)

@pytest.mark.parametrize("fn, ref", [
  (lambda x: (-(x * x)).max(-1), lambda x: (-(x * x)).max(-1)),  # all below 0: a padded lane's -(0*0) would win the max
  (lambda x: x.exp().sum(-1), lambda x: np.exp(x).sum(-1)),      # exp of a padded 0 is 1
  (lambda x: (x * x).sum(-1), lambda x: (x * x).sum(-1)),
], ids=["max", "sum_exp", "sum_sq"])
def test_padded_reduce_takes_the_identity(fn, ref):
  x = rng.standard_normal((24, 37)).astype(np.float32)
  (item,) = create_schedule([fn(Tensor(x).realize()).uop])[0]
  want = ref(x.astype(np.float64))
  k = Kernel(item.ast, Device[Device.DEFAULT].renderer)
  axis = k.types().index(AxisType.REDUCE)
  k = k.apply(Opt(OptOps.PADTO, axis, 8))
  assert 40 in k.sizes()
  k = k.apply(Opt(OptOps.UNROLL, axis, 8))
  got, _ = run_ast(item, k.ast)
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-5, atol=1e-5)

def test_padded_matmul_reduce():
  item, want = kernel_of(lambda a, b: a @ b, (8, 37), (37, 16))
  k = Kernel(item.ast, Device[Device.DEFAULT].renderer)
  axis = k.types().index(AxisType.REDUCE)
  k = k.apply(Opt(OptOps.PADTO, axis, 16)).apply(Opt(OptOps.UNROLL, axis, 16))
  got, _ = run_ast(item, k.ast)
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-4)

def _softmax(x: np.ndarray) -> np.ndarray:
  e = np.exp(x.astype(np.float64) - x.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)

def _layernorm(x: np.ndarray) -> np.ndarray:
  y = x.astype(np.float64) - x.mean(-1, keepdims=True)
  return y / np.sqrt((y * y).mean(-1, keepdims=True) + 1e-5)

def _row_kernel(fn, x: np.ndarray, simd_bytes: int) -> tuple[np.ndarray, Kernel, list]:
  (item,) = create_schedule([fn(Tensor(x).realize()).uop])[0]
  rnd = host_renderer(simd_bytes)
  if not rnd.masked_vectors: pytest.skip("a renderer with masked vector loads and stores")
  k = hand_coded(Kernel(item.ast, rnd))
  got, spec = run_ast(item, k.ast, rnd)
  return got.reshape(x.shape), k, list(program_uops(spec))

# (lanes on the renderer, row length, padded): 1000 is whole 8-lane vectors; 100 is neither (pads to 104 or 112)
@pytest.mark.parametrize("simd_bytes, cols, padded", [(64, 1000, True), (64, 100, True), (32, 1000, False), (32, 100, True)])
def test_softmax_rows_pad_to_whole_vectors(simd_bytes, cols, padded):
  x = rng.standard_normal((37, cols)).astype(np.float32) * 3
  x[3, ::7] = -np.inf   # masked entries (a causal mask's) in one row
  got, k, uops = _row_kernel(lambda t: t.softmax(-1), x, simd_bytes)
  np.testing.assert_allclose(got, _softmax(x), rtol=1e-5, atol=1e-7)
  assert (k.applied.count(Opt(OptOps.PADTO, 1, simd_bytes // 4)) == 1) == padded, k.applied
  lanes = simd_bytes // 4
  stores = [u for u in uops if u.op is Ops.STORE and u.src[0].op is Ops.INDEX and u.src[0].src[0].op is Ops.PARAM]
  assert stores and all(u.src[1].dtype.count == lanes for u in stores), [u.src[1].dtype for u in stores]   # whole vectors
  # the exp runs once per element, padded or not (stashed in a per-thread row or the output: core.codegen.stash)
  assert sum(u.arg == STASH_ARG for u in uops if u.op is Ops.STORE) == 1

@pytest.mark.parametrize("simd_bytes", [32, 64])
def test_layernorm_padded_rows(simd_bytes):
  # (x - mean)**2 of a padded lane is mean**2: the variance's sum must take 0 there
  x = (rng.standard_normal((19, 1000)) * 2 + 3).astype(np.float32)
  w, b = rng.standard_normal(1000).astype(np.float32), rng.standard_normal(1000).astype(np.float32)
  got, k, _ = _row_kernel(lambda t: t.layernorm(-1) * Tensor(w).realize() + Tensor(b).realize(), x, simd_bytes)
  np.testing.assert_allclose(got, _layernorm(x) * w + b, rtol=1e-4, atol=1e-4)
  assert any(o.op is OptOps.PADTO for o in k.applied) == (simd_bytes == 64), k.applied

def test_padded_row_gate_shares_the_masked_loads_lanes():
  # `lane in row` of a padded reduction's identity, lane by lane as a masked load's gate: constants, and one compare of the
  # outer loop in the tail vector's last lanes, where a compare of the lanes' indices per vector would cost the max pass ~4 ops
  x = rng.standard_normal((5, 1000)).astype(np.float32)
  got, _, uops = _row_kernel(lambda t: t.softmax(-1), x, 64)
  np.testing.assert_allclose(got, _softmax(x), rtol=1e-5, atol=1e-7)
  assert not [u for u in uops if u.op is Ops.CMPLT and u.dtype.count > 1 and not dtypes.is_float(u.src[0].dtype)]   # (the exp's are)
