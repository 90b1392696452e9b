"""A 1x1 conv whose rows hold no whole number of vectors (ResNet-50's 7x7 maps: 49 pixels) takes a one-vector narrow tile; where
that holds fewer accumulators than the plain tile (AVX2: 1 x 8 beside 2 x 6's 12), heuristic.NARROW_THIRD_VECTORS takes the plain
tile's vectors along the images instead: one vector x 2 images x the most channels up to 6 that divide them (no padded rows),
the reduce rolled where 12 accumulators leave no room to unroll it. AVX-512's 1 x 16 holds the 4 x 4 tile's 16 and renders as
before. Opts and sources rendered, not run, at both widths; values against numpy on the host."""
from __future__ import annotations
import numpy as np
import pytest
from cpu_kernels import host_like_renderer as _renderer, run_rendered
from core import Tensor
from core.schedule.kernelize import create_schedule
from core.codegen.opt import Kernel, OptOps
from core.codegen.opt import heuristic
from core.codegen.opt.heuristic import hand_coded
from core.codegen.program import get_program, program_source

def _item(n: int, c: int, hw: int, o: int):
  x, w = Tensor(np.zeros((n, c, hw, hw), np.float32)), Tensor(np.zeros((o, c, 1, 1), np.float32))
  (item,), _, _ = create_schedule([x.conv2d(w).uop])
  return item

def _upcasts(k: Kernel) -> dict[int, int]:
  """UPCAST amounts by the axis (of the unoptimized kernel's order: 0 images, 1 output channels, 2 pixels) they split."""
  return {o.axis: o.amt for o in k.applied if o.op is OptOps.UPCAST}

@pytest.mark.parametrize("ren", ["LLVM", "C"])
@pytest.mark.parametrize("shape, rows", [((8, 512, 7, 2048), 4), ((8, 2048, 7, 512), 4), ((8, 1024, 7, 1024), 4), ((8, 960, 7, 160), 5),
                                         ((8, 160, 7, 960), 6), ((2, 64, 7, 48), 6)])
def test_avx2_seven_by_seven_takes_two_images_of_one_vector_by_dividing_channels(shape, rows, ren):
  k = hand_coded(Kernel(_item(*shape).ast, _renderer(ren, 32)))
  assert _upcasts(k) == {2: 8, 1: rows, 0: 2}, k.applied    # one vector of pixels x rows channels x 2 images
  assert not any(o.op is OptOps.PADTO and o.axis == 1 for o in k.applied), k.applied   # the channels unpadded
  # 12 accumulators + 2 vectors + a broadcast per step leave no room to unroll the reduce; 8 or 10 do
  assert any(o.op is OptOps.UNROLL for o in k.applied) == (rows < 6), k.applied

@pytest.mark.parametrize("ren", ["LLVM", "C"])
@pytest.mark.parametrize("shape", [(3, 512, 7, 256), (8, 256, 7, 98)], ids=["3 images", "98 channels: 2 rows divide them"])
def test_avx2_keeps_the_one_vector_tile_without_two_images_or_four_rows(shape, ren):
  # 3 images don't split in 2; 98 channels take no 3 to 6 rows, and 2 x 2 would hold 4 accumulators: 1 x 8 as before
  k = hand_coded(Kernel(_item(*shape).ast, _renderer(ren, 32)))
  assert _upcasts(k).get(0) is None and _upcasts(k)[2] == 8, k.applied

@pytest.mark.parametrize("ren", ["LLVM", "C"])
@pytest.mark.parametrize("shape", [(8, 512, 7, 2048), (8, 1024, 7, 1024), (2, 64, 7, 48)])
def test_avx512_renders_as_without_third_vectors(shape, ren, monkeypatch):
  def source() -> str:   # a renderer of its own each time: programs are cached by renderer
    rnd = _renderer(ren, 64)
    return program_source(get_program(hand_coded(Kernel(_item(*shape).ast, rnd)).ast, rnd, optimize=False))
  now = source()
  monkeypatch.setattr(heuristic, "NARROW_THIRD_VECTORS", False)
  assert source() == now

@pytest.mark.parametrize("n, c, hw, o", [(2, 64, 7, 48), (4, 96, 7, 30), (2, 512, 7, 128)])
def test_avx2_two_image_tile_matches_numpy(n, c, hw, o):
  rnd = _renderer("LLVM", 32)
  assert _upcasts(hand_coded(Kernel(_item(n, c, hw, o).ast, rnd))).get(0) == 2
  r = np.random.default_rng(n * c + hw + o)
  x, w = r.standard_normal((n, c, hw, hw), dtype=np.float32), r.standard_normal((o, c, 1, 1), dtype=np.float32)
  got, _ = run_rendered(rnd, lambda a, b: a.conv2d(b), x, w)
  want = np.einsum("nchw,oc->nohw", x.astype(np.float64), w[:, :, 0, 0].astype(np.float64))
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
