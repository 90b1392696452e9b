"""Gradients of conv (1d/2d/3d) for the input and the weight against a float64 numpy reference: the input's gradient is a
transposed conv (core.tensor.gradient.custom_vjp), the weight's a product with the output channels innermost (conv._weight_grad;
the chain rule through the windows where a group has fewer than 4 output channels)."""
import itertools
import numpy as np
import pytest
from core import Tensor, Jit
from core.ir.ops import UOp, Ops
from core.tensor.gradient import custom_vjp, register_vjp

def _ref(x, w, groups, stride, dilation, pads, g):
  """float64 (y, dL/dx, dL/dw) of conv with L = sum(y * g), by summing one kernel tap at a time."""
  nd = w.ndim - 2
  cout, cin_g, *ks = w.shape
  rc = cout // groups
  xp = np.pad(x, [(0, 0), (0, 0)] + list(pads))
  os_ = [(xp.shape[2 + i] - dilation[i] * (ks[i] - 1) - 1) // stride[i] + 1 for i in range(nd)]
  y = np.zeros((x.shape[0], cout, *os_))
  dxp, dw = np.zeros_like(xp), np.zeros_like(w)
  for tap in itertools.product(*[range(k) for k in ks]):
    sl = tuple(slice(tap[i] * dilation[i], tap[i] * dilation[i] + (os_[i] - 1) * stride[i] + 1, stride[i]) for i in range(nd))
    for gi in range(groups):
      xs = xp[(slice(None), slice(gi * cin_g, (gi + 1) * cin_g)) + sl]     # (n, cin_g, *o)
      wt = w[(slice(gi * rc, (gi + 1) * rc), slice(None)) + tap]          # (rc, cin_g)
      gg = g[:, gi * rc:(gi + 1) * rc]                                   # (n, rc, *o)
      y[:, gi * rc:(gi + 1) * rc] += np.einsum("nc...,rc->nr...", xs, wt)
      dxp[(slice(None), slice(gi * cin_g, (gi + 1) * cin_g)) + sl] += np.einsum("nr...,rc->nc...", gg, wt)
      dw[(slice(gi * rc, (gi + 1) * rc), slice(None)) + tap] += np.einsum("nrp,ncp->rc", gg.reshape(*gg.shape[:2], -1), xs.reshape(*xs.shape[:2], -1))
  dx = dxp[(slice(None), slice(None)) + tuple(slice(b, b + n) for (b, _), n in zip(pads, x.shape[2:]))]
  return y, dx, dw

CASES = [
  # (x shape, w shape, groups, stride, dilation, padding as conv2d takes it, per-dim (before, after))
  ((2, 3, 9, 8), (4, 3, 3, 3), 1, 1, 1, 1, [(1, 1), (1, 1)]),
  ((1, 4, 11, 10), (6, 2, 3, 3), 2, 2, 1, 1, [(1, 1), (1, 1)]),
  ((2, 3, 13, 12), (5, 3, 3, 2), 1, 3, 1, 0, [(0, 0), (0, 0)]),
  ((1, 3, 12, 11), (3, 3, 3, 3), 1, (2, 1), (2, 3), (2, 1), [(2, 2), (1, 1)]),
  ((2, 6, 9, 7), (6, 1, 3, 3), 6, 1, 1, 1, [(1, 1), (1, 1)]),                      # depthwise
  ((1, 4, 10, 9), (8, 1, 3, 3), 4, 2, 1, 1, [(1, 1), (1, 1)]),                      # depthwise, multiplier 2, stride 2
  ((1, 2, 7, 9), (3, 2, 2, 3), 1, 2, 1, (1, 2, 0, 1), [(0, 1), (1, 2)]),            # asymmetric (torch's flat order)
  ((2, 3, 5, 5), (4, 3, 1, 1), 1, 2, 1, 0, [(0, 0), (0, 0)]),                       # 1x1 stride 2 (a downsample)
  ((1, 3, 17), (4, 3, 5), 1, 3, 2, 2, [(2, 2)]),                                    # conv1d
  ((2, 4, 11, 10), (8, 2, 3, 3), 2, 2, 2, 2, [(2, 2), (2, 2)]),                   # groups of 4 outputs, stride and dilation 2
  ((1, 4, 6, 5, 7), (8, 2, 3, 1, 3), 2, (2, 1, 1), 1, 1, [(1, 1)] * 3),             # conv3d, groups of 4 outputs
  ((2, 4, 6, 5, 7), (4, 2, 3, 2, 3), 2, (1, 2, 2), 1, 1, [(1, 1)] * 3),             # conv3d
]

@pytest.mark.parametrize("xs,ws,groups,stride,dilation,padding,pads", CASES)
def test_conv_grads(xs, ws, groups, stride, dilation, padding, pads):
  rng = np.random.default_rng(sum(xs) + sum(ws))
  nd = len(ws) - 2
  xn, wn, bn = rng.standard_normal(xs), rng.standard_normal(ws), rng.standard_normal(ws[0])
  s = (stride,) * nd if isinstance(stride, int) else stride
  d = (dilation,) * nd if isinstance(dilation, int) else dilation
  xp = np.pad(xn, [(0, 0), (0, 0)] + pads)
  os_ = [(xp.shape[2 + i] - d[i] * (ws[2 + i] - 1) - 1) // s[i] + 1 for i in range(nd)]
  gn = rng.standard_normal((xs[0], ws[0], *os_))
  y_ref, dx_ref, dw_ref = _ref(xn, wn, groups, s, d, pads, gn)
  x = Tensor(xn.astype(np.float32), requires_grad=True)
  w = Tensor(wn.astype(np.float32), requires_grad=True)
  b = Tensor(bn.astype(np.float32), requires_grad=True)
  y = x.conv2d(w, b, groups=groups, stride=stride, dilation=dilation, padding=padding)
  (y * Tensor(gn.astype(np.float32))).sum().backward()
  assert x.grad is not None and w.grad is not None and b.grad is not None
  np.testing.assert_allclose(y.numpy(), y_ref + bn.reshape(-1, *[1] * nd), rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(x.grad.numpy(), dx_ref, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(w.grad.numpy(), dw_ref, rtol=1e-4, atol=2e-4)
  np.testing.assert_allclose(b.grad.numpy(), gn.sum(axis=tuple(i for i in range(gn.ndim) if i != 1)), rtol=1e-4, atol=1e-4)

def test_input_grad_is_a_transposed_conv():
  # autograd through the windows would sum the product's gradient back over the tiled views (a REDUCE_AXIS per spatial
  # dim, over a buffer kh*kw times x); the transposed conv has the one reduce of a conv
  rng = np.random.default_rng(4)
  xn, wn = rng.standard_normal((2, 4, 8, 8)), rng.standard_normal((4, 4, 3, 3))
  x, w = Tensor(xn.astype(np.float32), requires_grad=True), Tensor(wn.astype(np.float32), requires_grad=False)
  gx, = x.conv2d(w, padding=1).sum().gradient(x)
  assert sum(u.op is Ops.REDUCE_AXIS for u in gx.uop.toposort()) == 1
  _, dx_ref, _ = _ref(xn, wn, 1, (1, 1), (1, 1), [(1, 1), (1, 1)], np.ones((2, 4, 8, 8)))
  np.testing.assert_allclose(gx.numpy(), dx_ref, rtol=1e-4, atol=1e-4)

def test_grad_only_for_some_inputs():
  rng = np.random.default_rng(1)
  xn, wn = rng.standard_normal((1, 2, 6, 6)), rng.standard_normal((3, 2, 3, 3))
  g = np.ones((1, 3, 3, 3))
  _, dx_ref, dw_ref = _ref(xn, wn, 1, (2, 2), (1, 1), [(1, 1), (1, 1)], g)
  x, w = Tensor(xn.astype(np.float32), requires_grad=True), Tensor(wn.astype(np.float32), requires_grad=False)
  x.conv2d(w, stride=2, padding=1).sum().backward()
  assert w.grad is None and x.grad is not None
  np.testing.assert_allclose(x.grad.numpy(), dx_ref, rtol=1e-4, atol=1e-4)
  x, w = Tensor(xn.astype(np.float32), requires_grad=False), Tensor(wn.astype(np.float32), requires_grad=True)
  x.conv2d(w, stride=2, padding=1).sum().backward()
  assert x.grad is None and w.grad is not None
  np.testing.assert_allclose(w.grad.numpy(), dw_ref, rtol=1e-4, atol=1e-4)

def test_double_backward():
  # d/dw and d/dx of sum((dL/dx)^2) with L = sum(y^2): the transposed conv is differentiated again (the conv inside it
  # takes the custom gradient too). Reference: finite differences of the numpy gradient, in float64.
  rng = np.random.default_rng(2)
  xn, wn = rng.standard_normal((1, 2, 5, 5)), rng.standard_normal((2, 2, 3, 3))
  def f(xv, wv):
    y, _, _ = _ref(xv, wv, 1, (1, 1), (1, 1), [(1, 1), (1, 1)], np.zeros((1, 2, 5, 5)))
    _, dx, _ = _ref(xv, wv, 1, (1, 1), (1, 1), [(1, 1), (1, 1)], 2 * y)
    return (dx ** 2).sum()
  eps, num = 1e-6, np.zeros_like(wn)
  for i in np.ndindex(wn.shape):
    wp, wm = wn.copy(), wn.copy()
    wp[i] += eps
    wm[i] -= eps
    num[i] = (f(xn, wp) - f(xn, wm)) / (2 * eps)
  x, w = Tensor(xn.astype(np.float32), requires_grad=True), Tensor(wn.astype(np.float32), requires_grad=True)
  y = x.conv2d(w, padding=1)
  gx, = (y * y).sum().gradient(x)
  g2w, = (gx * gx).sum().gradient(w)
  np.testing.assert_allclose(g2w.numpy(), num, rtol=2e-3, atol=2e-2)

def test_conv_grad_under_jit():
  rng = np.random.default_rng(3)
  wn = rng.standard_normal((4, 3, 3, 3))
  w = Tensor(wn.astype(np.float32), requires_grad=True)
  @Jit
  def step(x: Tensor) -> tuple[Tensor, Tensor]:
    x.requires_grad = True
    w.grad = None
    x.conv2d(w, stride=2, padding=1).square().sum().backward()
    assert x.grad is not None and w.grad is not None
    return x.grad.realize(), w.grad.realize()
  for i in range(4):
    xn = rng.standard_normal((2, 3, 7, 7))
    gx, gw = step(Tensor(xn.astype(np.float32)))
    y, _, _ = _ref(xn, wn, 1, (2, 2), (1, 1), [(1, 1), (1, 1)], np.zeros((2, 4, 4, 4)))
    _, dx_ref, dw_ref = _ref(xn, wn, 1, (2, 2), (1, 1), [(1, 1), (1, 1)], 2 * y)
    np.testing.assert_allclose(gx.numpy(), dx_ref, rtol=1e-4, atol=1e-3, err_msg=f"call {i}")
    np.testing.assert_allclose(gw.numpy(), dw_ref, rtol=1e-4, atol=1e-3, err_msg=f"call {i}")

@register_vjp("test_scaled_flip")
def _scaled_flip(ctx: UOp, inputs: tuple[UOp, ...], params: tuple) -> tuple[UOp | None, ...]:
  # a deliberately "wrong" rule (the flipped gradient times a scale) so the test sees the rule, not the chain rule, ran
  return (ctx.flip((True,)) * ctx.const_like(params[0]),)

def test_custom_vjp_rule():
  xn = np.arange(5, dtype=np.float32)
  x = Tensor(xn, requires_grad=True)
  y = Tensor._wrap(custom_vjp((x.detach() * 2).uop, "test_scaled_flip", (3.0,), x.uop), x)
  (y * Tensor(np.arange(5, dtype=np.float32) + 1)).sum().backward()
  np.testing.assert_array_equal(y.numpy(), xn * 2)
  assert x.grad is not None
  np.testing.assert_array_equal(x.grad.numpy(), (np.arange(5, dtype=np.float32) + 1)[::-1] * 3)
