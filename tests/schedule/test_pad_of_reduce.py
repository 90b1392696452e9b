"""A reduction read through a PAD is its own kernel: fused, it would run over the padded grid with index math that no longer
simplifies (a conv followed by a padded max-pool or conv ran ~1000x slower than the two kernels; bench/onnx_models.py)."""
import numpy as np
from core.ir.dtype import dtypes
from core.ir.ops import UOp, Ops
from core.schedule.kernelize import create_schedule

def kernels(items): return [it for it in items if it.ast.op is Ops.SINK]

def test_padded_reduce_is_realized_unpadded():
  a = UOp.new_buffer("CPU", 12, dtypes.float32).reshape((3, 4))
  out = a.r(Ops.ADD, (1,)).pad(((1, 1), (0, 0)))
  items, _, _ = create_schedule([out])
  ks = kernels(items)
  assert len(ks) == 2
  assert [k.bufs[0].arg for k in ks] == [3, 5]   # the sums (3 of them), then the padded copy (5)

def test_padded_elementwise_stays_fused():
  a = UOp.new_buffer("CPU", 12, dtypes.float32).reshape((3, 4))
  out = (a * 2.0 + 1.0).pad(((1, 1), (0, 0)))
  assert len(kernels(create_schedule([out])[0])) == 1   # cheap values are recomputed under the pad, as before

def test_conv_then_padded_pool_matches_numpy():
  from core import Tensor
  rng = np.random.default_rng(0)
  x, w = rng.standard_normal((1, 2, 6, 6)).astype(np.float32), rng.standard_normal((3, 2, 3, 3)).astype(np.float32)
  got = Tensor(x).conv2d(Tensor(w), padding=1).relu().pad((1, 1, 1, 1)).numpy()
  xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
  conv = np.zeros((1, 3, 6, 6), np.float32)
  for i in range(6):
    for j in range(6): conv[0, :, i, j] = np.tensordot(w, xp[0, :, i:i + 3, j:j + 3], axes=([1, 2, 3], [0, 1, 2]))
  np.testing.assert_allclose(got, np.pad(np.maximum(conv, 0), ((0, 0), (0, 0), (1, 1), (1, 1))), rtol=1e-5, atol=1e-5)

def _conv_relu_maxpool(x, w):
  from core import Tensor
  return Tensor(x).conv2d(Tensor(w), padding=1).relu().max_pool2d(3, 2, padding=1)

def test_padded_pool_reads_the_conv_buffer():
  # the max-pool's -inf padding (a where over the padded conv) is recomputed in the pool kernel, not a copy kernel of its own:
  # two kernels (conv, pool), where realizing the padded conv for the pool's windows made three (ResNet's stem)
  rng = np.random.default_rng(0)
  x, w = rng.standard_normal((2, 3, 8, 8)).astype(np.float32), rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
  out = _conv_relu_maxpool(x, w)
  items = create_schedule([out.uop])[0]
  assert len(kernels(items)) == 2
  xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
  conv = np.zeros((2, 4, 8, 8), np.float32)
  for i in range(8):
    for j in range(8): conv[:, :, i, j] = np.tensordot(xp[:, :, i:i + 3, j:j + 3], w, axes=([1, 2, 3], [1, 2, 3]))
  cp = np.pad(np.maximum(conv, 0), ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
  want = np.stack([np.stack([cp[:, :, 2 * i:2 * i + 3, 2 * j:2 * j + 3].max((2, 3)) for j in range(4)], -1) for i in range(4)], -2)
  np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-5)
