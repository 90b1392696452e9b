"""The register tile of a product for the host's vector registers: on AVX2 (8 lanes, 16 ymm) a matmul takes 2 vectors x 6 rows
(12 accumulators hide the FMA latency), its rows upcast before its second column vector and its reduce not unrolled, so the
accumulators, two column vectors and one broadcast fit 16 registers (columns first or a reduce unrolled by 2, LLVM spills);
AVX-512 (16 lanes, 32 zmm) keeps 4 x 4, columns first, the reduce unrolled by 2, and a 3x3 conv keeps its tile on both
(the tiles the optimizer chose before).
Results against numpy on both renderers."""
from __future__ import annotations
import numpy as np
import pytest
from core.codegen.opt import Kernel, OptOps
from core.codegen.opt.heuristic import hand_coded
from opt_helpers import kernel_of, run_ast, host_renderer

rng = np.random.default_rng(23)

def _tile(k: Kernel) -> tuple[int, int, bool, bool]:
  """(column vectors, rows, rows upcast before the second column vector, reduce unrolled by a number) of k's register tile."""
  ups = [o for o in k.applied if o.op is OptOps.UPCAST]
  cols = [i for i, o in enumerate(ups[1:], 1) if o.axis == ups[0].axis]
  rows = [i for i, o in enumerate(ups[1:], 1) if o.axis != ups[0].axis]
  assert len(rows) == 1 and len(cols) <= 1, k.applied
  unrolled = any(o.op is OptOps.UNROLL and o.amt > 0 for o in k.applied)
  return (ups[cols[0]].amt if cols else 1), ups[rows[0]].amt, bool(cols) and rows[0] < cols[0], unrolled

@pytest.mark.parametrize("simd_bytes, want", [(32, (2, 6, True, False)), (64, (4, 4, False, True))])
@pytest.mark.parametrize("n, kk, m", [(96, 64, 128), (100, 80, 128)])
def test_matmul_tile_fits_the_registers(simd_bytes, want, n, kk, m):
  item, ref = kernel_of(lambda a, b: a @ b, (n, kk), (kk, m), rng=rng)
  rnd = host_renderer(simd_bytes)
  k = hand_coded(Kernel(item.ast, rnd))
  assert _tile(k) == want, k.applied
  cols, rows, _, unrolled = want
  # accumulators, the column vectors (twice over when the reduce is unrolled by 2) and a broadcast fit the registers
  assert cols * rows + cols * (1 + unrolled) + 1 + unrolled <= rnd.simd_regs
  got, _ = run_ast(item, k.ast, rnd)
  np.testing.assert_allclose(got.reshape(ref.shape), ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())

@pytest.mark.parametrize("simd_bytes, want", [(32, (2, 4, False, False)), (64, (4, 4, False, False))])
def test_conv3x3_tile_unchanged(simd_bytes, want):
  item, ref = kernel_of(lambda x, w: x.conv2d(w, padding=1) if not isinstance(x, np.ndarray) else _conv_np(x, w), (1, 16, 64, 64),
                        (16, 16, 3, 3), rng=rng)
  rnd = host_renderer(simd_bytes)
  k = hand_coded(Kernel(item.ast, rnd))
  assert _tile(k) == want, k.applied
  got, _ = run_ast(item, k.ast, rnd)
  np.testing.assert_allclose(got.reshape(ref.shape), ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())

def _conv_np(x: np.ndarray, w: np.ndarray) -> np.ndarray:
  xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
  h, wd = x.shape[2], x.shape[3]
  return sum(np.einsum("nchw,oc->nohw", xp[:, :, i:i + h, j:j + wd], w[:, :, i, j]) for i in range(3) for j in range(3))

def _depthwise_np(x: np.ndarray, w: np.ndarray, stride: int) -> np.ndarray:
  xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
  oh, ow = (x.shape[2] - 1) // stride + 1, (x.shape[3] - 1) // stride + 1
  return sum(xp[:, :, i:i + stride * oh:stride, j:j + stride * ow:stride] * w[None, :, 0, i, j, None, None] for i in range(3) for j in range(3))

@pytest.mark.parametrize("simd_bytes", [32, 64])
@pytest.mark.parametrize("stride", [1, 2])
def test_depthwise_conv_keeps_rows_outside_column_blocks(simd_bytes, stride):
  # the register tile's rows (oh) are reused only by the small weights: no SWAP putting the column blocks outermost, which
  # walked the image down strips of every row (one Zen 3 thread, 8x32x112x112: 4.6 -> 12 GFLOP/s; stride 2 1.6 -> 3.8)
  item, ref = kernel_of(lambda x, w: x.conv2d(w, padding=1, stride=stride, groups=16) if not isinstance(x, np.ndarray) else
                        _depthwise_np(x, w, stride), (2, 16, 64, 64), (16, 1, 3, 3), rng=rng)
  rnd = host_renderer(simd_bytes)
  k = hand_coded(Kernel(item.ast, rnd))
  assert any(o.op is OptOps.UPCAST for o in k.applied) and not any(o.op is OptOps.SWAP for o in k.applied), k.applied
  got, _ = run_ast(item, k.ast, rnd)
  np.testing.assert_allclose(got.reshape(ref.shape), ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())
