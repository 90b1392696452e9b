"""A conv summed by a global average pool in the same kernel (ResNet's last block: conv, batchnorm scale, residual, relu and
the mean over the 7x7 pixels): the output has no pixel axis, so the conv's weights are read again for every pixel of the
mean. The heuristic packs the weight panel at the image loop (it is reused across the mean's pixels as well as the image
blocks), with a one-vector tile where a two-vector panel would not fit. Results against numpy on AVX2-like (8 float32 lanes,
16 registers) and AVX-512-like (16 lanes, 32 registers) renderers, and that the panel is packed."""
from __future__ import annotations
import numpy as np
import pytest
from core import Tensor
from core.schedule.kernelize import create_schedule
from core.schedule import realize_points
from core.codegen.opt import Kernel, OptOps
from core.codegen.opt.heuristic import hand_coded
from opt_helpers import run_ast, host_renderer
from test_conv_channels import _conv_ref

rng = np.random.default_rng(71)

@pytest.mark.parametrize("simd_bytes", [32, 64])
@pytest.mark.parametrize("n, c, o, hw", [(8, 512, 32, 7), (6, 64, 48, 5)])
def test_conv_summed_by_a_mean_packs_its_weights(simd_bytes, n, c, o, hw, monkeypatch):
  # the scheduler realizes a conv this big before the mean (realize_points' wide siblings); smaller convs keep the fused
  # kernel, whose choice this tests at a size where the weight panel matters
  monkeypatch.setattr(realize_points, "SIBLING_MIN_WORK", 1 << 40)
  x = rng.standard_normal((n, c, hw, hw)).astype(np.float32)
  w = (rng.standard_normal((o, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32)
  sc = rng.standard_normal(o).astype(np.float32)
  res = rng.standard_normal((n, o, hw, hw)).astype(np.float32)
  y = ((Tensor(x).realize().conv2d(Tensor(w).realize(), padding=1) * Tensor(sc).realize().reshape(1, o, 1, 1)) +
       Tensor(res).realize()).relu().mean((2, 3))
  items, _, _ = create_schedule([y.uop])
  conv = items[-1]
  rnd = host_renderer(simd_bytes)
  for item in items[:-1]: run_ast(item, hand_coded(Kernel(item.ast, rnd)).ast, rnd)   # the padded input's copy
  k = hand_coded(Kernel(conv.ast, rnd))
  got, _ = run_ast(conv, k.ast, rnd)
  want = np.maximum(_conv_ref(x, w, 1, 1, 1) * sc.astype(np.float64)[None, :, None, None] + res, 0).mean((2, 3))
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-4)
  assert any(op.op is OptOps.PACK for op in k.applied), k.applied
  # the tile: vectors along the channels (the first UPCAST's axis, split again for a second vector) times images; its
  # accumulators, one weight vector per channel vector and the broadcast input fit the vector registers
  lanes = simd_bytes // 4
  ups = [op for op in k.applied if op.op is OptOps.UPCAST]
  assert ups[0].amt == lanes, k.applied
  vecs = int(np.prod([op.amt for op in ups if op.axis == ups[0].axis])) // lanes
  rows = int(np.prod([op.amt for op in ups if op.axis != ups[0].axis]))
  assert vecs * rows + vecs + 1 <= rnd.simd_regs, k.applied
