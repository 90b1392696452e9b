"""find_realize_points realizes reductions that two kernels would recompute one at a time, lowest first; after each it searches
on from the node after it (_recomputed_reduce's `start`): no node before it can qualify then. Checked against the search from
the first node at every step, on a small conv net's training graph (conv, batchnorm, pooling: many shared reductions), and
the step's values against numpy."""
import numpy as np
from core import Tensor
import core.schedule.realize_points as rp

def test_the_search_after_each_realized_reduction_finds_what_a_full_search_finds(monkeypatch):
  orig, resumed = rp._recomputed_reduce, []
  def checked(nodes, users, points, cost_of, start=0):
    got = orig(nodes, users, points, cost_of, start)
    if start:
      full = orig(nodes, users, points, cost_of, 0)
      assert (got and got[0]) is (full and full[0])
      resumed.append(start)
    return got
  monkeypatch.setattr(rp, "_recomputed_reduce", checked)
  rng = np.random.default_rng(0)
  x = rng.standard_normal((2, 3, 10, 10)).astype(np.float32)
  w1 = rng.standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.3
  w2 = rng.standard_normal((4, 4, 3, 3)).astype(np.float32) * 0.3
  tw1, tw2 = Tensor(w1, requires_grad=True), Tensor(w2, requires_grad=True)
  with Tensor.train():
    h = Tensor(x).conv2d(tw1, padding=1)
    d = h - h.mean((0, 2, 3), keepdim=True)
    h = (d / ((d * d).mean((0, 2, 3), keepdim=True) + 1e-5).sqrt()).relu()
    h = h.conv2d(tw2, padding=1).relu().max_pool2d(2)
    loss = (h * h).mean()
    loss.backward()
    Tensor.realize(loss, tw1.grad, tw2.grad)
  assert resumed   # the graph realized more than one recomputed reduction
  import torch
  tx, t1, t2 = torch.tensor(x), torch.tensor(w1, requires_grad=True), torch.tensor(w2, requires_grad=True)
  th = torch.nn.functional.conv2d(tx, t1, padding=1)
  td = th - th.mean((0, 2, 3), keepdim=True)
  th = (td / ((td * td).mean((0, 2, 3), keepdim=True) + 1e-5).sqrt()).relu()
  th = torch.nn.functional.max_pool2d(torch.nn.functional.conv2d(th, t2, padding=1).relu(), 2)
  tl = (th * th).mean()
  tl.backward()
  np.testing.assert_allclose(loss.numpy(), tl.detach().numpy(), rtol=1e-4)
  np.testing.assert_allclose(tw1.grad.numpy(), t1.grad.numpy(), rtol=1e-3, atol=1e-5)
  np.testing.assert_allclose(tw2.grad.numpy(), t2.grad.numpy(), rtol=1e-3, atol=1e-5)
