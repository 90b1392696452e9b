"""A strided transposed conv (conv_transpose2d, and conv2d's input gradient) by output phases (conv._transposed_by_phase):
one conv for all phases or one per phase (PHASES_IN_ONE_CONV), no zero-stuffed input; results against a float64 numpy
reference that scatters one kernel tap at a time."""
import itertools
import numpy as np
import pytest
from core import Tensor
from core.ir.ops import Ops
from core.schedule.kernelize import create_schedule
import core.tensor.conv as conv

def _ref(x, w, groups, s, d, pads, op):
  """float64 conv_transpose: x[n, g*cin_g + c, i] * w[g*cin_g + c, o, j] lands at i*s + j*d - pad before."""
  nd = w.ndim - 2
  cin, rc, *ks = w.shape
  cin_g = cin // groups
  n = x.shape[2:]
  full = [(n[i] - 1) * s[i] + d[i] * (ks[i] - 1) + 1 + op[i] for i in range(nd)]
  y = np.zeros((x.shape[0], groups * rc, *full))
  for tap in itertools.product(*[range(k) for k in ks]):
    sl = tuple(slice(tap[i] * d[i], tap[i] * d[i] + (n[i] - 1) * s[i] + 1, s[i]) for i in range(nd))
    for g in range(groups):
      part = np.einsum("nc...,co->no...", x[:, g * cin_g:(g + 1) * cin_g], w[(slice(g * cin_g, (g + 1) * cin_g), slice(None)) + tap])
      y[(slice(None), slice(g * rc, (g + 1) * rc)) + sl] += part
  lens = [full[i] - op[i] - pads[i][0] - pads[i][1] + op[i] for i in range(nd)]
  return y[(slice(None), slice(None)) + tuple(slice(b, b + m) for (b, _), m in zip(pads, lens))]

