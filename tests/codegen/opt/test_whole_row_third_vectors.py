"""A plain product whose output row holds whole vectors but not whole tiles of them (a 28x28 map: 784 pixels, 49 vectors of 16
in AVX-512's 2 x 8 tiles) takes the tile's second vector from another output axis the row-side input does not use (the images:
heuristic.WHOLE_ROW_THIRD_VECTORS), where it padded the row to 800 (the pad's FMAs, and masked loads and stores in every pixel
block): 1 vector x 8 channels x 2 images, no PADTO, a thread block per pair of images. Where the images don't pair up (3), or
the row takes no padding (AVX2's 2 x 6: 98 vectors of 8), the tile is as before. Opts from AVX2-like and AVX-512-like renderers;
results against numpy."""
from __future__ import annotations
import numpy as np
import pytest
from core.codegen.opt import Kernel, OptOps, apply_opts
from core.codegen.opt.heuristic import hand_coded
from opt_helpers import run_ast, host_renderer, conv1x1_item

rng = np.random.default_rng(43)

def _upcasts(applied: list) -> list[tuple[int, int]]: return [(o.axis, o.amt) for o in applied if o.op is OptOps.UPCAST]

# (the thread blocks: a pair of images each, or with one pair the 49 pixel blocks)
@pytest.mark.parametrize("n, c, o, blocks", [(32, 256, 64, 16), (4, 256, 64, 2), (2, 128, 32, 49)])
def test_whole_vector_row_takes_the_tiles_vectors_from_the_images(n, c, o, blocks):
  item, want = conv1x1_item(rng, n, c, 28, o)
  k = hand_coded(Kernel(item.ast, host_renderer(64, masked=True)))   # what the pad of 49 vectors to 50 costs: masked lanes
  # pixels (axis 2 after the merge) in one vector, 8 output channels, 2 images; nothing padded
  assert _upcasts(k.applied) == [(2, 16), (1, 8), (0, 2)], k.applied
  assert not any(op.op is OptOps.PADTO for op in k.applied), k.applied
  assert [op.amt for op in k.applied if op.op is OptOps.THREAD] == [blocks], k.applied
  rnd = host_renderer(64)   # its plan pads nothing: it runs on the default renderer
  got, _ = run_ast(item, apply_opts(item.ast, k.applied, rnd), rnd)
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())

@pytest.mark.parametrize("simd_bytes, n", [(64, 3), (32, 32)], ids=["AVX-512 odd images", "AVX2 whole pairs of vectors"])
def test_other_rows_keep_their_tile(simd_bytes, n):
  item, want = conv1x1_item(rng, n, 256, 28, 64)
  k = hand_coded(Kernel(item.ast, host_renderer(simd_bytes, masked=True)))
  lanes = simd_bytes // 4
  ups = _upcasts(k.applied)
  # two vectors of pixels (AVX2's rows upcast between them), no images
  assert [amt for axis, amt in ups if axis == 2] == [lanes, 2] and not any(axis == 0 for axis, _ in ups), k.applied
  # AVX-512 pads the 49 vectors of pixels to 50; AVX2's 98 are whole pairs (its 6-row tile pads the channels)
  assert any(op.op is OptOps.PADTO and op.axis == 2 for op in k.applied) == (simd_bytes == 64), k.applied
  rnd = host_renderer(simd_bytes)   # the values: the default renderer's own plan (its pad lanes may be unmasked)
  got, _ = run_ast(item, hand_coded(Kernel(item.ast, rnd)).ast, rnd)
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
