"""A reshape's index math: dims that map one to one keep their index, and each run of merged or split dims divides only where
it must, so a read through a PAD (whose border indices are out of bounds but gated) keeps no division or modulo."""
import numpy as np
import pytest
from core.ir.dtype import dtypes
from core.ir.ops import UOp, Ops
from core.schedule.indexing import _runs
from core.schedule.kernelize import create_schedule

@pytest.mark.parametrize("src, dst, want", [
  ((2, 16, 16, 16), (2, 1, 16, 16, 16), [([0], [0]), ([1], [2]), ([2], [3]), ([3], [4])]),
  ((8192,), (2, 16, 16, 16), [([0], [0, 1, 2, 3])]),
  ((2, 3, 4), (6, 4), [([0, 1], [0]), ([2], [1])]),
  ((4, 6), (2, 3, 4), [([0, 1], [0, 1, 2])]),
  ((3, 1), (1, 3), [([0], [1])]),
  ((1,), (), []),
  ((0, 3), (3, 0), [([0, 1], [0, 1])]),   # empty: one run
])
def test_runs(src, dst, want): assert _runs(src, dst) == want

def divisions(items) -> int:
  return sum(u.op in (Ops.IDIV, Ops.MOD) for it in items if it.ast.op is Ops.SINK for u in it.ast.toposort())

def test_pad_of_reshaped_buffer_has_no_division():
  a = UOp.new_buffer("CPU", 2 * 16 * 16 * 16, dtypes.float32).reshape((2, 16, 16, 16))
  out = a.reshape((2, 1, 16, 16, 16)).pad(((0, 0), (0, 0), (0, 0), (1, 1), (1, 1)))
  items, _, _ = create_schedule([out])
  assert divisions(items) == 0

def test_reshapes_through_pad_match_numpy():
  from core import Tensor
  x = np.arange(2 * 6 * 4, dtype=np.float32).reshape(2, 6, 4)
  got = Tensor(x).reshape(2, 2, 3, 4).pad((1, 1, 0, 1)).reshape(4, 24).pad((1, 0)).reshape(2, 2, 5, 5).numpy()
  want = np.pad(np.pad(x.reshape(2, 2, 3, 4), ((0, 0), (0, 0), (0, 1), (1, 1))).reshape(4, 24), ((0, 0), (1, 0)))
  np.testing.assert_array_equal(got, want.reshape(2, 2, 5, 5))
