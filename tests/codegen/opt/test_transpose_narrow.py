"""A transposing copy whose output rows hold no whole vector (NHWC -> NCHW of 14x14 images: rows of 196 floats; a 2-D transpose of
1000 rows) takes a register tile whose output-row side is half or a quarter of a vector (heuristic.NARROW_TILE_BYTES: at least 16
bytes), where it was a gather of one element a lane, each lane's input line read again by the next passes over the image. Choices
on an AVX2 and an AVX-512 renderer, without a pool and with 2 threads; results against numpy."""
from __future__ import annotations
import numpy as np
import pytest
from core.codegen.opt.expander import contiguous_offset
from core.ir.ops import AxisType, Ops
from opt_helpers import permuted_kernel

rng = np.random.default_rng(23)

def _tile(shape, perm, simd_bytes, threads):
  """The kernel's register tile: (its side along the output row, its side along the input row); values checked against numpy."""
  k, _ = permuted_kernel(shape, perm, simd_bytes, threads, rng)
  st = next(u for u in k.ast.toposort() if u.op is Ops.STORE)
  load = next(u for u in k.ast.toposort() if u.op is Ops.LOAD)
  ups = k.of_type(AxisType.UPCAST)
  out = [int(r.src[0].arg) for r in ups if contiguous_offset(st.src[0].src[1], r) is not None]
  inp = [int(r.src[0].arg) for r in ups if contiguous_offset(load.src[0].src[1], r) is not None]
  return out, inp

@pytest.mark.parametrize("threads", [0, 2])
@pytest.mark.parametrize("simd_bytes", [32, 64])
@pytest.mark.parametrize("shape, side", [((2, 14, 14, 256), 4), ((4, 14, 14, 64), 4), ((1, 1, 1000, 128), 8), ((2, 6, 6, 64), 4)])
def test_short_output_rows_take_a_narrow_tile(shape, side, simd_bytes, threads):
  # a whole line of input rows (16 floats) along the channels, `side` pixels along the output row (196 = 4 x 49, 1000 = 8 x 125,
  # 36 = 4 x 9): the widest that divides the row, at most a vector (AVX2: 8 floats, so 1000 takes 8 there too)
  out, inp = _tile(shape, (0, 3, 1, 2), simd_bytes, threads)
  assert out == [side] and inp == [16], (out, inp)

def test_no_tile_side_under_an_sse_register():
  # 49 pixels (7x7) hold no 4 floats: no tile (nor one of 2-float rows)
  out, inp = _tile((2, 7, 7, 64), (0, 3, 1, 2), 64, 0)
  assert not (out and inp), (out, inp)
