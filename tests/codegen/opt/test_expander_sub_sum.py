"""Expander.sub builds an index sum with register axes set as the sum simplify would give (the other terms, the constant moved)
where each axis set is a term of its own: an unrolled copy's or lane's index was set and simplified whole, ~9% of ResNet-18's
codegen (issue 23.8). The nodes must be the ones substituting and simplifying gives, or a program would change."""
from __future__ import annotations
import sys
import pytest
from core.ir.dtype import dtypes
from core.ir.ops import UOp, Ops, AxisType
from core.ir.symbolic import simplify
import core.codegen.opt.expander as expander
from core.codegen.opt.expander import Expander
from core.codegen.opt.kernel import const_of
from opt_helpers import conv_sources

vec, unroll = UOp.range(16, 7, AxisType.UPCAST), UOp.range(3, 6, AxisType.UNROLL)
outer, one = UOp.range(64, 10, AxisType.OUTER), UOp.range(1, 11, AxisType.OUTER)
loop = UOp.range(3, 12, AxisType.LOOP)

def _set(u: UOp, env: dict[UOp, int]) -> UOp:
  """u with the axes of env set, simplified (u itself where it uses none of them)."""
  m = {r: UOp.const(dtypes.index, v) for r, v in env.items() if r in u.toposort()}
  return simplify(u.substitute(m)) if m else u

@pytest.mark.parametrize("name, u", [
  ("affine", vec * 576 + unroll * 3 + outer * 9 + 5),
  ("unsorted", outer * 64 + unroll + vec * 4),   # a PACK copy's sum is not simplified: the others are (as the optimizer leaves them)
  ("lanes to zero", vec * 4 + outer + UOp.const(dtypes.index, -8)),
  ("descending", vec * -3 + outer * 16 + 50),
  ("size-1 axis left", vec * 2 + one * 5),        # with vec set: one value, which simplify folds to a constant
  ("size-1 axis kept", one + vec * -1 + loop * 577 + 11),   # simplify keeps the size-1 axis, but folds it once vec is set
  ("in a quotient", (vec * 5 + outer) // 3 + unroll),   # set and simplified whole
  ("two lane terms", vec * 2 + (vec + outer) * 7),
  ("registers only", vec * 3 + unroll),
  ("gate", (outer * 16 + vec) < 1000),
])
def test_sub_is_substitute_and_simplify(name, u):
  if name != "unsorted": u = simplify(u)
  ex = Expander([unroll], vec)
  for env in ({unroll: 0}, {unroll: 2}):
    for lane in (None, 0, 1, 15):
      got, want = ex.sub(u, env, lane), _set(u, {**env, **({vec: lane} if lane is not None else {})})
      assert got is want, (name, env, lane, got, want)

def test_affine_lanes_simplify_the_index_once(monkeypatch):
  calls: list[UOp] = []
  real = expander._simplify
  monkeypatch.setattr(expander, "_simplify", lambda u, memo=None: calls.append(u) or real(u, memo))
  ex, u = Expander([unroll], vec), vec * 576 + unroll * 3 + outer * 9
  lanes = [ex.sub(u, {unroll: r}, k) for r in range(3) for k in range(16)]
  assert len(calls) == 1 and len(set(lanes)) == 48

def test_conv_program_unchanged(monkeypatch):
  # a conv whose stores go lane by lane and whose loads are unrolled copies: the same source where each is set and simplified
  built, slow = conv_sources(lambda: monkeypatch.setattr(Expander, "_sub_sum", lambda self, u, m: None))
  assert slow == built

def test_the_shortcut_builds_no_constant_per_axis_set():
  # the shortcut moves the sum's constant by the ints; a constant node per axis set (made, hashed, dropped) only where it
  # substitutes and simplifies
  made: list[int] = []
  def count(frame, event, _):
    if event == "call" and frame.f_code in (UOp.const.__code__, const_of.__code__) and frame.f_back.f_code is Expander.sub.__code__: made.append(1)
  ex, u = Expander([unroll], vec), simplify(vec * 576 + unroll * 3 + outer * 9)
  sys.setprofile(count)
  try: lanes = [ex.sub(u, {unroll: r}, k) for r in range(3) for k in range(16)]
  finally: sys.setprofile(None)
  assert not made and all(got is _set(u, {unroll: r, vec: k}) for got, (r, k) in zip(lanes, [(r, k) for r in range(3) for k in range(16)]))

def test_the_shortcut_marks_its_sums_simplified():
  # a gate's compare of a set index is then simplified without walking the sum again (simplify's answer is the sum itself)
  import core.ir.symbolic as symbolic
  with symbolic.shared_simplify():
    ex, u = Expander([unroll], vec), simplify(vec * 576 + unroll * 3 + outer * 9)
    got = ex.sub(u, {unroll: 1}, 3)
    assert got.op is not Ops.CONST and symbolic._memo.done.get(got) is got and got is _set(u, {unroll: 1, vec: 3})
