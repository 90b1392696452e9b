"""conv2d's weight gradient as per-image partial sums (conv._weight_grad_product) while those take at most PARTIALS_PER_DY times
dY's memory, else one sum over the batch and positions: both against a float64 numpy reference, and which one the schedule has."""
import numpy as np
import pytest
from core import Tensor
from core.schedule.kernelize import create_schedule
from core.tensor import conv

def _dw_ref(x: np.ndarray, g: np.ndarray, k: int) -> np.ndarray:
  """float64 dW of a stride-1 k x k conv with padding k//2 and output gradient g."""
  p, (h, w) = k // 2, x.shape[2:]
  xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0), (p, p), (p, p)])
  return np.stack([np.stack([np.einsum("nohw,nchw->oc", g, xp[:, :, i:i + h, j:j + w]) for j in range(k)], -1) for i in range(k)], -2)

def _dw(x: np.ndarray, g: np.ndarray, cout: int, k: int) -> Tensor:
  w = Tensor(np.random.default_rng(1).standard_normal((cout, x.shape[1], k, k)).astype(np.float32), requires_grad=True)
  y = Tensor(x).conv2d(w, padding=k // 2)
  return (y * Tensor(g.astype(np.float32))).sum().gradient(w)[0]

def _partials(dw: Tensor, count: int) -> bool:
  """Whether dW's schedule writes a buffer of `count` elements (batch x weight: the per-image partial sums)."""
  items, _, _ = create_schedule([dw.uop])
  return any(it.bufs[0].arg == count for it in items)

# (batch, cin, hw, cout, k): cin*k*k / hw^2 = 1.5 (ResNet-18's layer2 shape, scaled), 4 (the limit), 16 (one sum)
@pytest.mark.parametrize("n, c, hw, o, k, per_image", [(2, 24, 12, 8, 3, True), (2, 16, 6, 8, 3, True), (3, 16, 3, 8, 3, False)])
def test_weight_grad_partials(n, c, hw, o, k, per_image):
  rng = np.random.default_rng(n * c * hw)
  x, g = rng.standard_normal((n, c, hw, hw)).astype(np.float32), rng.standard_normal((n, o, hw, hw))
  assert (c * k * k <= conv.PARTIALS_PER_DY * hw * hw) == per_image
  dw = _dw(x, g, o, k)
  assert _partials(dw, n * c * k * k * o) == per_image
  np.testing.assert_allclose(dw.numpy(), _dw_ref(x, g, k), rtol=1e-4, atol=1e-4)
