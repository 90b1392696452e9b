"""conv2d's graph built on UOps (conv._conv_uops) or replayed from its plan (plans.replayed), and pooling windows replayed from a
plan (conv._windows) make the nodes the Tensor ops and the window algebra make (hash-consing: the same objects), with the same
values and gradients."""
import numpy as np
import pytest
import core.tensor.conv as C
from core.tensor import plans
from core.tensor import Tensor

CONVS = [  # (input, weight, conv2d's keywords)
  ((4, 32, 6, 6), (16, 32, 1, 1), {}),
  ((2, 8, 9, 9), (8, 8, 3, 3), {"padding": 1}),
  ((2, 3, 20, 20), (8, 3, 7, 7), {"stride": 2, "padding": 3}),
  ((2, 12, 8, 8), (12, 1, 3, 3), {"groups": 12, "padding": 1}),
  ((2, 8, 9, 9), (8, 1, 3, 3), {"groups": 8, "stride": 2, "padding": 1}),
  ((2, 8, 10, 10), (8, 2, 3, 3), {"groups": 4, "padding": (1, 2)}),
  ((2, 4, 8, 8), (8, 4, 3, 3), {"padding": (1, 0, 2, 1), "stride": (2, 1)}),
  ((2, 4, 9, 9), (4, 4, 2, 2), {"dilation": 2}),
  ((1, 3, 1, 1), (5, 3, 1, 1), {}),
  ((2, 4, 9), (6, 4, 3), {"padding": 2, "dilation": 2}),
  ((1, 2, 4, 4, 4), (4, 2, 3, 3, 3), {"padding": 1}),
  ((1, 200, 9, 10), (4, 200, 9, 10), {}),   # a reduction of 18000: split in two (reduce.SPLIT_REDUCE)
]

def _rand(shape: tuple, seed: int, dtype=np.float32, rg=None) -> Tensor:
  return Tensor(np.random.default_rng(seed).standard_normal(shape).astype(dtype), requires_grad=rg)

def _old_build(monkeypatch: pytest.MonkeyPatch, f):
  """f() with conv2d's Tensor ops and the window algebra (no plans): the builds before the fast paths."""
  with monkeypatch.context() as m:
    m.setattr(C, "_conv_uops", lambda *a: None)
    m.setattr(C, "_windows", C._windows_built)
    return f()

@pytest.mark.parametrize("xs, ws, kw", CONVS)
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("rg", [None, True, False])
def test_conv_builds_the_tensor_ops_nodes(monkeypatch: pytest.MonkeyPatch, xs: tuple, ws: tuple, kw: dict, bias: bool, rg) -> None:
  x, w = _rand(xs, 0, rg=rg), _rand(ws, 1, rg=rg)
  b = _rand(ws[:1], 2, rg=rg) if bias else None
  old = _old_build(monkeypatch, lambda: x.conv2d(w, b, **kw))
  C._window_plans.clear()
  plans._plans.clear()
  new, again = x.conv2d(w, b, **kw), x.conv2d(w, b, **kw)   # the plans made, then replayed
  assert new.uop is old.uop and again.uop is old.uop
  assert new.requires_grad == old.requires_grad
  # other inputs of the signature: the conv's plan replayed over them
  x2, w2 = _rand(xs, 5, rg=rg), _rand(ws, 6, rg=rg)
  b2 = _rand(ws[:1], 7, rg=rg) if bias else None
  assert x2.conv2d(w2, b2, **kw).uop is _old_build(monkeypatch, lambda: x2.conv2d(w2, b2, **kw)).uop

@pytest.mark.parametrize("dtype", [np.float16, np.float64])
def test_other_float_dtypes_build_the_same_nodes(monkeypatch: pytest.MonkeyPatch, dtype) -> None:
  x, w, b = _rand((2, 4, 8, 8), 0, dtype), _rand((8, 4, 3, 3), 1, dtype), _rand((8,), 2, dtype)
  old = _old_build(monkeypatch, lambda: x.conv2d(w, b, padding=1))
  assert x.conv2d(w, b, padding=1).uop is old.uop

def test_conv_makes_one_tensor(monkeypatch: pytest.MonkeyPatch) -> None:
  """The fast path wraps its result once: the Tensor ops made a dozen intermediate tensors (fails on the old build)."""
  x, w, b = _rand((2, 8, 9, 9), 0), _rand((8, 8, 3, 3), 1), _rand((8,), 2)
  made = []
  init = Tensor.__init__
  def counting(self, *a, **k):
    made.append(1)
    init(self, *a, **k)
  monkeypatch.setattr(Tensor, "__init__", counting)
  x.conv2d(w, b, padding=1)
  assert len(made) == 1

