"""Expander._gate_lanes: a bool condition on the vector axis is built lane by lane only where its lanes simplify to constants
and at most one other condition; a condition whose lanes differ (a causal mask's) is told apart at the end lanes, before the
lanes between are simplified."""
from __future__ import annotations
import pytest
from core.ir.ops import UOp, Ops, AxisType
from core.codegen.opt.expander import Expander

def _counting(width: int) -> tuple[Expander, UOp, UOp, list[int]]:
  vec, row = UOp.range(width, 0, AxisType.UPCAST), UOp.range(64, 1)
  ex, lanes = Expander([], vec), []
  sub = ex.sub
  def counted(u, env, lane=None):
    if lane is not None: lanes.append(lane)
    return sub(u, env, lane)
  ex.sub = counted   # type: ignore[method-assign]
  return ex, vec, row, lanes

@pytest.mark.parametrize("width", [4, 8, 16])
def test_causal_condition_falls_back_after_the_end_lanes(width):
  ex, vec, row, lanes = _counting(width)
  col = UOp.range(64 * width, 2)
  assert ex._gate_lanes(row * width + vec < col, {}) is None   # each lane its own compare with the column
  assert lanes == [0, width - 1]

@pytest.mark.parametrize("width", [8, 16])
def test_padded_row_condition_is_built_lane_by_lane(width):
  ex, vec, row, lanes = _counting(width)
  cond = row * width + vec < 63 * width + width // 2   # a row of 63.5 vectors: the tail vector's upper half is off
  got = ex._gate_lanes(cond, {})
  assert got is not None and got.op is Ops.VECTORIZE and sorted(lanes) == list(range(width))
  assert list(got.src) == [ex.sub(cond, {}, k) for k in range(width)]
  assert {x.op for x in got.src[:width // 2]} == {Ops.CONST} and len({x for x in got.src[width // 2:]}) == 1
