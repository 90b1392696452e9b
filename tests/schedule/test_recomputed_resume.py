"""find_realize_points realizes reductions that two kernels would recompute one at a time, lowest first; after each it searches
on from the node after it (_recomputed_reduce's `start`): no node before it can qualify then, and it keeps the nodes two kernels
compute as the first search found them (`shared`): no node after it changes. Checked against a fresh search from the first
node at every step, on a small conv net's training graph (conv, batchnorm, pooling: many shared reductions), and
the step's loss against numpy (and its gradients against torch where it is installed: the core job has no torch)."""
import numpy as np
from core import Tensor
import core.schedule.realize_points as rp

def _conv(x: np.ndarray, w: np.ndarray) -> np.ndarray:
  # 3x3, padding 1, stride 1, float64
  win = np.lib.stride_tricks.sliding_window_view(np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1))), (3, 3), (2, 3))
  return np.einsum("nchwij,ocij->nohw", win, w.astype(np.float64))

def convnet_step(seed: int, sgd: bool) -> tuple[Tensor, Tensor, Tensor, tuple[np.ndarray, np.ndarray, np.ndarray]]:
  """A small conv net's training step (convs, batchnorm, pooling): its loss realized with the weights' gradients, or with their
  SGD updates (`sgd`); (loss, weight tensors, the numpy inputs)."""
  rng = np.random.default_rng(seed)
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
    assert tw1.grad is not None and tw2.grad is not None
    if sgd: Tensor.realize(loss, tw1.assign(tw1 - tw1.grad * 0.1), tw2.assign(tw2 - tw2.grad * 0.1))
    else: Tensor.realize(loss, tw1.grad, tw2.grad)
  return loss, tw1, tw2, (x, w1, w2)

def numpy_loss(x: np.ndarray, w1: np.ndarray, w2: np.ndarray) -> float:
  """convnet_step's loss in float64."""
  nh = _conv(x, w1)
  nd = nh - nh.mean((0, 2, 3), keepdims=True)
  nh = np.maximum(nd / np.sqrt((nd * nd).mean((0, 2, 3), keepdims=True) + 1e-5), 0)
  nh = np.maximum(_conv(nh, w2), 0).reshape(2, 4, 5, 2, 5, 2).max((3, 5))
  return float((nh * nh).mean())

def test_the_search_after_each_realized_reduction_finds_what_a_full_search_finds(monkeypatch):
  orig, resumed = rp._recomputed_reduce, []
  def checked(nodes, users, points, cost_of, start=0, shared=None):
    got = orig(nodes, users, points, cost_of, start, shared)
    if start:
      assert shared is not None   # the sets of the first search, kept
      full = orig(nodes, users, points, cost_of, 0)
      assert (got and got[0]) is (full and full[0])
      resumed.append(start)
    return got
  monkeypatch.setattr(rp, "_recomputed_reduce", checked)
  loss, tw1, tw2, (x, w1, w2) = convnet_step(0, sgd=False)
  assert resumed   # the graph realized more than one recomputed reduction
  np.testing.assert_allclose(loss.numpy(), numpy_loss(x, w1, w2), rtol=1e-4)
  try: import torch
  except ImportError: return
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
