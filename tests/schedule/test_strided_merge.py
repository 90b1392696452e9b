"""A realized value broadcast into a reduction through a flattening of transposed axes (attention's heads back to the model
width) is copied contiguous first (realize_points.strided_merge): the reduction then reads a plain buffer. Splits, plain
transposes and merges that line up stay views. Counts come from the schedule, values from numpy, strides from numpy's
no-copy reshape."""
import itertools
import numpy as np
import pytest
from core import Tensor
from core.ir.ops import Ops
from core.schedule.kernelize import create_schedule
from core.schedule.realize_points import _nocopy_strides

def kernels(t: Tensor) -> list:
  return [it for it in create_schedule([t.uop])[0] if it.ast.op is Ops.SINK]

def divmods(ast) -> int: return sum(1 for u in ast.toposort() if u.op in (Ops.IDIV, Ops.MOD))

@pytest.mark.parametrize("b,h,t,d,o", [(1, 12, 64, 16, 24), (2, 3, 7, 5, 11), (1, 4, 33, 8, 3)])
def test_heads_flattened_into_matmul_are_copied(b, h, t, d, o):
  rng = np.random.default_rng(0)
  a, g = rng.standard_normal((b, h, t, d)).astype(np.float32), rng.standard_normal((b * t, o)).astype(np.float32)
  flat = Tensor(a).realize().transpose(1, 2).reshape(b * t, h * d)
  out = flat.T @ Tensor(g).realize()   # (h*d, o): the weight gradient of a projection after attention
  ks = kernels(out)
  assert len(ks) == 2 and ks[0].ast.arg.startswith("E_")   # the copy, then the matmul
  assert divmods(ks[1].ast) == 0
  want = a.transpose(0, 2, 1, 3).reshape(b * t, h * d).astype(np.float64).T @ g
  np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-4)

def test_plain_transpose_and_split_stay_views():
  rng = np.random.default_rng(1)
  a, w = rng.standard_normal((24, 16)).astype(np.float32), rng.standard_normal((24, 8)).astype(np.float32)
  at, wt = Tensor(a).realize(), Tensor(w).realize()
  out = at.T @ wt                                                    # a transpose
  assert len(kernels(out)) == 1
  np.testing.assert_allclose(out.numpy(), a.T.astype(np.float64) @ w, rtol=1e-4, atol=1e-4)
  heads = at.reshape(24, 4, 4).transpose(0, 1).reshape(4, 24, 4)     # a split, then a transpose: no merge
  out2 = heads @ Tensor(w[:4]).realize()
  assert len(kernels(out2)) == 1
  np.testing.assert_allclose(out2.numpy(), a.reshape(24, 4, 4).transpose(1, 0, 2).astype(np.float64) @ w[:4], rtol=1e-4, atol=1e-4)

def test_gradient_through_flattened_heads():
  """The output projection after attention, forward and backward: values against numpy."""
  rng = np.random.default_rng(2)
  b, h, t, d, o = 1, 3, 10, 4, 6
  a_np, w_np = rng.standard_normal((b, h, t, d)).astype(np.float32), rng.standard_normal((o, h * d)).astype(np.float32)
  a, w = Tensor(a_np.copy(), requires_grad=True), Tensor(w_np.copy(), requires_grad=True)
  y = a.transpose(1, 2).reshape(b, t, h * d).linear(w.T)
  ga, gw = (y * y).sum().gradient(a, w)
  x = a_np.transpose(0, 2, 1, 3).reshape(b, t, h * d).astype(np.float64)
  yn = x @ w_np.T
  np.testing.assert_allclose(y.numpy(), yn, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(gw.numpy(), np.einsum("bto,bti->oi", 2 * yn, x), rtol=1e-4, atol=1e-4)
  gx = (2 * yn) @ w_np
  np.testing.assert_allclose(ga.numpy(), gx.reshape(b, t, h, d).transpose(0, 2, 1, 3), rtol=1e-4, atol=1e-4)

def _numpy_nocopy(a: np.ndarray, new: tuple[int, ...]) -> tuple[int, ...] | None:
  v = a.view()
  try: v.shape = new
  except AttributeError: return None
  return tuple(s // a.itemsize for s in v.strides)

@pytest.mark.parametrize("shape", [(2, 3, 4), (1, 6, 1, 4), (4, 1, 3), (2, 2, 2, 3)])
def test_nocopy_strides_matches_numpy(shape):
  base = np.zeros(shape, np.float32)
  n = base.size
  news = [(n,), (shape[0], n // shape[0]), (n // shape[-1], shape[-1]), tuple(reversed(shape)), (1, n, 1)]
  for perm in itertools.permutations(range(len(shape))):
    a = base.transpose(perm)
    strides = tuple(s // 4 for s in a.strides)
    for new in news:
      got, want = _nocopy_strides(a.shape, strides, new), _numpy_nocopy(a, new)
      assert (got is None) == (want is None), (perm, new, got, want)
      if got is not None: assert all(g == w for g, w, d in zip(got, want, new) if d != 1), (perm, new, got, want)