CASES = [
  # (x shape, w shape (cin, cout/groups, *k), groups, stride, padding (per dim), output_padding)
  *[((2, 3, 5, 6), (3, 2, k, k), 1, (s, s), (p, p), (op, op)) for k, s in itertools.product((1, 3, 5, 7), (2, 3))
    for p in sorted({0, k // 2, k - 1}) for op in sorted({0, s - 1})],
  ((1, 4, 6, 7), (4, 3, 3, 3), 2, (2, 1), (1, 0), (1, 0)),          # groups, asymmetric strides
  ((2, 6, 5, 4), (6, 1, 3, 2), 6, (2, 3), (1, 1), (0, 2)),          # depthwise, asymmetric kernel
  ((1, 2, 7, 8), (2, 2, 4, 4), 1, (2, 2), (1, 2), (1, 0)),          # 4x4/2: no zero taps
  ((2, 3, 9), (3, 2, 5), 1, (3,), (2,), (1,)),                      # 1d
  ((1, 4, 4, 5, 3), (4, 2, 3, 1, 3), 2, (2, 2, 1), (1, 0, 1), (1, 0, 0)),   # 3d
  ((1, 2, 3, 3), (2, 2, 3, 3), 1, (3, 3), (4, 2), (2, 0)),          # the output starts in the pad past x's first phase
]

@pytest.mark.parametrize("one", [0.0, 1e9, None], ids=["per_phase", "one_conv", "rule"])
@pytest.mark.parametrize("xs,ws,groups,s,p,op", CASES)
def test_conv_transpose_by_phase_matches_numpy(monkeypatch, one, xs, ws, groups, s, p, op):
  if one is not None: monkeypatch.setattr(conv, "PHASES_IN_ONE_CONV", one)
  rng = np.random.default_rng(sum(xs) + sum(ws) + sum(s) + sum(p))
  x, w, b = rng.standard_normal(xs), rng.standard_normal(ws), rng.standard_normal(ws[1] * groups)
  nd = len(ws) - 2
  want = _ref(x, w, groups, s, (1,) * nd, [(v, v) for v in p], op) + b.reshape(-1, *([1] * nd))
  got = Tensor(x.astype(np.float32)).conv_transpose2d(Tensor(w.astype(np.float32)), Tensor(b.astype(np.float32)), groups=groups,
                                                      stride=s, padding=p, output_padding=op).numpy()
  assert got.shape == want.shape
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)

def test_dilated_keeps_the_stuffed_path_and_matches_numpy():
  rng = np.random.default_rng(3)
  x, w = rng.standard_normal((1, 2, 5, 6)), rng.standard_normal((2, 3, 3, 3))
  got = Tensor(x.astype(np.float32)).conv_transpose2d(Tensor(w.astype(np.float32)), stride=2, dilation=2, padding=1, output_padding=1)
  np.testing.assert_allclose(got.numpy(), _ref(x, w, 1, (2, 2), (2, 2), [(1, 1)] * 2, (1, 1)), rtol=1e-4, atol=1e-4)

@pytest.mark.parametrize("one", [0.0, 1e9], ids=["per_phase", "one_conv"])
@pytest.mark.parametrize("n,k,s,p", [(8, 3, 2, 1), (7, 3, 2, 1), (8, 1, 2, 0), (9, 5, 3, 2), (10, 7, 2, 3), (6, 2, 2, 0)])
def test_conv_input_grad_by_phase(monkeypatch, one, n, k, s, p):
  """conv2d's input gradient (output padding from the size the stride floors away) against the adjoint's numpy."""
  monkeypatch.setattr(conv, "PHASES_IN_ONE_CONV", one)
  rng = np.random.default_rng(n * k + s + p)
  xn, wn = rng.standard_normal((2, 3, n, n + 1)), rng.standard_normal((4, 3, k, k))
  x = Tensor(xn.astype(np.float32), requires_grad=True)
  y = x.conv2d(Tensor(wn.astype(np.float32)), stride=s, padding=p)
  g = rng.standard_normal(y.shape)
  (y * Tensor(g.astype(np.float32))).sum().backward()
  op = tuple(m - ((o - 1) * s - 2 * p + k) for m, o in zip(xn.shape[2:], y.shape[2:]))
  np.testing.assert_allclose(x.grad.numpy(), _ref(g, wn, 1, (s, s), (1, 1), [(p, p)] * 2, op), rtol=1e-4, atol=1e-4)

def test_conv_transpose_grads_by_phase():
  """Gradients through the phase path (its weight views and depth-to-space) for x and w: the adjoint of conv_transpose is
  a conv (dL/dx) and a correlation of x with dL/dy (dL/dw), both checked by the reference's linearity in x and in w."""
  rng = np.random.default_rng(5)
  xn, wn = rng.standard_normal((2, 4, 5, 6)), rng.standard_normal((4, 3, 3, 3))
  x, w = Tensor(xn.astype(np.float32), requires_grad=True), Tensor(wn.astype(np.float32), requires_grad=True)
  y = x.conv_transpose2d(w, groups=2, stride=2, padding=1, output_padding=1)
  g = rng.standard_normal(y.shape)
  (y * Tensor(g.astype(np.float32))).sum().backward()
  def loss(xv, wv): return float((_ref(xv, wv, 2, (2, 2), (1, 1), [(1, 1)] * 2, (1, 1)) * g).sum())
  dx = np.array([loss(e.reshape(xn.shape), wn) for e in np.eye(xn.size)]).reshape(xn.shape)
  dw = np.array([loss(xn, e.reshape(wn.shape)) for e in np.eye(wn.size)]).reshape(wn.shape)
  np.testing.assert_allclose(x.grad.numpy(), dx, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(w.grad.numpy(), dw, rtol=1e-4, atol=1e-4)

def _buffer_sizes(t: Tensor) -> list[int]:
  items, _, _ = create_schedule([t.uop])
  return [b.size for it in items if it.ast.op is Ops.SINK for b in it.bufs]

@pytest.mark.parametrize("one", [0.0, 1e9], ids=["per_phase", "one_conv"])
def test_no_zero_stuffed_buffer(monkeypatch, one):
  """No buffer of the schedule holds x zero-stuffed (4x its pixels for stride 2): the largest is about x padded by a tap."""
  monkeypatch.setattr(conv, "PHASES_IN_ONE_CONV", one)
  x = Tensor(np.ones((2, 8, 48, 48), np.float32)).realize()
  w = Tensor(np.ones((8, 2, 3, 3), np.float32)).realize()
  sizes = _buffer_sizes(x.conv_transpose2d(w, stride=2, padding=1, output_padding=1))
  assert max(sizes) <= 2 * 8 * 50 * 50, sizes   # stuffed and padded: 2 * 8 * 98 * 98

def test_output_past_x_keeps_the_stuffed_path_and_matches_numpy():
  """A pad before of s*n or more: the output starts where no phase reads x (the stuffed path, which gives zeros and the
  taps past x's end)."""
  rng = np.random.default_rng(4)
  x, w = rng.standard_normal((1, 2, 2, 3)), rng.standard_normal((2, 3, 3, 3))
  got = Tensor(x.astype(np.float32)).conv_transpose2d(Tensor(w.astype(np.float32)), stride=2, padding=(1, 1, 4, 0))
  np.testing.assert_allclose(got.numpy(), _ref(x, w, 1, (2, 2), (1, 1), [(4, 0), (1, 1)], (0, 0)), rtol=1e-4, atol=1e-4)

@pytest.mark.parametrize("n,phase", [(14, 14), (7, 7), (5, 5)])
def test_phase_convs_compute_their_own_outputs(monkeypatch, n, phase):
  """A 3x3/2's input gradient (output 2n) per phase: each phase conv computes the n outputs of its output phase, odd counts too
  (7, not 8: a quarter more FMAs), not n + 1 over a range common to all (15 of 28, whose rows pad past whole vectors)."""
  monkeypatch.setattr(conv, "PHASES_IN_ONE_CONV", 0.0)
  x = Tensor(np.ones((1, 6, n, n), np.float32)).realize()
  w = Tensor(np.ones((6, 4, 3, 3), np.float32)).realize()
  items, _, _ = create_schedule([x.conv_transpose2d(w, stride=2, padding=1, output_padding=1).uop])
  outs = [it.bufs[0].size for it in items if it.ast.op is Ops.SINK]
  assert outs.count(4 * phase * phase) == 4, outs
