"""Creation and random ops: constructors against numpy, threefry against its published known-answer vectors, and the
statistics and determinism of rand/randn/randint."""
from __future__ import annotations
import numpy as np
import pytest
from core.tensor.tensor import Tensor
from core.tensor.random import threefry2x32
from core.ir.dtype import dtypes
from core.testing.helpers import scaled

def test_from_python_and_numpy():
  assert Tensor(3.5).shape == () and Tensor(3.5).item() == 3.5
  assert Tensor(2).dtype is dtypes.int32 and Tensor(True).dtype is dtypes.bool
  np.testing.assert_equal(Tensor([[1, 2], [3, 4]]).numpy(), [[1, 2], [3, 4]])
  assert Tensor([1.0, 2]).dtype is dtypes.float32
  assert Tensor([1, 2], dtype=dtypes.float16).dtype is dtypes.float16
  for dt in (np.float32, np.int8, np.uint16, np.int64, np.bool_, np.float64):
    a = (np.arange(6).reshape(2, 3) % 2).astype(dt)
    t = Tensor(a)
    assert t.numpy().dtype == a.dtype
    np.testing.assert_equal(t.numpy(), a)
  assert Tensor(np.zeros((0, 3), np.float32)).shape == (0, 3)
  assert Tensor([]).shape == (0,)
  np.testing.assert_equal(Tensor(b"\x01\x02\xff").numpy(), [1, 2, 255])
  np.testing.assert_allclose(Tensor([1.5, -2.25], dtype=dtypes.bfloat16).numpy(), [1.5, -2.25])
  with pytest.raises(ValueError, match="ragged"): Tensor([[1, 2], [3]])

def test_full_zeros_ones_empty():
  np.testing.assert_equal(Tensor.zeros(2, 3).numpy(), np.zeros((2, 3)))
  np.testing.assert_equal(Tensor.ones((2, 3), dtype=dtypes.int8).numpy(), np.ones((2, 3), np.int8))
  np.testing.assert_equal(Tensor.full((2, 2), 7).numpy(), np.full((2, 2), 7))
  assert Tensor.full((2,), 7).dtype is dtypes.int32 and Tensor.full((2,), 7.0).dtype is dtypes.float32
  assert Tensor.empty(3, 4).shape == (3, 4) and Tensor.empty(0).numel() == 0
  t = Tensor([[1, 2]], dtype=dtypes.int16)
  assert t.zeros_like().dtype is dtypes.int16 and t.ones_like().numpy().tolist() == [[1, 1]]
  assert t.full_like(5).tolist() == [[5, 5]] and t.empty_like().shape == (1, 2)

@pytest.mark.parametrize("args", [(5,), (0,), (2, 9), (10, 0, -3), (0.5, 3.0, 0.7), (-4, 4, 2), (300,), (1000, 0, -7)], ids=str)
def test_arange(args):
  want = np.arange(*args)
  got = Tensor.arange(*args).numpy()
  np.testing.assert_allclose(got, want, rtol=1e-6)
  assert Tensor.arange(*args).dtype is (dtypes.float32 if any(isinstance(a, float) for a in args) else dtypes.int32)

def test_linspace_eye():
  np.testing.assert_allclose(Tensor.linspace(-1, 2, 7).numpy(), np.linspace(-1, 2, 7), rtol=1e-6, atol=1e-7)
  np.testing.assert_allclose(Tensor.linspace(0, 1, 1).numpy(), [0.0])
  for n, m in [(3, None), (2, 4), (4, 2), (1, None), (0, None)]:
    np.testing.assert_equal(Tensor.eye(n, m).numpy(), np.eye(n, m))

# Random123 known-answer vectors for threefry2x32 with 20 rounds: (key, counter) -> output
KAT = [((0, 0), (0, 0), (0x6b200159, 0x99ba4efe)),
       ((0xffffffff, 0xffffffff), (0xffffffff, 0xffffffff), (0x1cb996fc, 0xbb002be7)),
       ((0x13198a2e, 0x03707344), (0x243f6a88, 0x85a308d3), (0xc4923a9c, 0x483df7a0))]

@pytest.mark.parametrize("key,ctr,want", KAT)
def test_threefry_known_answers(key, ctr, want):
  assert threefry2x32(ctr[0], ctr[1], key[0], key[1]) == want
  x0 = Tensor([ctr[0]], dtype=dtypes.uint32)
  got = threefry2x32(x0, x0._const(ctr[1]), key[0], key[1])
  assert (got[0].item(), got[1].item()) == want

