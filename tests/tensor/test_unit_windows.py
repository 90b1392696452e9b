"""Windows of one at stride 1 (a 1x1 conv's) are the elements themselves: Tensor._pool returns a reshape, not the windowing's pads,
shrinks and permutes, which each eager 1x1 conv built and walked for the schedule cache's key for the same kernel. Values and
gradients of 1x1 convs (padded, dilated, grouped, 1-d, strided) against numpy."""
import numpy as np
import pytest
from core.ir.ops import Ops
from core.tensor import Tensor

rng = np.random.default_rng(41)

@pytest.mark.parametrize("shape,nd,dilation", [((2, 3, 5, 6), 2, 1), ((2, 3, 5, 6), 2, 2), ((2, 4, 7), 1, 1), ((1, 2, 3, 4, 5), 3, 3)])
def test_unit_windows_are_a_reshape(shape, nd, dilation):
  a = rng.standard_normal(shape).astype(np.float32)
  p = Tensor(a)._pool((1,) * nd, 1, dilation)
  np.testing.assert_array_equal(p.numpy(), a.reshape(shape + (1,) * nd))
  assert {u.op for u in p.uop.toposort()} <= {Ops.RESHAPE, Ops.BUFFER, Ops.UNIQUE, Ops.DEVICE}, p.uop

def test_a_1x1_convs_graph_has_no_windowing():
  x, w = Tensor(rng.standard_normal((2, 8, 6, 6)).astype(np.float32)), Tensor(rng.standard_normal((4, 8, 1, 1)).astype(np.float32))
  ops = {u.op for u in x.conv2d(w).uop.toposort()}
  assert not ops & {Ops.PAD, Ops.SHRINK, Ops.PERMUTE}, ops

def _conv_ref(x: np.ndarray, w: np.ndarray, stride: int, padding: int, groups: int) -> np.ndarray:
  """A 1x1 conv (any dilation: one tap) of NC* x by OC(1...) w in float64."""
  xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0)] + [(padding, padding)] * (x.ndim - 2))[(slice(None),) * 2 + (slice(None, None, stride),) * (x.ndim - 2)]
  n, c, o = x.shape[0], x.shape[1], w.shape[0]
  xg = xp.reshape(n, groups, c // groups, *xp.shape[2:])
  wg = w.reshape(groups, o // groups, c // groups).astype(np.float64)
  return np.einsum("ngc...,goc->ngo...", xg, wg).reshape(n, o, *xp.shape[2:])

@pytest.mark.parametrize("xs,o,stride,padding,dilation,groups", [
  ((2, 8, 6, 6), 4, 1, 0, 1, 1), ((2, 8, 6, 6), 4, 1, 1, 1, 1), ((2, 8, 6, 6), 4, 1, 1, 2, 1), ((2, 8, 6, 6), 6, 1, 0, 1, 2),
  ((2, 8, 9), 4, 1, 0, 1, 1), ((2, 8, 8, 8), 4, 2, 0, 1, 1)], ids=["plain", "padded", "dilated", "groups", "1-d", "stride 2"])
def test_1x1_convs_and_gradients_match_numpy(xs, o, stride, padding, dilation, groups):
  xn = rng.standard_normal(xs).astype(np.float32)
  wn = rng.standard_normal((o, xs[1] // groups) + (1,) * (len(xs) - 2)).astype(np.float32)
  x, w = Tensor(xn, requires_grad=True), Tensor(wn, requires_grad=True)
  y = x.conv2d(w, stride=stride, padding=padding, dilation=dilation, groups=groups)
  want = _conv_ref(xn, wn, stride, padding, groups)
  np.testing.assert_allclose(y.numpy(), want, rtol=1e-5, atol=1e-5)
  g = rng.standard_normal(want.shape).astype(np.float32)
  gx, gw = (y * Tensor(g)).sum().gradient(x, w)
  # the gradients by numpy: dW sums g x x over images and pixels, dX spreads g back through the same taps
  xr = np.pad(xn.astype(np.float64), [(0, 0), (0, 0)] + [(padding, padding)] * (len(xs) - 2))
  sl = (slice(None),) * 2 + (slice(None, None, stride),) * (len(xs) - 2)
  n, c = xs[:2]
  gg = g.astype(np.float64).reshape(n, groups, o // groups, *g.shape[2:])
  xg = xr[sl].reshape(n, groups, c // groups, *g.shape[2:])
  want_w = np.einsum("ngop,ngcp->goc", gg.reshape(*gg.shape[:3], -1), xg.reshape(*xg.shape[:3], -1)).reshape(wn.shape)
  dxp = np.zeros_like(xr)
  dxp[sl] = np.einsum("ngo...,goc->ngc...", gg, wn.reshape(groups, o // groups, c // groups).astype(np.float64)).reshape(n, c, *g.shape[2:])
  want_x = dxp[(slice(None),) * 2 + (slice(padding, dxp.shape[2] - padding),) * (len(xs) - 2)]
  np.testing.assert_allclose(gw.numpy(), want_w, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(gx.numpy(), want_x, rtol=1e-4, atol=1e-4)
