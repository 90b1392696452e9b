"""The conv channel tile's register budget (heuristic._channel_block): its accumulators, a weight vector per kernel column it
unrolls (each broadcast input pixel serves its neighbours' columns, so j * 3 weight vectors are live) and the broadcast fit the
renderer's vector registers, so the inner loop keeps its accumulators in registers (AVX2's 16: 7 accumulators, where 14 spilled);
with the window's taps as loops (CHANNEL_TAP_LOOPS), a broadcast per pixel and one weight vector beside them. The schedule is the
one the renderer's host makes (whether a large input is read in place or through a padded copy: Renderer.large_conv_in_place),
not this host's."""
from __future__ import annotations
import numpy as np
import pytest
from numpy.lib.stride_tricks import sliding_window_view
from cpu_kernels import run_rendered
from core import Tensor
from core.device.registry import Device
from core.schedule.kernelize import create_schedule
from core.codegen.opt import Kernel, OptOps
from core.codegen.opt.heuristic import hand_coded
from plugin_cpu.compiler import host_flags
from plugin_cpu.renderer import CPULLVMRenderer

def _renderer(simd_bytes: int):
  rnd = CPULLVMRenderer().narrowed(simd_bytes)
  rnd.simd_width, rnd.simd_regs, rnd.threads = simd_bytes, 16 if simd_bytes == 32 else 32, 1
  rnd.large_conv_in_place = simd_bytes == 64   # the plugin's fact for that width (CPULLVMRenderer.target), whatever this host's
  return rnd

def _conv(x: Tensor, w: Tensor) -> Tensor: return x.conv2d(w, padding=1)

def _tile(simd_bytes: int, n: int, c: int, hw: int) -> tuple[int, int]:
  """(accumulators, other vector registers live) of the 3x3 conv's channel tile on a renderer of simd_bytes vectors, scheduled
  as on that renderer's host: the unrolled window's j * 3 weight vectors and a broadcast, or the tap loops' broadcast per pixel
  and a weight vector."""
  rnd = _renderer(simd_bytes)
  x, w = Tensor(np.zeros((n, c, hw, hw), np.float32)), Tensor(np.zeros((c, c, 3, 3), np.float32))
  with pytest.MonkeyPatch.context() as mp:
    mp.setattr(Device[x.device], "renderer", rnd)
    ast = create_schedule([_conv(x, w).uop])[0][-1].ast
  k = hand_coded(Kernel(ast, rnd))
  ups = [o.amt for o in k.applied if o.op is OptOps.UPCAST]
  lanes = simd_bytes // 4
  assert ups and ups[0] == lanes and any(o.op is OptOps.PACK for o in k.applied), k.applied   # the channel tile
  vectors = ups[1] if len(ups) > 2 and ups[1] <= 4 else 1
  if any(o.op is OptOps.UNROLL for o in k.applied): return int(np.prod(ups)) // lanes, vectors * 3 + 1
  return int(np.prod(ups)) // lanes, ups[-1] + 1

@pytest.mark.parametrize("simd_bytes", [32, 64], ids=["AVX2", "AVX-512"])
@pytest.mark.parametrize("shape", [(2, 128, 28), (1, 128, 28), (2, 256, 14), (2, 512, 7)], ids=["28", "28-in-place", "14", "7"])
def test_channel_tile_accumulators_and_weights_fit_the_registers(simd_bytes, shape):
  acc, others = _tile(simd_bytes, *shape)
  assert acc + others <= _renderer(simd_bytes).simd_regs, (acc, others)

@pytest.mark.parametrize("shape, tile", [((2, 128, 28), (12, 4)), ((1, 128, 28), (8, 7)), ((2, 256, 14), (7, 4)), ((2, 512, 7), (7, 4))],
                         ids=["28", "28-in-place", "14", "7"])
def test_avx2_channel_tile_holds_the_accumulators_that_fit(shape, tile):
  # 7 pixels of one vector of output channels, the kernel columns unrolled: 7 + 3 + 1 of 16 registers (the 14 of two images or
  # a row of 14 took 18 and spilled); a row of 28 read in place (a small input: its loads gated) takes 4 pixels of 2 vectors
  # instead (CHANNEL_POW2_ROWS): 8 + 6 + 1; from its padded copy (an AVX2 host copies a large one), 4 vectors x 3 pixels with
  # the taps as loops (CHANNEL_TAP_LOOPS): 12 + 3 + 1
  assert _tile(32, *shape) == tile

@pytest.mark.skipif(not {"avx2", "fma"} <= host_flags(), reason="runs AVX2 code: an x86 host with avx2 and fma")
@pytest.mark.parametrize("shape", [(2, 32, 7), (1, 16, 14)], ids=["7", "14"])
def test_avx2_channel_tile_conv_matches_numpy(shape):
  n, c, hw = shape
  rng = np.random.default_rng(0)
  x, w = rng.standard_normal((n, c, hw, hw), np.float32), rng.standard_normal((c, c, 3, 3), np.float32)
  got, _ = run_rendered(_renderer(32), lambda a, b: _conv(a, b), x, w)
  win = sliding_window_view(np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1))), (3, 3), axis=(2, 3))
  want = np.einsum("nchwij,ocij->nohw", win, w.astype(np.float64))
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-4)
