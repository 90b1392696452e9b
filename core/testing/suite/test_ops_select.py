"""Sorting and data-dependent selection against numpy: sort/argsort/topk, scatter/scatter_reduce, masked_fill,
masked_select, nonzero and one_hot, with gradients where they are defined."""
from __future__ import annotations
import numpy as np
import pytest
from core.tensor.tensor import Tensor
from core.ir.dtype import dtypes
from core.testing.helpers import check_op, rng

@pytest.mark.parametrize("shape,dim", [((5,), 0), ((3, 6), 1), ((2, 3, 4), -2)], ids=str)
def test_sort_argsort(shape, dim):
  check_op([shape], lambda t: t.sort(dim)[0], lambda x: np.sort(x, dim))
  check_op([shape], lambda t: t.sort(dim, descending=True)[0], lambda x: -np.sort(-x, dim))
  x = rng(1).integers(0, 3, size=shape).astype(np.float32)   # ties: the sort is stable in both directions
  np.testing.assert_equal(Tensor(x).argsort(dim).numpy(), np.argsort(x, dim, kind="stable"))
  np.testing.assert_equal(Tensor(x).argsort(dim, descending=True).numpy(), np.argsort(-x, dim, kind="stable"))

def test_sort_special_values_and_dtypes():
  x = np.array([3, np.nan, -np.inf, 1, np.inf, 0], np.float32)
  v, i = Tensor(x).sort()
  np.testing.assert_equal(v.numpy(), np.sort(x))   # NaN last, like numpy and torch
  np.testing.assert_equal(i.numpy(), [2, 5, 3, 0, 4, 1])
  np.testing.assert_equal(Tensor(x).sort(descending=True)[0].numpy(), [np.nan, np.inf, 3, 1, 0, -np.inf])
  xi = np.array([5, -2**31, 2**31 - 1, 0, 2**31 - 1], np.int32)   # the extremes sort among the padding correctly
  np.testing.assert_equal(Tensor(xi).sort()[0].numpy(), np.sort(xi))
  np.testing.assert_equal(Tensor(xi).argsort(descending=True).numpy(), np.argsort(-xi.astype(np.int64), kind="stable"))
  v, i = Tensor([True, False, True]).sort()
  assert v.dtype is dtypes.bool and i.dtype is dtypes.int32
  np.testing.assert_equal(v.numpy(), [False, True, True])
  assert Tensor([2.0]).sort()[1].item() == 0 and Tensor.ones(3, 0).sort()[0].shape == (3, 0)

@pytest.mark.parametrize("k,largest", [(1, True), (3, True), (2, False), (6, False)], ids=str)
def test_topk(k, largest):
  check_op([(3, 6)], lambda t: t.topk(k, largest=largest)[0], lambda x: (-np.sort(-x, 1) if largest else np.sort(x, 1))[:, :k])
  x = rng(2).uniform(size=(6, 4)).astype(np.float32)
  order = np.argsort(-x if largest else x, 0, kind="stable")[:k]
  np.testing.assert_equal(Tensor(x).topk(k, dim=0, largest=largest)[1].numpy(), order)
  with pytest.raises(ValueError, match="topk: k=7 is out of range for dim 1 of size 4"): Tensor(x).topk(7)

def np_scatter_reduce(s, dim, idx, src, reduce, include_self=True):
  out = s.astype(np.float64).copy()
  seen = np.zeros(s.shape, bool)
  count = np.full(s.shape, 1.0 if include_self else 0.0)
  neutral = {"sum": 0.0, "mean": 0.0, "prod": 1.0, "amax": -np.inf, "amin": np.inf}[reduce]
  for pos in np.ndindex(*idx.shape):
    t = tuple(int(idx[pos]) if i == dim else p for i, p in enumerate(pos))
    if not include_self and not seen[t]: out[t] = neutral
    seen[t] = True
    count[t] += 1
    v = src[pos]
    out[t] = {"sum": out[t] + v, "mean": out[t] + v, "prod": out[t] * v, "amax": max(out[t], v), "amin": min(out[t], v)}[reduce]
  return out / np.maximum(count, 1) if reduce == "mean" else out

IDX0 = np.array([[0, 3, 1, 1], [1, 0, 1, 3], [3, 3, 0, 1]])   # scatter along dim 0 of a (4, 5) tensor, repeats included
IDX1 = np.array([[4, 0, 4], [2, 2, 1]])                        # along dim 1, index smaller than self outside dim 1

