"""Thread blocks divide evenly over the threads, and a batched product's panel grouping tiles its column panels, not its
batch. sdpa's two products (12 heads x 256 x 64 x 256) used to take 3 batch blocks on 2 threads: the grouping tiled the batch
by 4 (each group's panels came from 4 heads, so no row tile was reused across them) and the thread split took the 3 outer
batch blocks, leaving a quarter of the thread time idle (one Zen 3, 2 threads, A/B in one process: 1.02 -> 0.74 ms per
product). Choices on an AVX2 and an AVX-512 renderer; results against numpy."""
from __future__ import annotations
import numpy as np
import pytest
from core.codegen.opt import Kernel, OptOps
from core.codegen.opt.heuristic import hand_coded, _idle_share, _thread_loop
from core.ir.ops import AxisType, Ops
from opt_helpers import kernel_of, product_item, run_ast, host_renderer

rng = np.random.default_rng(23)

def _bmm(a, b): return a @ b

@pytest.mark.parametrize("simd_bytes", [32, 64])
@pytest.mark.parametrize("heads,n,k,m", [(12, 256, 64, 256), (12, 256, 256, 64), (3, 256, 64, 256), (5, 128, 64, 128)])
def test_batched_product_threads_split_evenly(simd_bytes, heads, n, k, m):
  item, ref = kernel_of(_bmm, (heads, n, k), (heads, k, m), rng=rng)
  rnd = host_renderer(simd_bytes)
  kern = hand_coded(Kernel(item.ast, rnd))
  threads = [o for o in kern.applied if o.op is OptOps.THREAD]
  assert len(threads) == 1 and threads[0].amt % rnd.threads == 0, kern.applied
  # a panel group (TILE) splits the column panels: the batch axis (axis 0, the first loop) stays whole
  assert not any(o.op is OptOps.TILE and o.axis == 0 for o in kern.applied), kern.applied
  got, _ = run_ast(item, kern.ast, rnd)
  np.testing.assert_allclose(got.reshape(ref.shape), ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())

@pytest.mark.parametrize("blocks,threads,idle", [(3, 2, 0.25), (4, 2, 0.0), (43, 2, 1 / 44), (6, 4, 0.25), (8, 4, 0.0)])
def test_idle_share(blocks, threads, idle):
  assert _idle_share(blocks, threads) == pytest.approx(idle)

@pytest.mark.parametrize("simd_bytes", [32, 64])
def test_thread_loop_prefers_outermost_even_split(simd_bytes):
  # 3 images x 64 rows: the 3 images leave a quarter idle on 2 threads, the rows split evenly; 4 images: the images
  item, ref = kernel_of(lambda x: x * 2 + 1, (3, 64, 256), rng=rng)
  rnd = host_renderer(simd_bytes)
  kern = Kernel(item.ast, rnd)
  loops = kern.of_type(AxisType.LOOP)
  assert _thread_loop(kern, 2) is loops[1]
  item4, _ = kernel_of(lambda x: x * 2 + 1, (4, 64, 256), rng=rng)
  kern4 = Kernel(item4.ast, rnd)
  assert _thread_loop(kern4, 2) is kern4.of_type(AxisType.LOOP)[0]
  k = hand_coded(kern)
  got, _ = run_ast(item, k.ast, rnd)
  np.testing.assert_allclose(got.reshape(ref.shape), ref, rtol=1e-6)

def _attn_weight_grad(dy, h):
  """dW = dY.T @ attention output, the output read in head layout (12 x 256 x 64): column i is h[i // 64, :, i % 64]. (Scaled
  first: a realized buffer flattened from heads into a matmul is copied contiguous by the scheduler, realize_points)"""
  hv = (h * 2).permute(1, 0, 2).reshape(256, 768) if not isinstance(h, np.ndarray) else (h * 2).transpose(1, 0, 2).reshape(256, 768)
  return dy.T @ hv

@pytest.mark.parametrize("simd_bytes", [32, 64])
def test_head_layout_columns_pack_on_whole_heads(simd_bytes):
  # the column panels read h at fixed strides only within a head: thread blocks of 96 columns (8 blocks of 768 on AVX2)
  # straddle heads and the panel could not be packed (the attention projection's weight gradient in the GPT-2 block ran
  # unpacked: one Zen 3 thread 13.9 -> 5.2 ms); the block count is the one nearest 4 per thread whose blocks start at a head
  item, ref = kernel_of(_attn_weight_grad, (256, 768), (12, 256, 64), rng=rng)
  assert any(u.op is Ops.IDIV for u in item.ast.toposort())   # the kernel reads h in head layout
  rnd = host_renderer(simd_bytes)
  kern = hand_coded(Kernel(item.ast, rnd))
  ops = [o.op for o in kern.applied]
  assert ops.count(OptOps.PACK) == 2, kern.applied
  assert next(o.amt for o in kern.applied if o.op is OptOps.THREAD) % rnd.threads == 0, kern.applied
  got, _ = run_ast(item, kern.ast, rnd)
  np.testing.assert_allclose(got.reshape(ref.shape), ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())

@pytest.mark.parametrize("n,threads,first", [(48, 2, 8), (12, 2, 6), (3, 2, 3), (64, 4, 16)])
def test_block_counts(n, threads, first):
  from core.codegen.opt.heuristic import _block_counts
  got = _block_counts(n, threads)
  assert got[0] == first and all(n % b == 0 for b in got[1:]) and all(b % threads == 0 for b in got[1:]) and len(set(got)) == len(got)

def _softmax(x): return x.softmax(-1)
def _layernorm(x, w, b): return x.layernorm() * w + b

@pytest.mark.parametrize("simd_bytes", [32, 64])
@pytest.mark.parametrize("fn", [_softmax, _layernorm])
@pytest.mark.parametrize("rows,blocks", [(4095, 7), (999, 3)])
def test_row_pass_threads_split_the_rows(simd_bytes, fn, rows, blocks):
  # rows that split into no even number of blocks (4095: 7 blocks, 1/8 idle on 2 threads) used to have the output columns split
  # instead, each block redoing every row's reductions (softmax 4095x1000: 63 blocks, 63x the work); the split loop is one
  # every reduction varies with, the rows
  xs = [rng.standard_normal(s).astype(np.float32) for s in ((rows, 1000), (1000,), (1000,))][:fn.__code__.co_argcount]
  item = product_item(fn, *xs)
  rnd = host_renderer(simd_bytes)
  kern = hand_coded(Kernel(item.ast, rnd))
  threads = [o for o in kern.applied if o.op is OptOps.THREAD]
  assert len(threads) == 1 and threads[0].amt == blocks, kern.applied
  split = kern.of_type(AxisType.GLOBAL)
  reduces = [u for u in kern.ast.toposort() if u.op is Ops.REDUCE]
  assert len(split) == 1 and reduces and all(split[0] in u.toposort() for u in reduces), kern.applied
  x = xs[0].astype(np.float64)
  if fn is _softmax:
    e = np.exp(x - x.max(-1, keepdims=True))
    ref = e / e.sum(-1, keepdims=True)
  else:
    d = x - x.mean(-1, keepdims=True)
    ref = d / np.sqrt((d * d).mean(-1, keepdims=True) + 1e-5) * xs[1] + xs[2]
  got, _ = run_ast(item, kern.ast, rnd)
  np.testing.assert_allclose(got.reshape(ref.shape), ref, rtol=1e-4, atol=1e-5 * np.abs(ref).max())