def test_fallbacks_keep_the_tensor_ops(monkeypatch: pytest.MonkeyPatch) -> None:
  """Mixed dtypes, a dtype argument, int tensors, a bias of another shape or negative padding: the Tensor ops, same values."""
  x, w = _rand((2, 4, 8, 8), 0), _rand((8, 4, 3, 3), 1)
  assert C._conv_uops(x, w.half(), None, 1, (1, 1), (1, 1), [(0, 0)] * 2, None) is None
  assert C._conv_uops(x, w, None, 1, (1, 1), (1, 1), [(0, 0)] * 2, "float32") is None
  assert C._conv_uops(x, w, _rand((1, 8, 1, 1), 2), 1, (1, 1), (1, 1), [(0, 0)] * 2, None) is None
  assert C._conv_uops(x, w, None, 1, (1, 1), (1, 1), [(-1, 0), (0, 0)], None) is None
  xi, wi = Tensor(np.arange(2 * 4 * 6 * 6).reshape(2, 4, 6, 6) % 5), Tensor(np.arange(8 * 4 * 9).reshape(8, 4, 3, 3) % 3)
  assert C._conv_uops(xi, wi, None, 1, (1, 1), (1, 1), [(0, 0)] * 2, None) is None
  np.testing.assert_array_equal(xi.conv2d(wi).numpy(), _np_conv(xi.numpy(), wi.numpy(), 1, (1, 1), (1, 1), [(0, 0)] * 2))

def _np_windows(xp: np.ndarray, ks: tuple, s: tuple, d: tuple, outs: tuple) -> np.ndarray:
  """(n, c, *outs, *ks) windows of the padded input."""
  nd = len(ks)
  out = np.zeros(xp.shape[:2] + tuple(outs) + tuple(ks), xp.dtype)
  for o in np.ndindex(*outs):
    for k in np.ndindex(*ks):
      out[(slice(None), slice(None)) + o + k] = xp[(slice(None), slice(None)) + tuple(o[i] * s[i] + k[i] * d[i] for i in range(nd))]
  return out

