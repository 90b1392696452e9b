"""A 1x1 conv whose register tile takes its second vector from the images (heuristic.WHOLE_ROW_THIRD_VECTORS: 1 vector of pixels
x 8 output channels x 2 images on AVX-512) unrolls its reduce by MM_K_BIG_L2 (4) on a core with a 2 MiB L2 (heuristic.big_l2:
the Intel AVX-512 server core), by MM_K (2) elsewhere (the Zen 5's 1 MiB, host_like_renderer) and where 4 steps don't divide the
input channels; other tiles keep MM_K. Opts from AVX-512 LLVM renderers on any host; results against numpy where this host runs
AVX-512 (ragged channel counts, a batch of 1, an odd pixel count)."""
from __future__ import annotations
import numpy as np
import pytest
from core import Tensor
from core.codegen.opt import Kernel, OptOps
from core.codegen.opt.heuristic import BIG_L2_BYTES, hand_coded
from core.schedule.kernelize import create_schedule
from cpu_kernels import host_like_renderer, run_item

def _renderer(l2: int):
  rnd = host_like_renderer("LLVM", 64)
  rnd.l2_bytes = l2
  return rnd

def _conv1x1(n: int, c: int, hw: int, o: int, seed: int = 0):
  rng = np.random.default_rng(seed)
  x, w = rng.standard_normal((n, c, hw, hw), dtype=np.float32), rng.standard_normal((o, c, 1, 1), dtype=np.float32)
  (item,), _, _ = create_schedule([Tensor(x).realize().conv2d(Tensor(w).realize()).uop])
  return item, np.einsum("nchw,oc->nohw", x.astype(np.float64), w[:, :, 0, 0].astype(np.float64))

def _third_vectors(k: Kernel) -> bool:
  """Whether k's tile is one vector of pixels x 8 channels x 2 images (axes after the merge: images 0, channels 1, pixels 2)."""
  return [(o.axis, o.amt) for o in k.applied if o.op is OptOps.UPCAST] == [(2, 16), (1, 8), (0, 2)]

def _unroll(k: Kernel) -> int: return next((o.amt for o in k.applied if o.op is OptOps.UNROLL), 1)

@pytest.mark.parametrize("l2, c, unroll", [(BIG_L2_BYTES, 256, 4), (BIG_L2_BYTES, 100, 4), (BIG_L2_BYTES, 98, 2), (1 << 20, 256, 2)], ids=["2 MiB", "2 MiB 100 channels", "2 MiB 98 channels", "1 MiB"])
def test_third_vector_tile_unrolls_wider_on_a_big_l2(l2, c, unroll):
  k = hand_coded(Kernel(_conv1x1(4, c, 28, 64)[0].ast, _renderer(l2)))
  assert _third_vectors(k) and _unroll(k) == unroll, k.applied

@pytest.mark.parametrize("n, hw", [(1, 28), (4, 27)], ids=["batch 1", "odd pixels"])
def test_other_tiles_keep_mm_k(n, hw):
  # a batch of 1 has no pair of images, 27x27 pixels no whole vectors: neither takes the images' vectors nor the wider unroll
  k = hand_coded(Kernel(_conv1x1(n, 256, hw, 64)[0].ast, _renderer(BIG_L2_BYTES)))
  assert not _third_vectors(k) and _unroll(k) in (1, 2), k.applied

@pytest.mark.skipif("avx512f" not in __import__("plugin_cpu.compiler", fromlist=["host_flags"]).host_flags(), reason="runs AVX-512 code")
@pytest.mark.parametrize("n, c, hw, o", [(4, 256, 28, 64), (2, 100, 28, 24), (6, 98, 28, 40), (1, 96, 28, 64), (4, 52, 27, 16)])
def test_big_l2_convs_give_numpys_results(n, c, hw, o):
  item, want = _conv1x1(n, c, hw, o, seed=n + c + o)
  rnd = _renderer(BIG_L2_BYTES)
  bufs, _ = run_item(item, rnd)
  np.testing.assert_allclose(bufs[0].numpy().reshape(want.shape), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
