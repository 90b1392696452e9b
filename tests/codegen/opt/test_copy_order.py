"""The loop order around a transposing copy's register tiles (opt/copy.py): the tiles along the input's rows run innermost only
where the tile's input rows lie far apart (a.T of 4096 rows, NCHW -> NHWC: rows 3136 apart); NHWC -> NCHW reads rows 64 floats
apart, which stay cached, and keeps the output's order; streamed tiles whose blocks hold whole short output rows keep those rows'
tiles innermost (copy.rows_innermost). Both vector widths; results against numpy."""
from __future__ import annotations
import numpy as np
import pytest
from core.codegen.opt import Kernel, OptOps, heuristic
from core.codegen.opt.kernel import range_size
from core.ir.ops import AxisType
from core.codegen.opt.heuristic import hand_coded
from core.codegen.opt.copy import rows_far_apart
from opt_helpers import kernel_of, run_ast, host_renderer, permute_fn

rng = np.random.default_rng(5)

@pytest.mark.parametrize("simd_bytes", [32, 64])
@pytest.mark.parametrize("shape, perm, far", [((1024, 2048), (1, 0), True), ((4, 64, 28, 28), (0, 2, 3, 1), True),
                                              ((4, 28, 28, 64), (0, 3, 1, 2), False), ((2, 24, 24, 128), (0, 3, 1, 2), False)])
def test_tiles_along_the_input_rows_innermost_only_where_they_are_far_apart(simd_bytes, shape, perm, far, monkeypatch):
  monkeypatch.setattr(heuristic, "STRIP_TILES", 0)   # AVX2's long rows run in strips instead (test_transpose_strips)
  item, want = kernel_of(permute_fn(perm), shape, rng=rng)
  rnd = host_renderer(simd_bytes)
  k = hand_coded(Kernel(item.ast, rnd))
  ups = [o for o in k.applied if o.op is OptOps.UPCAST]
  assert len(ups) == 2 and rows_far_apart(k) == far, k.applied
  # far: a TILE or SWAP after the tile's upcasts puts its row axis innermost; near: nothing reorders the loops
  reorders = [o for o in k.applied[k.applied.index(ups[-1]):] if o.op in (OptOps.TILE, OptOps.SWAP)]
  assert bool(reorders) == far, k.applied
  got, _ = run_ast(item, k.ast, rnd)
  np.testing.assert_array_equal(got.reshape(want.shape), want)

@pytest.mark.parametrize("simd_bytes", [32, 64])
@pytest.mark.parametrize("shape, perm, whole", [((4, 64, 28, 28), (0, 2, 3, 1), True), ((2, 256, 32, 32), (0, 2, 3, 1), True),
                                                ((1024, 4160), (1, 0), False)])
def test_streamed_tiles_of_whole_short_output_rows_stay_innermost(simd_bytes, shape, perm, whole, monkeypatch):
  # streamed stores (buffers past the renderer's bound) whose thread blocks hold whole output rows of at most a page (NCHW ->
  # NHWC: a pixel's channels) keep the row's tiles innermost, no TILE or SWAP; blocks of part of a row (a.T's output columns on
  # 2 threads) and plain stores (test above) keep the tiles along the input's rows innermost
  monkeypatch.setattr(heuristic, "STRIP_TILES", 0)
  item, want = kernel_of(permute_fn(perm), shape, rng=rng)
  rnd = host_renderer(simd_bytes)
  rnd.stream_min_bytes = 1 << 20
  k = hand_coded(Kernel(item.ast, rnd))
  ups = [i for i, o in enumerate(k.applied) if o.op is OptOps.UPCAST]
  assert len(ups) == 2 and rows_far_apart(k), k.applied
  reorders = [o for o in k.applied[ups[-1]:] if o.op in (OptOps.TILE, OptOps.SWAP)]
  assert not reorders if whole else reorders, k.applied
  # innermost: the tiles along the output row (a pixel's channels, 16 a tile)
  if whole: assert range_size(k.of_type(AxisType.LOOP)[-1]) == shape[1] // 16, k.applied
  got, _ = run_ast(item, k.ast, rnd)
  np.testing.assert_array_equal(got.reshape(want.shape), want)