def _np_conv(x: np.ndarray, w: np.ndarray, groups: int, s: tuple, d: tuple, pads: list) -> np.ndarray:
  nd = w.ndim - 2
  xp = np.pad(x, [(0, 0), (0, 0)] + list(pads))
  outs = tuple((xp.shape[2 + i] - d[i] * (w.shape[2 + i] - 1) - 1) // s[i] + 1 for i in range(nd))
  win = _np_windows(xp, w.shape[2:], s, d, outs)
  n, cin = x.shape[:2]
  win = win.reshape(n, groups, cin // groups, -1, int(np.prod(w.shape[2:])))     # (n, g, c, P, K)
  wg = w.reshape(groups, w.shape[0] // groups, w.shape[1], -1)                     # (g, o, c, K)
  return np.einsum("ngcpk,gock->ngop", win, wg).reshape(n, w.shape[0], *outs)

@pytest.mark.parametrize("xs, ws, kw", [c for c in CONVS if c[0][1] < 100])
def test_conv_values_and_gradients_vs_numpy(xs: tuple, ws: tuple, kw: dict) -> None:
  x, w, b = _rand(xs, 0, np.float64, True), _rand(ws, 1, np.float64, True), _rand(ws[:1], 2, np.float64, True)
  nd, groups = len(ws) - 2, kw.get("groups", 1)
  s, d = C.make_tuple(kw.get("stride", 1), nd), C.make_tuple(kw.get("dilation", 1), nd)
  pads = C._padding(kw.get("padding", 0), nd)
  y = x.conv2d(w, b, **kw)
  ref = _np_conv(x.numpy(), w.numpy(), groups, s, d, pads) + b.numpy().reshape(1, -1, *([1] * nd))
  np.testing.assert_allclose(y.numpy(), ref, rtol=1e-10, atol=1e-10)
  g = np.random.default_rng(3).standard_normal(ref.shape)
  (y * Tensor(g)).sum().backward()
  # numerical-free reference: the conv is linear in x and in w, so each gradient is a product with the windows' layout
  xn, wn = x.numpy(), w.numpy()
  xp = np.pad(xn, [(0, 0), (0, 0)] + pads)
  win = _np_windows(xp, ws[2:], s, d, ref.shape[2:])                   # (n, c, *o, *k)
  n, cg, rc = xs[0], ws[1], ws[0] // groups
  winr = win.reshape(n, groups, cg, -1, int(np.prod(ws[2:])))
  gr = g.reshape(n, groups, rc, -1)
  dw = np.einsum("ngcpk,ngop->gock", winr, gr).reshape(ws)
  dwin = np.einsum("ngop,gock->ngcpk", gr, wn.reshape(groups, rc, cg, -1)).reshape(win.shape)
  dxp = np.zeros_like(xp)
  for o in np.ndindex(*ref.shape[2:]):
    for k in np.ndindex(*ws[2:]):
      at = (slice(None), slice(None)) + tuple(o[i] * s[i] + k[i] * d[i] for i in range(nd))
      dxp[at] += dwin[(slice(None), slice(None)) + o + k]
  dx = dxp[(slice(None), slice(None)) + tuple(slice(bb, bb + m) for (bb, _), m in zip(pads, xs[2:]))]
  np.testing.assert_allclose(w.grad.numpy(), dw, rtol=1e-9, atol=1e-9)
  np.testing.assert_allclose(x.grad.numpy(), dx, rtol=1e-9, atol=1e-9)
  np.testing.assert_allclose(b.grad.numpy(), g.sum(axis=(0, *range(2, 2 + nd))), rtol=1e-9, atol=1e-9)

@pytest.mark.parametrize("shape, k, s, d", [((2, 3, 9, 9), (3, 3), (1, 1), (1, 1)), ((2, 3, 9, 9), (3, 2), (2, 1), (1, 2)),
                                            ((4, 10), (4,), (3,), (1,)), ((1, 2, 5, 6, 7), (2, 3, 2), (1, 2, 1), (2, 1, 1))])
def test_window_plans_replay_the_built_nodes(shape: tuple, k: tuple, s: tuple, d: tuple) -> None:
  C._window_plans.clear()
  u = _rand(shape, 0).uop
  built = C._windows_built(u, len(shape), k, s, d)
  assert C._windows(u, len(shape), k, s, d) is built and len(C._window_plans) == 1
  assert C._windows(u, len(shape), k, s, d) is built
  # the plan is by shape: another input of the shape (and another dtype) gets its own nodes, as the algebra builds them
  v = _rand(shape, 1, np.float16).uop
  assert C._windows(v, len(shape), k, s, d) is C._windows_built(v, len(shape), k, s, d)

def test_pooling_values_with_plans() -> None:
  x = _rand((2, 3, 9, 9), 0)
  xn = x.numpy()
  for _ in range(2):   # the plan made, then replayed
    np.testing.assert_allclose(x.max_pool2d((3, 3), 2).numpy(), _np_windows(xn, (3, 3), (2, 2), (1, 1), (4, 4)).max(axis=(-2, -1)))
    np.testing.assert_allclose(x.avg_pool2d((2, 2), 1).numpy(), _np_windows(xn, (2, 2), (1, 1), (1, 1), (8, 8)).mean(axis=(-2, -1)),
                               rtol=1e-5, atol=1e-6)

def test_inputs_built_from_each_other_take_no_plan(monkeypatch: pytest.MonkeyPatch) -> None:
  """A weight that is x.detach() is the node the conv builds from x: a plan recorded over it would read the next weight where
  the builder detaches the next x. Such inputs (not distinct buffers) are built, no plan recorded or used."""
  x = _rand((4, 2, 3, 3), 0)
  plans._plans.clear()
  for w in (x.detach(), x, x.reshape(4, 2, 3, 3)):
    y = x.conv2d(w)
    assert y.uop is _old_build(monkeypatch, lambda: x.conv2d(w)).uop and not plans._plans
    np.testing.assert_allclose(y.numpy(), _np_conv(x.numpy(), x.numpy(), 1, (1, 1), (1, 1), [(0, 0)] * 2), rtol=1e-5, atol=1e-5)
  assert not plans.replayable([x.uop, x.detach().uop]) and not plans.replayable([x.uop, x.uop]) and plans.replayable([x.uop, _rand((3,), 1).uop])

def test_plans_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
  monkeypatch.setattr(plans, "PLANS", 3)
  plans._plans.clear()
  for n in range(1, 8):
    x, w = _rand((1, 2, n, n), n), _rand((4, 2, 1, 1), 0)
    assert x.conv2d(w).uop is _old_build(monkeypatch, lambda: x.conv2d(w)).uop
    assert len(plans._plans) <= 3
