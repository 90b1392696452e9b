"""Conv output rows of several vectors but no whole number of them (56 on AVX-512's 16 lanes, 28 on AVX2's 8): where padding
the row to whole vectors adds more than 1/CHANNEL_PAD_SHARE of the work, the heuristic takes the channel tile (vectors along
the output channels, stores lane by lane) instead of the padded row tile, as does a row of an odd number of whole vectors with
16 registers on the LLVM renderer (56 on AVX2); other rows of whole vectors, rows padded by little, convs
with a residual read along the row and strided convs keep the row tile (vector stores). The choice follows the renderer's lane count:
results against numpy on AVX2-like and AVX-512-like renderers."""
from __future__ import annotations
import numpy as np
import pytest
from core import Tensor
from core.ir.ops import Ops
from core.schedule.kernelize import create_schedule
from core.codegen.opt import Kernel
from core.codegen.opt.heuristic import hand_coded
from core.codegen.opt.expander import expand_kernel
from opt_helpers import run_ast, host_renderer

rng = np.random.default_rng(56)

def _conv_ref(x: np.ndarray, w: np.ndarray, stride: int = 1) -> np.ndarray:
  """3x3 conv, padding 1, in float64."""
  xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
  win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))[:, :, ::stride, ::stride]
  return np.einsum("nchwij,ocij->nohw", win, w.astype(np.float64))

def _run(y: Tensor, simd_bytes: int) -> tuple[np.ndarray, bool]:
  """(the last kernel's output after running the schedule of y on the renderer, whether its tile stores lane by lane). The
  stores are read from the expanded tile as a renderer with masked vectors takes it: one without (the C renderer) splits a
  padded row tile's gated vector stores into lanes too, which is no channel tile."""
  items, _, _ = create_schedule([y.uop])
  rnd = host_renderer(simd_bytes)
  for it in items[:-1]: run_ast(it, hand_coded(Kernel(it.ast, rnd)).ast, rnd)   # the padded input's copies, if any
  ast = hand_coded(Kernel(items[-1].ast, rnd)).ast
  got, _ = run_ast(items[-1], ast, rnd)
  tile = expand_kernel(ast, vectorize=True, masked=True, simd_bytes=rnd.simd_width)
  stores = [u for u in tile.toposort() if u.op is Ops.STORE and u.src[0].op is Ops.INDEX and u.src[0].src[0].op is Ops.PARAM]
  return got, bool(stores) and all(u.src[1].dtype.count == 1 for u in stores)

@pytest.mark.parametrize("simd_bytes, width, channel", [
  (64, 56, True),     # 3.5 vectors: padded to 64, 1/8 more work
  (32, 56, None),     # 7 whole vectors: an odd number, one along the row tile (CHANNEL_ODD_ROWS, where the renderer says so)
  (32, 48, False),    # 6 whole vectors
  (32, 28, True),     # 3.5 vectors of 8
  (64, 120, True),    # 7.5 vectors
  (64, 136, False),   # 8.5 vectors: padding adds 1/17
  (64, 64, False),
])
def test_row_of_part_vectors_takes_the_channel_tile(simd_bytes, width, channel):
  x = rng.standard_normal((2, 8, 5, width)).astype(np.float32)
  w = rng.standard_normal((32, 8, 3, 3)).astype(np.float32)
  got, scattered = _run(Tensor(x).realize().conv2d(Tensor(w).realize(), padding=1), simd_bytes)
  want = _conv_ref(x, w)
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-3)
  assert scattered == (host_renderer(simd_bytes).odd_row_channel_tile if channel is None else channel)

@pytest.mark.parametrize("simd_bytes", [32, 64])
def test_residual_along_the_row_keeps_the_row_tile(simd_bytes):
  # ResNet's conv-add-relu: the residual is read once per output, contiguous along the row; channel vectors would gather it
  x = rng.standard_normal((2, 8, 5, 56)).astype(np.float32)
  w = rng.standard_normal((32, 8, 3, 3)).astype(np.float32)
  r = rng.standard_normal((2, 32, 5, 56)).astype(np.float32)
  got, scattered = _run((Tensor(x).realize().conv2d(Tensor(w).realize(), padding=1) + Tensor(r).realize()).relu(), simd_bytes)
  want = np.maximum(_conv_ref(x, w) + r, 0)
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-3)
  assert not scattered

@pytest.mark.parametrize("simd_bytes", [32, 64])
def test_strided_row_keeps_the_row_tile(simd_bytes):
  # a stride-2 conv with rows of 28 (ResNet's 56 -> 28 downsample): a channel tile's row block would read twice the inputs
  x = rng.standard_normal((2, 8, 6, 56)).astype(np.float32)
  w = rng.standard_normal((32, 8, 3, 3)).astype(np.float32)
  got, scattered = _run(Tensor(x).realize().conv2d(Tensor(w).realize(), padding=1, stride=2), simd_bytes)
  want = _conv_ref(x, w, 2)
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-3)
  assert scattered == (simd_bytes == 64)   # on 16 lanes 28 is under two vectors: the channel tile, as before
