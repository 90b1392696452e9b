"""A realized padded value (a conv's padded input) of at least kernelize.PAD_SPLIT_MIN elements is written as zeros and then
its interior: neither kernel gates a load by its position in the padded grid. Smaller ones stay one kernel. Counts come from
the schedule, values from numpy."""
import numpy as np
import pytest
from core import Tensor
from core.ir.ops import Ops
from core.schedule import kernelize
from core.schedule.kernelize import create_schedule

def kernels(t: Tensor) -> list:
  return [it for it in create_schedule([t.uop])[0] if it.ast.op is Ops.SINK]

def gated(ast) -> int: return sum(1 for u in ast.toposort() if u.op is Ops.INDEX and len(u.src) > 2)

CASES = [((8, 16, 30, 30), ((0, 0), (0, 0), (1, 1), (1, 1))), ((3, 5, 37, 41), ((0, 0), (1, 2), (3, 0), (2, 5))),
         ((130, 131), ((1, 0), (0, 3))), ((2, 3, 115, 117), ((0, 0), (0, 0), (3, 3), (3, 3)))]

@pytest.mark.parametrize("shape,pads", CASES)
def test_padded_copy_is_zeros_then_interior(shape, pads):
  x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
  t = Tensor(x).realize().pad(pads).contiguous()
  ks = kernels(t)
  assert len(ks) == 2 and all(gated(k.ast) == 0 for k in ks)
  assert ks[0].bufs[0] is ks[1].bufs[0]   # both write the one padded buffer
  np.testing.assert_array_equal(t.numpy(), np.pad(x, pads))

@pytest.mark.parametrize("shape,pads", CASES[1:3])
def test_padded_elementwise_value(shape, pads):
  """The value's own work runs over the interior only."""
  x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
  t = (Tensor(x).realize() * 2 + 1).relu().pad(pads).contiguous()
  assert len(kernels(t)) == 2
  np.testing.assert_allclose(t.numpy(), np.pad(np.maximum(x * 2 + 1, 0), pads), rtol=1e-6)

def test_small_padded_copy_is_one_kernel():
  x = np.random.default_rng(2).standard_normal((5, 7)).astype(np.float32)
  t = Tensor(x).realize().pad(((1, 1), (2, 0))).contiguous()
  assert len(kernels(t)) == 1
  np.testing.assert_array_equal(t.numpy(), np.pad(x, ((1, 1), (2, 0))))
  n = kernelize.PAD_SPLIT_MIN
  assert len(kernels(Tensor.ones(n - 2).contiguous().realize().pad(((1, 1),)).contiguous())) == 2   # exactly at the bound
  assert len(kernels(Tensor.ones(n - 3).contiguous().realize().pad(((1, 1),)).contiguous())) == 1

def test_conv_with_padded_input_matches_numpy():
  rng = np.random.default_rng(3)
  x, w = rng.standard_normal((2, 8, 33, 35)).astype(np.float32), rng.standard_normal((4, 8, 3, 3)).astype(np.float32)
  xt, wt = Tensor(x, requires_grad=True), Tensor(w, requires_grad=True)
  out = xt.conv2d(wt, padding=1)
  xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1))).astype(np.float64)
  win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))   # (n, c, h, w, 3, 3)
  want = np.einsum("nchwij,ocij->nohw", win, w)
  np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-4)
  gx, gw = out.sum().gradient(xt, wt)
  np.testing.assert_allclose(gw.numpy(), np.einsum("nchwij->cij", win)[None].repeat(4, 0), rtol=1e-4, atol=1e-3)
  ones = np.ones((2, 4, 33, 35))
  gxp = np.zeros_like(xp)
  for i in range(3):
    for j in range(3): gxp[:, :, i:i + 33, j:j + 35] += np.einsum("nohw,oc->nchw", ones, w[:, :, i, j])
  np.testing.assert_allclose(gx.numpy(), gxp[:, :, 1:-1, 1:-1], rtol=1e-4, atol=1e-3)

def test_padded_value_that_is_itself_padded_is_one_kernel():
  """A strided conv's input gradient pads a zero-dilated value: its loads stay gated, so zeros first would be one more pass."""
  x = np.random.default_rng(4).standard_normal((4, 8, 40, 40)).astype(np.float32)
  inner = ((0, 0), (0, 0), (0, 1), (0, 1))
  outer = ((0, 0), (0, 0), (1, 1), (1, 1))
  t = (Tensor(x).realize().pad(inner) * 2).pad(outer).contiguous()
  assert len(kernels(t)) == 1
  np.testing.assert_array_equal(t.numpy(), np.pad(np.pad(x, inner) * 2, outer))
