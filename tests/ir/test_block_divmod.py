"""x // c and x % c where x = g*S + y, g divides c and y's terms stay in [0, g): the quotient and remainder come from S alone
(a gated concatenate's lane offset l < 32 beside 32*r drops out of (32*r + l) // 64, so its lanes are neighbours in memory)."""
from __future__ import annotations
import itertools
import pytest
from core.ir.dtype import dtypes
from core.ir.ops import UOp, Ops, Variable, exec_uop_tree

def check_exact(orig: UOp, simp: UOp, vs: list[UOp]) -> None:
  """simp equals orig at every point, and every value lies inside simp's bounds."""
  for vals in itertools.product(*(range(v.arg[1], v.arg[2] + 1) for v in vs)):
    env = dict(zip(vs, vals))
    want, got = exec_uop_tree(orig, env), exec_uop_tree(simp, env)
    assert want == got, f"at {vals}: {want} != {got}\norig={orig}\nsimp={simp}"
    assert simp.vmin <= got <= simp.vmax, f"at {vals}: {got} outside [{simp.vmin}, {simp.vmax}] of {simp}"

def ops_of(u: UOp) -> list[tuple[Ops, object]]: return [(n.op, n.src[1].arg) for n in u.toposort() if n.op in (Ops.IDIV, Ops.MOD)]

r, l, h = Variable("r", 0, 71), Variable("l", 0, 31), Variable("h", 0, 5)

def test_lane_offset_drops_out_of_quotient_and_remainder():
  assert ((r * 32 + l) // 64).simplify() is (r // 2).simplify()
  assert ((r * 32 + l) % 64).simplify() is ((r % 2) * 32 + l).simplify()
  # a constant offset that keeps the lanes inside one block of 32 moves into S: (32*r + l + 64) // 64 is r // 2 + 1
  assert ((r * 32 + l + 64) // 64).simplify() is (r // 2 + 1).simplify()
  assert ((r * 32 + l + 96) % 64).simplify() is (((r + 1) % 2) * 32 + l).simplify()

@pytest.mark.parametrize("expr", [
  (r * 32 + l) // 64, (r * 32 + l) % 64, (r * 32 + l + 64) // 64, (r * 32 + l + 96) % 64, (r * 32 + l - 32) % 96,
  (h * 64 + r * 32 + l) // 128, (h * 64 + r * 32 + l) % 128, (h * 192 + r * 32 + l) // 96, (r * 8 + h) // 16,
  (r * 8 + h) % 24, (r * 8 + h + 3) // 16, (r * 8 + h + 3) % 16, (r * 12 + l // 8) // 24, (r * 32 + l) // 64 * 64 + (r * 32 + l) % 64,
])
def test_block_split_is_exact_with_bounds(expr: UOp):
  simp = expr.simplify()
  check_exact(expr, simp, [v for v in (r, l, h) if v in expr.toposort()])

@pytest.mark.parametrize("expr", [
  (r * 8 + h + 3) // 16,   # h + 3 in [3, 8] crosses a block of 8: no split on 8
  (r * 32 + l - 8) // 64,  # the offset takes lanes below zero
  (r * 32 - l) // 64,      # x may be negative: C's quotient truncates
])
def test_no_split_where_the_other_terms_leave_the_block(expr: UOp):
  simp = expr.simplify()
  check_exact(expr, simp, [v for v in (r, l, h) if v in expr.toposort()])
  assert ops_of(simp) and all(a != 2 for _, a in ops_of(simp)), simp

def test_int8_split_only_where_the_new_sums_fit():
  a, b = Variable("a", 0, 3, dtypes.int8), Variable("b", 0, 7, dtypes.int8)
  e = (a * 8 + b) // 16
  assert e.simplify() is (a // 2).simplify()
  check_exact(e, e.simplify(), [a, b])
  # x = 64*c + b can reach 127: S = 8*c and the rebuilt sums fit, but a sum of magnitude beyond int8 must not be rebuilt
  c, m = Variable("c", 0, 1, dtypes.int8), Variable("m", -100, 100, dtypes.int8)
  for e in [(c * 64 + b) // 16, (c * 64 + b) % 16, ((m + 100) * 1 + b) // 16]:
    check_exact(e, e.simplify(), [v for v in (c, b, m) if v in e.toposort()])

def test_const_lt_product_folds_per_lane_gate():
  # a concatenate's gate 767 < 32*r + l, one lane at a time, is 767 - l < 32*r: every lane's is 23 < r
  for lane in range(32):
    g = (UOp.const(dtypes.index, 767 - lane) < r * 32).simplify()
    assert g is (UOp.const(dtypes.index, 23) < r).simplify(), (lane, g)
  for c in range(-70, 70):
    for k in (1, 2, 3, 5):
      e = UOp.const(dtypes.index, c) < Variable("s", -9, 9) * k
      check_exact(e, e.simplify(), [Variable("s", -9, 9)])
