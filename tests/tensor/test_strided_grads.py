"""Gradients of strided windows: max pooling's input gradient (conv._max_pool_grad, a gather from the windows over each input
element) and a strided conv's weight gradient by phases (conv._weight_grad_by_phase, the 7x7 stride-2 stem), against numpy
in float64, and the kernels they schedule."""
from __future__ import annotations
import itertools
import numpy as np
import pytest
from core import Tensor
from core.schedule.kernelize import create_schedule
from core.tensor import conv

rng = np.random.default_rng(23)

def _pool_out(n: int, k: int, s: int, d: int, pb: int, pa: int, ceil: bool) -> tuple[int, int]:
  """(output size, extra right padding) of one pooled dim, torch's rule for ceil_mode."""
  span, total = d * (k - 1) + 1, n + pb + pa
  o = (-(-(total - span) // s) if ceil else (total - span) // s) + 1
  if ceil and (o - 1) * s >= n + pb: o -= 1
  return o, max(0, (o - 1) * s + span - total)

def _max_pool_ref(x: np.ndarray, g: np.ndarray, k: tuple, s: tuple, d: tuple, p: tuple, ceil: bool) -> tuple[np.ndarray, np.ndarray]:
  """(max_pool output, input gradient of sum(out * g)) with each window's gradient split evenly over its maxima."""
  nd = len(k)
  sp = x.shape[-nd:]
  dims = [_pool_out(n, ki, si, di, pi, pi, ceil) for n, ki, si, di, pi in zip(sp, k, s, d, p)]
  xp = np.pad(x.astype(np.float64), [(0, 0)] * (x.ndim - nd) + [(pi, pi + extra) for pi, (_, extra) in zip(p, dims)], constant_values=-np.inf)
  out, dxp = np.full(x.shape[:-nd] + tuple(o for o, _ in dims), -np.inf), np.zeros_like(xp)
  for o in itertools.product(*[range(o) for o, _ in dims]):
    idx = tuple(slice(oi * si, oi * si + di * (ki - 1) + 1, di) for oi, si, di, ki in zip(o, s, d, k))
    win = xp[(...,) + idx]
    best = win.reshape(win.shape[:-nd] + (-1,)).max(-1).reshape(win.shape[:-nd] + (1,) * nd)
    hit = win == best
    out[(...,) + o] = best.reshape(best.shape[:-nd])
    share = g[(...,) + o].astype(np.float64) / hit.reshape(hit.shape[:-nd] + (-1,)).sum(-1)
    dxp[(...,) + idx] += hit * share.reshape(share.shape + (1,) * nd)
  return out, dxp[(...,) + tuple(slice(pi, pi + n) for pi, n in zip(p, sp))]

POOLS = [  # (input shape, kernel, stride, dilation, padding, ceil_mode)
  ((2, 3, 11, 9), (3, 3), (2, 2), (1, 1), (1, 1), False),    # ResNet's pooling at odd sizes
  ((1, 2, 8, 8), (2, 2), (2, 2), (1, 1), (0, 0), False),     # windows that do not overlap
  ((2, 2, 10, 7), (3, 3), (2, 2), (1, 1), (1, 1), True),     # ceil_mode: a last window past the padding
  ((1, 2, 9, 9), (3, 3), (1, 1), (2, 2), (1, 1), False),     # dilation 2, stride 1
  ((1, 1, 13, 12), (3, 2), (2, 3), (1, 1), (1, 0), True),    # a different kernel, stride and padding per dim
  ((2, 3, 17), (3,), (2,), (1,), (1,), False),                # 1-d
  ((1, 2, 7, 6, 5), (2, 2, 2), (2, 2, 2), (1, 1, 1), (0, 1, 1), False),   # 3-d
]

@pytest.mark.parametrize("shape, k, s, d, p, ceil", POOLS)
def test_max_pool_grad_matches_numpy(shape, k, s, d, p, ceil):
  # a ReLU's output: windows of zeros tie, and each tied position gets an even share of the window's gradient
  x = np.maximum(rng.standard_normal(shape), 0).astype(np.float32)
  tx = Tensor(x, requires_grad=True)
  out = tx.max_pool2d(k, s, d, p, ceil)
  g = rng.standard_normal(out.shape).astype(np.float32)
  (out * Tensor(g)).sum().backward()
  assert tx.grad is not None
  want_out, want_dx = _max_pool_ref(x, g, k, s, d, p, ceil)
  np.testing.assert_array_equal(out.numpy(), want_out)
  np.testing.assert_allclose(tx.grad.numpy(), want_dx, rtol=1e-5, atol=1e-6)

def test_max_pool_grad_of_a_computed_input_and_twice():
  # the rule's input is an expression (a ReLU) and the gradient flows on into it; a second-order use sees the same values
  x = rng.standard_normal((2, 2, 9, 9)).astype(np.float32)
  tx = Tensor(x, requires_grad=True)
  out = (tx * 2).relu().max_pool2d(3, 2, padding=1)
  g = rng.standard_normal(out.shape).astype(np.float32)
  (out * Tensor(g)).sum().backward()
  assert tx.grad is not None
  _, want = _max_pool_ref(np.maximum(2 * x, 0), g, (3, 3), (2, 2), (1, 1), (1, 1), False)
  np.testing.assert_allclose(tx.grad.numpy(), want * 2 * (x > 0), rtol=1e-5, atol=1e-6)

def test_max_pool_grad_kernels():
  # three kernels: the windows' maxima, their gradient shares (output-sized), and dx gathered from them; the chain rule through
  # the windows' tiled rows summed them back through intermediates bigger than the output (one per pooled dim)
  x, g = Tensor(rng.standard_normal((2, 4, 12, 10)).astype(np.float32)).realize(), Tensor(rng.standard_normal((2, 4, 6, 5)).astype(np.float32)).realize()
  tx = x.detach().requires_grad_(True)
  (dx,) = (tx.max_pool2d(3, 2, padding=1) * g).sum().gradient(tx)
  items, _, _ = create_schedule([dx.uop])
  assert [it.bufs[0].size for it in items] == [g.numel(), g.numel(), x.numel()], [it.ast.arg for it in items]

def _conv_dw_ref(x: np.ndarray, w: np.ndarray, g: np.ndarray, s: int, p: int, groups: int) -> np.ndarray:
  """dL/dw of L = sum(conv(x, w) * g) for any number of spatial dims, in float64."""
  nd = x.ndim - 2
  o, cg, *ks = w.shape
  xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0)] + [(p, p)] * nd)
  win = np.lib.stride_tricks.sliding_window_view(xp, tuple(ks), axis=tuple(range(2, 2 + nd)))[(slice(None), slice(None)) + (slice(None, None, s),) * nd]
  win = win[(slice(None), slice(None)) + tuple(slice(0, n) for n in g.shape[2:])]
  n = x.shape[0]
  gg = g.astype(np.float64).reshape(n, groups, o // groups, -1)
  wv = win.reshape(n, groups, cg, -1, int(np.prod(ks)))
  return np.einsum("ngop,ngcpk->gock", gg, wv).reshape(w.shape)

PHASE_CASES = [  # (input shape, weight shape, stride, padding, groups)
  ((2, 3, 21, 19), (8, 3, 7, 7), 2, 3, 1),   # the stem at odd sizes
  ((1, 3, 16, 16), (4, 3, 7, 7), 2, 0, 1),   # no padding, an even size
  ((2, 4, 15, 13), (8, 2, 7, 7), 2, 3, 2),   # groups
  ((1, 2, 40, 37), (4, 2, 11, 11), 4, 2, 1),  # AlexNet-like 11x11 stride 4
  ((2, 3, 33), (6, 3, 7), 2, 3, 1),          # 1-d
]

@pytest.mark.parametrize("xs, ws, s, p, groups", PHASE_CASES)
def test_weight_grad_by_phase_matches_numpy(xs, ws, s, p, groups):
  x, w = rng.standard_normal(xs).astype(np.float32), rng.standard_normal(ws).astype(np.float32)
  tx, tw = Tensor(x, requires_grad=True), Tensor(w, requires_grad=True)
  y = tx.conv2d(tw, stride=s, padding=p, groups=groups)
  g = rng.standard_normal(y.shape).astype(np.float32)
  (y * Tensor(g)).sum().backward()
  assert tw.grad is not None
  np.testing.assert_allclose(tw.grad.numpy(), _conv_dw_ref(x, w, g, s, p, groups), rtol=1e-4, atol=1e-3)

def test_weight_grad_by_phase_only_where_little_is_wasted(monkeypatch):
  # by phases for 7x7/2 ((8/7)^2 the products) and 11x11/4; a 3x3/2 (16/9) or a 1x1/2 (4x) keep the one strided product
  calls: list[tuple] = []
  by_phase = conv._weight_grad_by_phase
  monkeypatch.setattr(conv, "_weight_grad_by_phase", lambda *a: calls.append(a[2].shape) or by_phase(*a))
  for ws, s in [((4, 3, 7, 7), 2), ((4, 3, 11, 11), 4), ((4, 3, 3, 3), 2), ((4, 3, 1, 1), 2), ((4, 3, 7, 7), 1)]:
    tw = Tensor(rng.standard_normal(ws).astype(np.float32), requires_grad=True)
    Tensor(rng.standard_normal((1, 3, 24, 24)).astype(np.float32)).conv2d(tw, stride=s).sum().gradient(tw)
  assert calls == [(4, 3, 7, 7), (4, 3, 11, 11)]