def test_rand_deterministic_and_counter_based():
  Tensor.manual_seed(42)
  a, b = Tensor.rand(100).numpy(), Tensor.rand(100).numpy()
  Tensor.manual_seed(42)
  a2, b2 = Tensor.rand(100).numpy(), Tensor.rand(100).numpy()
  np.testing.assert_equal(a, a2)
  np.testing.assert_equal(b, b2)
  assert not np.array_equal(a, b)
  Tensor.manual_seed(43)
  assert not np.array_equal(Tensor.rand(100).numpy(), a)

def test_rand_matches_host_threefry():
  """The graph version gives exactly the words the plain-int threefry gives (no device-specific randomness)."""
  Tensor.manual_seed(7)
  got = Tensor.rand(5).numpy()
  words = [threefry2x32(i, 0, 7, 0) for i in range(3)]
  bits = np.array([x for w in words for x in w], dtype=np.uint32)[:5]   # block i gives words 2i and 2i+1
  want = ((bits >> 9) | 0x3F800000).view(np.float32) - 1.0
  np.testing.assert_equal(got, want)

def test_rand_stats():
  Tensor.manual_seed(0)
  n = scaled(20000, 2000)
  u = Tensor.rand(n).numpy()
  assert u.min() >= 0 and u.max() < 1 and abs(u.mean() - 0.5) < 0.02 and abs(u.var() - 1 / 12) < 0.01
  z = Tensor.randn(n).numpy()
  assert abs(z.mean()) < 0.05 and abs(z.std() - 1) < 0.05
  r = Tensor.randint(n, low=-3, high=4).numpy()
  assert r.min() == -3 and r.max() == 3 and r.dtype == np.int32
  v = Tensor.uniform(n, low=2, high=5).numpy()
  assert v.min() >= 2 and v.max() < 5 and abs(v.mean() - 3.5) < 0.05
  w = Tensor.normal(n, mean=3, std=2).numpy()
  assert abs(w.mean() - 3) < 0.1 and abs(w.std() - 2) < 0.1
  assert Tensor.rand(2, 3, dtype=dtypes.float16).dtype is dtypes.float16
  assert Tensor.rand(0, 3).shape == (0, 3)

def test_init_bounds():
  Tensor.manual_seed(1)
  k = Tensor.kaiming_uniform(64, 32, a=0.0).numpy()
  bound = np.sqrt(2.0) * np.sqrt(3.0 / 32)
  assert np.abs(k).max() <= bound and np.abs(k).max() > 0.9 * bound
  g = Tensor.glorot_uniform(16, 48).numpy()
  assert np.abs(g).max() <= np.sqrt(6 / 64) and np.abs(g).max() > 0.9 * np.sqrt(6 / 64) and g.min() < 0 < g.max()
  s = Tensor.scaled_uniform(10, 10).numpy()
  assert np.abs(s).max() <= 0.1 and np.abs(s).max() > 0.09 and s.min() < 0 < s.max()
  assert Tensor.randn_like(Tensor.ones(2, 2)).shape == (2, 2) and Tensor.rand_like(Tensor.ones(3)).shape == (3,)
  # the *_like draws are the plain draws of the same shape and dtype: the same numbers after the same seed
  Tensor.manual_seed(5)
  like = Tensor.randn_like(Tensor.ones(2, 2)).numpy(), Tensor.rand_like(Tensor.ones(3, dtype=dtypes.float16)).numpy()
  Tensor.manual_seed(5)
  np.testing.assert_array_equal(like[0], Tensor.randn(2, 2).numpy())
  np.testing.assert_array_equal(like[1], Tensor.rand(3, dtype=dtypes.float16).numpy())
  assert like[1].dtype == np.float16 and len(np.unique(like[0])) == 4

def test_dropout():
  x = Tensor.ones(1000)
  np.testing.assert_equal(x.dropout(0.5).numpy(), np.ones(1000))  # not training: identity
  with Tensor.train():
    assert Tensor.training
    y = x.dropout(0.25).numpy()
  assert not Tensor.training
  assert set(np.unique(y)) <= {0.0, np.float32(1 / 0.75)} and 0.15 < (y == 0).mean() < 0.35
