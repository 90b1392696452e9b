"""The expander's per-lane indices of a scattered store or gather (Expander._lane_indices) are the nodes that setting each lane
in the index and simplifying gives: the shortcut for indices affine in the vector axis (the sum with each lane's constant)
must not change a program."""
from __future__ import annotations
from typing import cast
import pytest
from core.ir.dtype import dtypes
from core.ir.ops import UOp, AxisType
from core.ir.symbolic import simplify
from core.codegen.opt.expander import Expander
from opt_helpers import conv_sources

vec = UOp.range(16, 7, AxisType.UPCAST)
unroll = UOp.range(3, 6, AxisType.UNROLL)
outer = UOp.range(64, 10, AxisType.OUTER)

def _per_lane(ex: Expander, u: UOp, env: dict[UOp, int]) -> list[UOp]:
  vec = cast(UOp, ex.vec)
  return [simplify(u.substitute({r: UOp.const(dtypes.index, v) for r, v in {**env, vec: k}.items()})) for k in range(ex.width)]

@pytest.mark.parametrize("name, index", [
  ("affine", vec * 576 + unroll * 3 + outer * 9 + 5),        # the channel tile's weight panel: lane 0's sum plus 576*k
  ("no constant", vec * 3136 + outer * 56),                  # the channel tile's output: lane 0 has no constant term
  ("lane at zero", vec * 4 + outer + UOp.const(dtypes.index, -8)),   # lane 2's constant is 0: the sum alone
  ("descending", vec * -3 + outer * 16 + 50),
  ("not affine", (vec * 5 + outer) // 3 + unroll),          # lane by lane
  ("two lane terms", vec * 2 + (vec + outer) * 7),
])
def test_lane_indices_equal_setting_each_lane(name, index):
  ex = Expander([unroll], vec)
  for env in ({unroll: 0}, {unroll: 2}):
    got = ex._lane_indices(ex.sub(index, env), index, env)
    want = _per_lane(ex, index, env)
    assert len(got) == 16 and all(g is w for g, w in zip(got, want)), (name, env, got, want)

def test_channel_tile_program_unchanged(monkeypatch):
  # the conv of test_conv_channel_rows that stores lane by lane on 16 lanes: the same source with each lane set and simplified
  built, slow = conv_sources(lambda: monkeypatch.setattr(Expander, "_lane_indices", lambda self, i, u, env: _per_lane(self, u, env)))
  assert slow == built
