"""find_realize_points forgets, at each point it adds one at a time, only the costs known above that point (_realize), not all
of them: the points it finds are those it finds when every cost is computed again after each. Checked on a small conv net's
training step (convs, batchnorm, pooling, an SGD update: points added by every rule), its loss against numpy."""
import numpy as np
from core import Tensor
import core.schedule.realize_points as rp

def _forget_all(p, points, cost, users):
  points.add(p)
  cost.clear()

def test_points_equal_those_found_with_every_cost_recomputed(monkeypatch):
  seen, kept = [], []
  orig_find, orig_realize = rp.find_realize_points, rp._realize
  def counting(p, points, cost, users):
    orig_realize(p, points, cost, users)
    kept.append(len(cost))   # the costs it kept
  def checked(sink, fuse_rows=lambda device: True):
    got = orig_find(sink, fuse_rows)
    monkeypatch.setattr(rp, "_realize", _forget_all)
    try: want = orig_find(sink, fuse_rows)
    finally: monkeypatch.setattr(rp, "_realize", counting)
    assert got == want
    seen.append(len(got))
    return got
  monkeypatch.setattr(rp, "_realize", counting)
  import core.schedule.kernelize as kz
  monkeypatch.setattr(kz, "find_realize_points", checked)
  rng = np.random.default_rng(1)
  x = rng.standard_normal((2, 3, 10, 10)).astype(np.float32)
  w1 = (rng.standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float32)
  w2 = (rng.standard_normal((4, 4, 3, 3)) * 0.3).astype(np.float32)
  tw1, tw2 = Tensor(w1, requires_grad=True), Tensor(w2, requires_grad=True)
  with Tensor.train():
    h = Tensor(x).conv2d(tw1, padding=1)
    d = h - h.mean((0, 2, 3), keepdim=True)
    h = (d / ((d * d).mean((0, 2, 3), keepdim=True) + 1e-5).sqrt()).relu()
    h = h.conv2d(tw2, padding=1).relu().max_pool2d(2)
    loss = (h * h).mean()
    loss.backward()
    Tensor.realize(loss, tw1.assign(tw1 - tw1.grad * 0.1), tw2.assign(tw2 - tw2.grad * 0.1))
  assert seen and any(kept)   # some costs were kept past a point added (else the two runs are one)
  def conv(a, w):
    win = np.lib.stride_tricks.sliding_window_view(np.pad(a.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1))), (3, 3), (2, 3))
    return np.einsum("nchwij,ocij->nohw", win, w.astype(np.float64))
  nh = conv(x, w1)
  nd = nh - nh.mean((0, 2, 3), keepdims=True)
  nh = np.maximum(nd / np.sqrt((nd * nd).mean((0, 2, 3), keepdims=True) + 1e-5), 0)
  nh = np.maximum(conv(nh, w2), 0).reshape(2, 4, 5, 2, 5, 2).max((3, 5))
  np.testing.assert_allclose(loss.numpy(), (nh * nh).mean(), rtol=1e-4)
