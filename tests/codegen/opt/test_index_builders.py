"""kernel.build_sum and const_of build the optimizer's and expander's index math with the interning call itself (issue 23.8,
codegen time): they must give the very nodes symbolic._build_sum and UOp.const give, or a program would change."""
from __future__ import annotations
import sys
import pytest
from core.ir.dtype import dtypes
from core.ir.ops import UOp, AxisType
from core.ir.symbolic import _build_sum
from core.codegen.opt.kernel import build_sum, const_of

a, b, c = UOp.range(16, 1, AxisType.LOOP), UOp.range(3, 2, AxisType.REDUCE), UOp.range(8, 3, AxisType.UPCAST)
v = UOp.variable("n", 1, 64)
i32 = UOp.const(dtypes.int32, 5) + UOp.range(4, 4).cast(dtypes.int32)

@pytest.mark.parametrize("like, terms, const", [
  (a, [(a, 1), (b, 3), (c, 48)], 7),
  (a, [(b, 0), (c, -2), (a, 1)], 0),     # a 0 coefficient dropped, a negative one kept
  (a, [(a * 2 + v, 5), (v, 1)], -9),     # terms that are sums themselves
  (a, [], 11), (a, [], 0), (a, [(b, 0)], 4),   # nothing left: like's constant
  (i32, [(i32, 3)], 2),                  # another dtype: UOp.const's truncation
])
def test_build_sum_is_symbolics(like, terms, const):
  assert build_sum(like, terms, const) is _build_sum(like, terms, const)

@pytest.mark.parametrize("dtype, val", [(dtypes.index, 0), (dtypes.index, -5), (dtypes.index, 1 << 40), (dtypes.int32, 1 << 33),
                                        (dtypes.float32, 0.1), (dtypes.bool, 1), (dtypes.index, 3.0)])
def test_const_of_is_uop_const(dtype, val):
  assert const_of(dtype, val) is UOp.const(dtype, val)

def test_index_math_skips_the_operators():
  # the same nodes without UOp's operators, const_like or UOp.const: each was a Python call or more a node
  seen: list[str] = []
  slow = {UOp._binop.__code__, UOp.const_like.__code__, UOp.const.__code__, UOp.alu.__code__}
  def watch(frame, event, _):
    if event == "call" and frame.f_code in slow: seen.append(frame.f_code.co_name)
  sys.setprofile(watch)
  try: s = build_sum(a, [(a, 1), (b, 3), (c, 48)], 7)
  finally: sys.setprofile(None)
  assert not seen and s is a + b * 3 + c * 48 + 7
