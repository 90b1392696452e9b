"""A padded copy of at least kernelize.PAD_WHOLE_ROWS_MIN_BYTES stores the value's rows whole (their last-axis pad as gated
lanes) and zeros only into the border slabs of the other axes, so no element is written twice. Smaller ones keep zeros over
the whole grid, then the interior. Counts and stored elements come from the schedule, values from numpy."""
from math import prod
import numpy as np
import pytest
from core import Tensor
from core.ir.ops import Ops
from core.schedule import kernelize
from core.schedule.kernelize import create_schedule

def kernels(t: Tensor) -> list:
  return [it for it in create_schedule([t.uop])[0] if it.ast.op is Ops.SINK]

def stored(ast) -> int: return prod(u.src[0].arg for u in ast.toposort() if u.op is Ops.RANGE)

def gated(ast) -> int: return sum(1 for u in ast.toposort() if u.op is Ops.INDEX and len(u.src) > 2)

CASES = [((8, 16, 30, 30), ((0, 0), (0, 0), (1, 1), (1, 1))), ((3, 5, 37, 41), ((0, 0), (1, 2), (3, 0), (2, 5))),
         ((130, 131), ((1, 0), (0, 3))), ((2, 3, 115, 117), ((0, 0), (0, 0), (3, 3), (3, 3))),
         ((4, 6, 50, 20), ((2, 1), (0, 0), (1, 1), (0, 0)))]

@pytest.fixture
def whole_rows(monkeypatch):
  monkeypatch.setattr(kernelize, "PAD_WHOLE_ROWS_MIN_BYTES", 0)

@pytest.mark.parametrize("shape,pads", CASES)
def test_every_element_is_stored_once(whole_rows, shape, pads):
  x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
  t = Tensor(x).realize().pad(pads).contiguous()
  ks = kernels(t)
  padded = tuple(d + b + a for d, (b, a) in zip(shape, pads))
  assert sum(stored(k.ast) for k in ks) == prod(padded)   # zeros over the whole grid stored the interior twice
  assert len({k.bufs[0] for k in ks}) == 1
  # the copy stores whole rows: only the last axis's pad gates its loads
  assert stored(ks[-1].ast) == prod(shape[:-1]) * padded[-1] and gated(ks[-1].ast) == (pads[-1] != (0, 0))
  assert all(gated(k.ast) == 0 for k in ks[:-1])
  np.testing.assert_array_equal(t.numpy(), np.pad(x, pads))

def test_kernels_are_the_border_slabs(whole_rows):
  """A conv's padded input: its top and bottom rows are zeros, then the rows between, each stored whole."""
  t = Tensor.empty(4, 3, 40, 40).pad(((0, 0), (0, 0), (1, 1), (1, 1))).contiguous()
  assert [stored(k.ast) for k in kernels(t)] == [4 * 3 * 42, 4 * 3 * 42, 4 * 3 * 40 * 42]

def test_last_axis_pad_alone_is_one_kernel(whole_rows):
  x = np.random.default_rng(1).standard_normal((64, 300)).astype(np.float32)
  t = Tensor(x).realize().pad(((0, 0), (1, 2))).contiguous()
  assert len(kernels(t)) == 1
  np.testing.assert_array_equal(t.numpy(), np.pad(x, ((0, 0), (1, 2))))

@pytest.mark.parametrize("shape,pads", CASES[1:3])
def test_padded_elementwise_value(whole_rows, shape, pads):
  x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
  t = (Tensor(x).realize() * 2 + 1).relu().pad(pads).contiguous()
  np.testing.assert_allclose(t.numpy(), np.pad(np.maximum(x * 2 + 1, 0), pads), rtol=1e-6)

def test_conv_and_its_input_gradient(whole_rows):
  rng = np.random.default_rng(3)
  x, w = rng.standard_normal((2, 8, 33, 35)).astype(np.float32), rng.standard_normal((4, 8, 3, 3)).astype(np.float32)
  xt = Tensor(x, requires_grad=True)
  out = xt.conv2d(Tensor(w), padding=1)
  xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1))).astype(np.float64)
  win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))
  np.testing.assert_allclose(out.numpy(), np.einsum("nchwij,ocij->nohw", win, w), rtol=1e-4, atol=1e-4)
  gxp = np.zeros_like(xp)
  for i in range(3):
    for j in range(3): gxp[:, :, i:i + 33, j:j + 35] += w[:, :, i, j].sum(0)[None, :, None, None]
  np.testing.assert_allclose(out.sum().gradient(xt)[0].numpy(), gxp[:, :, 1:-1, 1:-1], rtol=1e-4, atol=1e-3)

def test_bound():
  """The suite's conv2d row's padded input (27.5 MB) takes whole rows; ResNet-18's first stage at batch 8 (6.9 MB) does not."""
  big = Tensor.empty(32, 64, 56, 56).pad(((0, 0), (0, 0), (1, 1), (1, 1))).contiguous()
  assert [stored(k.ast) for k in kernels(big)] == [32 * 64 * 58, 32 * 64 * 58, 32 * 64 * 56 * 58]
  small = Tensor.empty(8, 64, 56, 56).pad(((0, 0), (0, 0), (1, 1), (1, 1))).contiguous()
  assert [stored(k.ast) for k in kernels(small)] == [8 * 64 * 58 * 58, 8 * 64 * 56 * 56]
