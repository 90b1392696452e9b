"""conv2d's weight gradient with one partial sum per block of an image's rows where the image's dY is larger than
conv.PARTIAL_DY_BYTES (conv._row_blocks): values against a float64 numpy reference, and the partials' buffer in the schedule."""
import numpy as np
import pytest
from core import Tensor
from core.schedule.kernelize import create_schedule
from core.tensor import conv

def _dw_ref(x: np.ndarray, g: np.ndarray, k: int, s: int, p: int) -> np.ndarray:
  """float64 dW of a k x k conv with stride s and padding p whose output gradient is g."""
  oh, ow = g.shape[2:]
  xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0), (p, p), (p, p)])
  return np.stack([np.stack([np.einsum("nohw,nchw->oc", g, xp[:, :, i:i + s * oh:s, j:j + s * ow:s]) for j in range(k)], -1)
                   for i in range(k)], -2)

def _dw(x: np.ndarray, g: np.ndarray, k: int, s: int, p: int) -> Tensor:
  w = Tensor(np.random.default_rng(1).standard_normal((g.shape[1], x.shape[1], k, k)).astype(np.float32), requires_grad=True)
  return (Tensor(x).conv2d(w, stride=s, padding=p) * Tensor(g.astype(np.float32))).sum().gradient(w)[0]

def _buffer_sizes(dw: Tensor) -> set[int]:
  items, _, _ = create_schedule([dw.uop])
  return {it.bufs[0].arg for it in items}

def test_row_blocks() -> None:
  # the stem's dY rows (112 of 112 x 64 floats, 28 KiB each) in 7 blocks of 16; ResNet's 56x56x64 (784 KiB) in 2 of 28,
  # 28x28x128 (392 KiB) whole; rows as large as the limit: one a block
  assert conv.PARTIAL_DY_BYTES == 512 << 10
  assert conv._row_blocks(112, 112 * 64 * 4, 65) == 7
  assert conv._row_blocks(56, 56 * 64 * 4, 10) == 2
  assert conv._row_blocks(28, 28 * 128 * 4, 10) == 1
  assert conv._row_blocks(7, conv.PARTIAL_DY_BYTES, 100) == 7
  assert conv._row_blocks(112, 112 * 64 * 4, 3) == 2   # the partials' buffer limit wins: the most blocks within it
  # a prime count of rows (the stem of a 226x226 input: 113) fits only one row a block: whole images instead
  assert conv._row_blocks(113, 113 * 64 * 4, 200) == 1
  assert conv._row_blocks(109, 109 * 64 * 4, 200) == 1

def test_stem_weight_grad_has_row_block_partials() -> None:
  # ResNet's 7x7/2 stem on 8x3x224x224: by phases a 4x4 conv of 12 channels; its partials are per image and block of 16 rows
  w = Tensor.empty(64, 3, 7, 7, requires_grad=True)
  dw = (Tensor.empty(8, 3, 224, 224).conv2d(w, stride=2, padding=3) * Tensor.empty(8, 64, 112, 112)).sum().gradient(w)[0]
  assert 8 * 7 * 12 * 4 * 4 * 64 in _buffer_sizes(dw)

# (batch, cin, hw, cout, k, stride, padding, limit: PARTIAL_DY_BYTES, blocks per image)
@pytest.mark.parametrize("n, c, hw, o, k, s, p, limit, blocks", [
  (2, 3, 16, 8, 3, 1, 1, 2048, 4),      # 512-byte rows of dY: 4 rows a block
  (2, 3, 16, 8, 3, 1, 1, 1 << 20, 1),   # whole images
  (2, 3, 15, 8, 3, 1, 1, 1500, 5),      # 480-byte rows, 15 = 5 blocks of 3
  (2, 3, 32, 8, 7, 2, 3, 2048, 4),      # the stem's form (by phases): 16x16 outputs in 4 blocks of 4 rows
  (2, 3, 32, 8, 7, 2, 3, 1024, 4),      # 2 rows a block would pass the partials' limit (5 a image): the most within it
])
def test_weight_grad_by_row_blocks(monkeypatch, n, c, hw, o, k, s, p, limit, blocks) -> None:
  monkeypatch.setattr(conv, "PARTIAL_DY_BYTES", limit)
  rng = np.random.default_rng(n * c * hw + k)
  oh = (hw + 2 * p - k) // s + 1
  x, g = rng.standard_normal((n, c, hw, hw)).astype(np.float32), rng.standard_normal((n, o, oh, oh))
  dw = _dw(x, g, k, s, p)
  # by phases (stride 2) the weight is 4 channels per input channel and ceil(k/2)^2 taps
  cin_k = c * k * k if s == 1 else c * s * s * (-(-k // s)) ** 2
  assert n * blocks * cin_k * o in _buffer_sizes(dw)
  np.testing.assert_allclose(dw.numpy(), _dw_ref(x, g, k, s, p), rtol=1e-4, atol=1e-4)
