"""A 3x3 conv whose output row is exactly one vector (8x8 images on AVX2, 16x16 on AVX-512: ResNet's last stage) still gets
at least MM_MIN_ACC vector accumulators: the row's vector times 4 output channels times 2 output rows (AVX-512's channel tile
by output rows holds 16). The optimizer used to try a second vector along the already whole row, fail, count it anyway
and so skip the extra rows: 4 accumulators, FMA latency bound (one Zen 3 thread, 2x32x8x8 32->32: 52 -> 33 us). Results
against numpy on both renderers."""
from __future__ import annotations
import numpy as np
import pytest
from core.codegen.opt import Kernel, OptOps
from core.codegen.opt.heuristic import hand_coded, MM_MIN_ACC
from opt_helpers import kernel_of, run_ast, host_renderer

rng = np.random.default_rng(31)

def _conv_np(x: np.ndarray, w: np.ndarray, stride: int) -> np.ndarray:
  xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
  oh, ow = (x.shape[2] - 1) // stride + 1, (x.shape[3] - 1) // stride + 1
  return sum(np.einsum("nchw,oc->nohw", xp[:, :, i:i + stride * oh:stride, j:j + stride * ow:stride], w[:, :, i, j]) for i in range(3) for j in range(3))

@pytest.mark.parametrize("simd_bytes", [32, 64])
@pytest.mark.parametrize("stride", [1, 2])
def test_one_vector_row_conv_has_enough_accumulators(simd_bytes, stride):
  lanes = simd_bytes // 4
  hw = lanes * stride   # the output row is one vector
  item, ref = kernel_of(lambda x, w: x.conv2d(w, padding=1, stride=stride) if not isinstance(x, np.ndarray) else _conv_np(x, w, stride),
                        (2, 16, hw, hw), (32, 16, 3, 3), rng=rng)
  rnd = host_renderer(simd_bytes)
  k = hand_coded(Kernel(item.ast, rnd))
  ups = [o.amt for o in k.applied if o.op is OptOps.UPCAST]
  assert ups[0] == lanes and int(np.prod(ups)) // lanes >= MM_MIN_ACC, k.applied
  got, _ = run_ast(item, k.ast, rnd)
  np.testing.assert_allclose(got.reshape(ref.shape), ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())
