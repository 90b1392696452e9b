"""The stem's weight gradient (7x7 stride 2 over 3 input channels; dY handed over as NHWC, its rows kw' of 4, c' of 12 and kh'
of 4 after the stride's phase split, all too short for a packed panel's reuse) takes one vector of output channels and 12
accumulators from kw' and c' (heuristic._one_column_tile), not 2 vectors x 4: each dY vector, streamed from the outer caches
once per pass, then feeds 12 FMAs instead of 4. Results against numpy on AVX2 and AVX-512 renderers."""
from __future__ import annotations
import numpy as np
import pytest
from core import Tensor
from core.codegen.opt import Kernel, OptOps
from core.codegen.opt.heuristic import hand_coded, simd_lanes
from core.codegen.opt.kernel import range_size
from core.ir.ops import AxisType
from core.schedule.kernelize import create_schedule
from opt_helpers import run_ast, host_renderer

rng = np.random.default_rng(11)

def _stem_weight_grad_np(x: np.ndarray, g: np.ndarray) -> np.ndarray:
  xp = np.pad(x, ((0, 0), (0, 0), (3, 3), (3, 3)))
  oh, ow = g.shape[2:]
  return np.stack([np.stack([np.einsum("nchw,nohw->oc", xp[:, :, i:i + 2 * oh:2, j:j + 2 * ow:2], g) for j in range(7)], -1)
                   for i in range(7)], -2)

@pytest.mark.parametrize("simd_bytes", [32, 64])
@pytest.mark.parametrize("n,hw", [(2, 32), (1, 48)])
def test_stem_weight_grad_takes_one_vector_and_twelve_rows(simd_bytes, n, hw):
  xn, gn = rng.standard_normal((n, 3, hw, hw), dtype=np.float32), rng.standard_normal((n, 64, hw // 2, hw // 2), dtype=np.float32)
  x, w = Tensor(xn).realize(), Tensor(rng.standard_normal((64, 3, 7, 7), dtype=np.float32), requires_grad=True).realize()
  dw = (x.conv2d(w, stride=2, padding=3) * Tensor(gn).realize()).sum().gradient(w)[0]
  items, _, _ = create_schedule([dw.uop])
  rnd, lanes = host_renderer(simd_bytes), simd_lanes(host_renderer(simd_bytes), 4)
  got, tiles = None, []
  for it in items:
    k0 = Kernel(it.ast, rnd)
    k = hand_coded(k0)
    if [range_size(r) for r in k0.of_type(AxisType.LOOP)][-4:] == [12, 4, 4, 64] and len(k0.of_type(AxisType.REDUCE)) == 2:
      # the tile: one vector of the 64 output channels, kw' (4) whole, c' (12) by 3; the column blocks swapped outward
      tiles.append(sorted(range_size(r) or 0 for r in k.of_type(AxisType.UPCAST)))
      assert any(o.op is OptOps.SWAP for o in k.applied), k.applied
    got, _ = run_ast(it, k.ast, rnd)
  assert tiles == [sorted([lanes, 4, 3])], tiles
  ref = _stem_weight_grad_np(xn, gn)
  np.testing.assert_allclose(got.reshape(ref.shape), ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())
