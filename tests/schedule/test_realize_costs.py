"""find_realize_points forgets, at each point it adds one at a time, only the costs known above that point (_realize), not all
of them: the points it finds are those it finds when every cost is computed again after each. Checked on a small conv net's
training step (convs, batchnorm, pooling, an SGD update: points added by every rule), its loss against numpy."""
import numpy as np
import core.schedule.realize_points as rp
from tests.schedule.test_recomputed_resume import convnet_step, numpy_loss

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
  loss, _, _, inputs = convnet_step(1, sgd=True)
  assert seen and any(kept)   # some costs were kept past a point added (else the two runs are one)
  np.testing.assert_allclose(loss.numpy(), numpy_loss(*inputs), rtol=1e-4)
