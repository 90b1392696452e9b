"""Tensor._pool composes the permutes between its windows: one PERMUTE per window and one at the end, the same windows."""
import numpy as np
import pytest
from numpy.lib.stride_tricks import sliding_window_view
from core.ir.ops import Ops
from core.tensor import Tensor

def _ref(a: np.ndarray, k: tuple[int, ...], s: tuple[int, ...], d: tuple[int, ...]) -> np.ndarray:
  """(..., *spatial) -> (..., *out, *k) windows, by numpy."""
  nd = len(k)
  win = sliding_window_view(a, [(ki - 1) * di + 1 for ki, di in zip(k, d)], axis=tuple(range(-nd, 0)))
  lead = a.ndim - nd
  sl = (slice(None),) * lead + tuple(slice(None, None, si) for si in s) + tuple(slice(None, None, di) for di in d)
  return win[sl]

@pytest.mark.parametrize("shape,k,s,d", [((2, 3, 11), (3,), (2,), (1,)), ((2, 8, 12, 12), (3, 3), (2, 2), (1, 1)),
                                         ((1, 2, 9, 10), (2, 3), (1, 2), (2, 1)), ((1, 2, 5, 6, 7), (3, 2, 3), (1, 2, 2), (1, 1, 2))])
def test_pool_windows_and_permute_count(shape: tuple[int, ...], k: tuple[int, ...], s: tuple[int, ...], d: tuple[int, ...]) -> None:
  a = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
  p = Tensor(a)._pool(k, s, d)
  np.testing.assert_array_equal(p.numpy(), _ref(a, k, s, d))
  nodes = p.uop.toposort()
  assert not [u for u in nodes if u.op is Ops.PERMUTE and u.src[0].op is Ops.PERMUTE]
  assert sum(u.op is Ops.PERMUTE for u in nodes) <= len(k) + 1

def test_pool_of_a_permuted_tensor_keeps_its_node() -> None:
  # the input's own PERMUTE is another tensor's node (a gradient target): the pool's first permute is applied over it
  a = np.random.default_rng(1).standard_normal((2, 9, 8, 3)).astype(np.float32)
  x = Tensor(a, requires_grad=True)
  xt = x.permute(0, 3, 1, 2)
  p = xt._pool((3, 3), 2, 1)
  np.testing.assert_array_equal(p.numpy(), _ref(a.transpose(0, 3, 1, 2), (3, 3), (2, 2), (1, 1)))
  (g,) = p.sum().gradient(xt)
  counts = np.zeros((2, 3, 9, 8), np.float32)
  for i in range(4):
    for j in range(3): counts[:, :, 2 * i:2 * i + 3, 2 * j:2 * j + 3] += 1
  np.testing.assert_array_equal(g.numpy(), counts)
