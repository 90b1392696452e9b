"""Expander._gate_lanes: a bool condition on the vector axis is built lane by lane only where its lanes simplify to constants
and at most one other condition; a condition whose lanes differ (a causal mask's) is told apart at the end lanes, before the
lanes between are simplified; a padded row's (a compare of `c*lane + rest` with a bound, so a step along the lanes) simplifies
the lanes a bisection needs, taking the lanes between two equal ones as theirs."""
from __future__ import annotations
import pytest
from core.ir.ops import UOp, Ops, AxisType
from core.codegen.opt.expander import Expander

def _counting(width: int) -> tuple[Expander, UOp, UOp, list[int]]:
  vec, row = UOp.range(width, 0, AxisType.UPCAST), UOp.range(64, 1)
  ex, lanes = Expander([], vec), []
  sub = ex.sub
  def counted(u, env, lane=None):
    # the condition's lanes (sub sets a compare's sources through itself too)
    if lane is not None and u.op is Ops.CMPLT: lanes.append(lane)
    return sub(u, env, lane)
  ex.sub = counted   # type: ignore[method-assign]
  return ex, vec, row, lanes

@pytest.mark.parametrize("width", [4, 8, 16])
def test_causal_condition_falls_back_after_the_end_lanes(width):
  ex, vec, row, lanes = _counting(width)
  col = UOp.range(64 * width, 2)
  assert ex._gate_lanes(row * width + vec < col, {}) is None   # each lane its own compare with the column
  assert lanes == [0, width - 1]

@pytest.mark.parametrize("width, cut", [(8, 4), (16, 8), (16, 13), (16, 1), (16, 16), (32, 21)])
def test_padded_row_condition_simplifies_the_step_only(width, cut):
  ex, vec, row, lanes = _counting(width)
  cond = row * width + vec < 63 * width + cut   # a row of 63 vectors and `cut` lanes: the tail vector's lanes from `cut` on are off
  got = ex._gate_lanes(cond, {})
  assert len(lanes) <= 2 * width.bit_length(), lanes   # a bisection's lanes, not every lane
  want = [ex.sub(cond, {}, k) for k in range(width)]
  assert got is not None and got.op is Ops.VECTORIZE and list(got.src) == want
  assert {x.op for x in want[:cut]} == {Ops.CONST} and len(set(want[cut:])) <= 1

def test_condition_not_monotone_in_the_lane_simplifies_every_lane():
  ex, vec, row, lanes = _counting(16)
  cond = (row * 16 + vec) % 3 < 1   # true on every third lane: equal end lanes say nothing about the lanes between
  got = ex._gate_lanes(cond, {})
  assert sorted(lanes) == list(range(16))
  lanes.clear()
  assert got is None or list(got.src) == [ex.sub(cond, {}, k) for k in range(16)]
