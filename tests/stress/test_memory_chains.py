"""Stress: long chains with .contiguous() (memory planner reuse), many live intermediates, buffer reuse across realizes."""
from __future__ import annotations
import numpy as np
from core import Tensor

def test_long_contiguous_chain():
  a = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
  t, n = Tensor(a), a.copy()
  for i in range(30):
    t = (t * 0.9 + i).contiguous().T
    n = (n * np.float32(0.9) + np.float32(i)).T
  np.testing.assert_allclose(t.numpy(), n, rtol=1e-5, atol=1e-3)

def test_chain_with_branches_kept_alive():
  a = np.random.default_rng(1).standard_normal((128,)).astype(np.float32)
  t, n = Tensor(a), a.copy()
  keep_t, keep_n = [], []
  for i in range(12):
    t = (t.flip(0) + 1).contiguous()
    n = n[::-1] + 1
    if i % 3 == 0:
      keep_t.append(t * 2)
      keep_n.append(n * 2)
  out = keep_t[0]
  for k in keep_t[1:]: out = out + k
  np.testing.assert_allclose(out.numpy(), sum(keep_n), rtol=1e-5)
  for kt, kn in zip(keep_t, keep_n): np.testing.assert_allclose(kt.numpy(), kn, rtol=1e-6)

def test_reductions_between_contiguous():
  a = np.random.default_rng(2).standard_normal((32, 48)).astype(np.float32)
  t = Tensor(a)
  x = (t - t.mean(1, keepdim=True)).contiguous()
  y = (x / (x.square().mean(1, keepdim=True) + 1e-5).sqrt()).contiguous()
  z = (y @ y.T).contiguous().relu().sum(0).contiguous()
  nx = a - a.mean(1, keepdims=True)
  ny = nx / np.sqrt((nx ** 2).mean(1, keepdims=True) + 1e-5)
  nz = np.maximum(ny @ ny.T, 0).sum(0)
  np.testing.assert_allclose(z.numpy(), nz, rtol=1e-4, atol=1e-3)

def test_many_outputs_one_realize():
  a = np.random.default_rng(3).standard_normal((16, 16)).astype(np.float32)
  t = Tensor(a)
  outs = [(t * i).contiguous().sum(i % 2) + i for i in range(10)]
  Tensor.realize(*outs)
  for i, o in enumerate(outs): np.testing.assert_allclose(o.numpy(), (a * i).sum(i % 2) + i, rtol=1e-5, atol=1e-5)

def test_same_graph_twice_gives_separate_buffers():
  a = np.ones(8, np.float32)
  x = (Tensor(a) + 1).contiguous().realize()
  y = (Tensor(a) + 1).contiguous().realize()
  x.assign(x * 10).realize()
  np.testing.assert_equal(y.numpy(), np.full(8, 2, np.float32))
  np.testing.assert_equal(x.numpy(), np.full(8, 20, np.float32))

def test_intermediate_shared_by_two_realizes():
  a = np.random.default_rng(4).standard_normal(50).astype(np.float32)
  mid = (Tensor(a).exp() + 1).contiguous()
  r1 = (mid * 2).sum()
  r2 = (mid - 1).max()
  np.testing.assert_allclose(r1.numpy(), ((np.exp(a) + 1) * 2).sum(), rtol=1e-5)
  np.testing.assert_allclose(r2.numpy(), (np.exp(a)).max(), rtol=1e-5)
  np.testing.assert_allclose(mid.numpy(), np.exp(a) + 1, rtol=1e-5)

def test_big_elementwise_and_reduce():
  a = np.random.default_rng(5).standard_normal((512, 1024)).astype(np.float32)
  t = Tensor(a)
  r = ((t * 2).contiguous() + t.flip(1)).contiguous().sum(1)
  np.testing.assert_allclose(r.numpy(), (a * 2 + a[:, ::-1]).sum(1), rtol=1e-4, atol=1e-3)

def test_cat_stack_split_roundtrip():
  rng = np.random.default_rng(6)
  xs = [rng.standard_normal((2, k)).astype(np.float32) for k in (1, 3, 5)]
  c = Tensor.cat(*[Tensor(x) for x in xs], dim=1)
  np.testing.assert_equal(c.numpy(), np.concatenate(xs, 1))
  parts = c.split([1, 3, 5], dim=1)
  for p, x in zip(parts, xs): np.testing.assert_equal(p.numpy(), x)
  s = Tensor.stack(*[Tensor(x[:, :1]) for x in xs], dim=0)
  np.testing.assert_equal(s.numpy(), np.stack([x[:, :1] for x in xs]))
