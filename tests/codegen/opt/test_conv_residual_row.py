"""A conv with a fused residual add over output rows of one vector (16 wide on AVX-512's 16 lanes, 8 on AVX2's 8): the
heuristic takes the row tile, whose vectors run along the row, so the residual is read and the output written as whole vectors;
the channel tile (vectors along the output channels) read the NCHW residual lane by lane, a scalar load and insert per element.
Results against numpy on AVX2-like and AVX-512-like renderers, and the AVX-512 tile's loads of the residual."""
from __future__ import annotations
import numpy as np
import pytest
from core import Tensor
from core.ir.ops import Ops, UOp
from core.schedule.kernelize import create_schedule
from core.codegen.opt import Kernel
from core.codegen.opt.heuristic import hand_coded
from core.codegen.opt.expander import expand_kernel
from opt_helpers import run_ast, host_renderer

rng = np.random.default_rng(16)

def _conv_ref(x: np.ndarray, w: np.ndarray, stride: int) -> np.ndarray:
  """3x3 conv, padding 1, in float64."""
  xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
  win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))[:, :, ::stride, ::stride]
  return np.einsum("nchwij,ocij->nohw", win, w.astype(np.float64))

def _conv_add(n: int, cin: int, hw: tuple[int, int], cout: int, stride: int, simd_bytes: int) -> tuple[np.ndarray, np.ndarray, UOp, int]:
  """relu(conv(x, w) + b + r) on the renderer: (its output, numpy's, the conv kernel's optimized AST, r's PARAM index)."""
  x = rng.standard_normal((n, cin, *hw)).astype(np.float32)
  w = rng.standard_normal((cout, cin, 3, 3)).astype(np.float32)
  b = rng.standard_normal(cout).astype(np.float32)
  want = _conv_ref(x, w, stride) + b[:, None, None]
  r = rng.standard_normal(want.shape).astype(np.float32)
  rt = Tensor(r).realize()
  items, _, _ = create_schedule([(Tensor(x).realize().conv2d(Tensor(w).realize(), Tensor(b).realize(), padding=1, stride=stride) + rt).relu().uop])
  rnd = host_renderer(simd_bytes)
  for it in items[:-1]: run_ast(it, hand_coded(Kernel(it.ast, rnd)).ast, rnd)   # the padded input's copy, if any
  ast = hand_coded(Kernel(items[-1].ast, rnd)).ast
  got, _ = run_ast(items[-1], ast, rnd)
  return got.reshape(want.shape), np.maximum(want + r, 0), ast, items[-1].bufs.index(rt.uop.base)

@pytest.mark.parametrize("simd_bytes", [32, 64])
@pytest.mark.parametrize("n, cin, hw, cout, stride", [
  (2, 16, (16, 16), 16, 1),    # ONNX resnet's second stage: rows of 16
  (2, 32, (8, 8), 32, 1),      # rows of 8: one AVX2 vector
  (2, 16, (32, 32), 32, 2),    # the stride-2 conv into rows of 16 (keeps the channel tile: a row tile gathers its inputs)
  (2, 16, (16, 13), 16, 1),    # odd rows
  (2, 16, (7, 7), 16, 1),      # rows shorter than a vector
  (2, 24, (16, 16), 24, 1),    # channels no whole number of vectors
  (1, 8, (16, 16), 40, 1),
])
def test_conv_residual_add_values(n, cin, hw, cout, stride, simd_bytes):
  got, want, _, _ = _conv_add(n, cin, hw, cout, stride, simd_bytes)
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)

@pytest.mark.parametrize("simd_bytes", [32, 64])
def test_residual_of_one_vector_rows_is_read_as_vectors(simd_bytes):
  # 2x16x16x16 3x3 16 -> 16: the AVX-512 channel tile loaded the residual by 256 scalar loads per tile (and stored lane by lane)
  got, want, ast, res = _conv_add(2, 16, (16, 16), 16, 1, simd_bytes)
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)
  tile = expand_kernel(ast, vectorize=True, masked=True, simd_bytes=simd_bytes)
  mem = [u for u in tile.toposort() if u.op in (Ops.LOAD, Ops.STORE) and u.src[0].op is Ops.INDEX and u.src[0].src[0].op is Ops.PARAM]
  loads = [u.dtype.count for u in mem if u.op is Ops.LOAD and u.src[0].src[0].arg == res]
  stores = [u.src[1].dtype.count for u in mem if u.op is Ops.STORE]
  assert loads and all(c == simd_bytes // 4 for c in loads), loads
  assert stores and all(c == simd_bytes // 4 for c in stores), stores