@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce(reduce, include_self):
  lo, hi = (0.5, 1.5) if reduce == "prod" else (-2, 2)
  check_op([(4, 5), (3, 6)], lambda s, src: s.scatter_reduce(0, Tensor(IDX0), src, reduce, include_self=include_self),
           lambda s, src: np_scatter_reduce(s, 0, IDX0, src, reduce, include_self), low=lo, high=hi)
  check_op([(3, 5), (2, 3)], lambda s, src: s.scatter_reduce(1, Tensor(IDX1), src, reduce, include_self=include_self),
           lambda s, src: np_scatter_reduce(s, 1, IDX1, src, reduce, include_self), low=lo, high=hi)

def test_scatter():
  def np_scatter(s, dim, idx, src):
    out = s.copy()
    for pos in np.ndindex(*idx.shape): out[tuple(int(idx[pos]) if i == dim else p for i, p in enumerate(pos))] = src[pos]
    return out
  check_op([(4, 5), (3, 6)], lambda s, src: s.scatter(0, Tensor(IDX0), src), lambda s, src: np_scatter(s, 0, IDX0, src))   # the last repeat wins
  check_op([(3, 5), (2, 4)], lambda s, src: s.scatter(1, Tensor(IDX1), src), lambda s, src: np_scatter(s, 1, IDX1, src))
  check_op([(3, 5)], lambda s: s.scatter(1, Tensor(IDX1), 2.5), lambda s: np_scatter(s, 1, IDX1, np.full(IDX1.shape, 2.5)))
  got = Tensor.zeros(2, 4, dtype=dtypes.int32).scatter(1, Tensor([[1, 1], [3, 0]]), 2, reduce="add").numpy()
  np.testing.assert_equal(got, [[0, 4, 0, 0], [2, 0, 0, 2]])
  got = Tensor.full((2, 3), 2.0).scatter(1, Tensor([[1, 1], [0, 2]]), 3.0, reduce="multiply").numpy()
  np.testing.assert_equal(got, [[2, 18, 2], [6, 2, 6]])
  with pytest.raises(RuntimeError, match="scatter: src dtype dtypes.int32 differs from self dtype dtypes.float32"): Tensor.zeros(3).scatter(0, Tensor([0]), Tensor([1]))   # src dtype differs
  with pytest.raises(TypeError, match="scatter: reduce= takes a scalar src"): Tensor.zeros(3).scatter(0, Tensor([0]), Tensor([1.0]), reduce="add")

def test_masked_fill_select_nonzero():
  x = rng(3).uniform(-1, 1, size=(3, 4)).astype(np.float32)
  m = x > 0.2
  check_op([(3, 4)], lambda t: t.masked_fill(Tensor(m), -5.0), lambda a: np.where(m, -5.0, a))
  assert Tensor([1, 2, 3]).masked_fill(Tensor([True, False, True]), 2.7).dtype is dtypes.int32
  check_op([(3, 4)], lambda t: t.masked_select(Tensor(m)), lambda a: a[m])
  check_op([(3, 4)], lambda t: t.masked_select(Tensor(m[1])), lambda a: a[np.broadcast_to(m[1], a.shape)])   # the mask broadcasts
  np.testing.assert_equal(Tensor(x).masked_select(Tensor(m), size=12, fill_value=9.0).numpy(), np.concatenate([x[m], [9.0] * (12 - m.sum())]))
  assert Tensor(x).masked_select(Tensor(np.zeros_like(m))).shape == (0,)
  with pytest.raises(RuntimeError, match="masked_select needs a bool mask, got dtypes.int32"): Tensor(x).masked_select(Tensor(m.astype(np.int32)))
  np.testing.assert_equal(Tensor(x * m).nonzero().numpy(), np.argwhere(x * m))
  np.testing.assert_equal(Tensor([0, 3, 0, 4]).nonzero().numpy(), [[1], [3]])
  assert Tensor.zeros(2, 3).nonzero().shape == (0, 2) and Tensor(5).nonzero().shape == (1, 0)
  np.testing.assert_equal(Tensor([0, 3, 0, 4]).nonzero(size=3, fill_value=-1).numpy(), [[1], [3], [-1]])

def test_one_hot():
  y = np.array([[0, 2], [3, 1]])
  got = Tensor(y).one_hot(5)
  assert got.dtype is dtypes.int32
  np.testing.assert_equal(got.numpy(), np.eye(5, dtype=np.int32)[y])
  np.testing.assert_equal(Tensor([1, 7]).one_hot(4).numpy(), [[0, 1, 0, 0], [0, 0, 0, 0]])   # out of range: all zeros
  assert Tensor([], dtype=dtypes.int32).one_hot(3).shape == (0, 3) and Tensor([1, 2]).one_hot(0).shape == (2, 0)
  with pytest.raises(ValueError, match="one_hot: num_classes must be >= 0, got -1"): Tensor([1, 2]).one_hot(-1)
  with pytest.raises(RuntimeError, match="one_hot needs an int tensor, got dtypes.float32"): Tensor([1.0, 2.0]).one_hot(3)
