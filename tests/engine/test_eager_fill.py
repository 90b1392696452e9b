"""The eager op cache's fill rejects a root over a graph that reads buffers (a conv: its result's graph under the gradient
node) by a search that stops at the first buffer, not a toposort of the whole graph on every call; what it accepts is
unchanged (an op over buffers and broadcast scalars still hits from its third call)."""
from __future__ import annotations
import numpy as np
import pytest
import core.engine.realize as R
from core import Tensor
from core.ir.dtype import dtypes
from core.ir.ops import UOp

def test_pure_stops_at_buffers() -> None:
  x = Tensor(np.ones((4, 4), np.float32)).realize()
  two = UOp.const(dtypes.float32, 2.0, x.device)
  assert R._pure(two.reshape((1, 1)).expand((4, 4)))
  assert not R._pure(x.uop * two.reshape((1, 1)).expand((4, 4)))
  assert not R._pure(x.uop.permute((1, 0)))

def test_conv_fill_takes_no_toposort(monkeypatch: pytest.MonkeyPatch) -> None:
  rng = np.random.default_rng(0)
  xn, wn = rng.standard_normal((2, 4, 6, 6)).astype(np.float32), rng.standard_normal((4, 1, 3, 3)).astype(np.float32)
  x, w = Tensor(xn).realize(), Tensor(wn).realize()
  y = x.conv2d(w, padding=1, groups=4)
  def no_toposort(self: UOp, *a: object, **k: object) -> list[UOp]: raise AssertionError("toposort of the whole graph")
  real_fill = R._fill
  def fill(u: UOp, *a: object) -> None:
    with pytest.MonkeyPatch.context() as m:
      m.setattr(UOp, "toposort", no_toposort)
      real_fill(u, *a)
  monkeypatch.setattr(R, "_fill", fill)
  got = y.numpy()
  xp = np.pad(xn, ((0, 0), (0, 0), (1, 1), (1, 1)))
  want = np.einsum("nchwij,cij->nchw", np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3)), wn[:, 0])
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)

def test_op_over_buffer_and_scalar_still_fills() -> None:
  x = Tensor(np.arange(8, dtype=np.float32)).realize()
  hits = R.eager_ops.hits
  for _ in range(4): got = (x * 3.0).numpy()
  np.testing.assert_array_equal(got, np.arange(8, dtype=np.float32) * 3)
  assert R.eager_ops.hits > hits
