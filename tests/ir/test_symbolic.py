"""Constant folding of every ALU op against numpy, float special values, and the identities of the simplifier."""
from __future__ import annotations
import math
import numpy as np
import pytest
from core.ir.dtype import DType, dtypes, to_np
from core.ir.ops import UOp, Ops, Variable
from core.ir.pattern import graph_rewrite
from core.ir.symbolic import symbolic, symbolic_simple, sym

def fold(op: Ops, dtype: DType, *vals) -> UOp:
  srcs = tuple(UOp.const(dtype, v) for v in vals)
  out_dtype = dtypes.bool if op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ) else dtype
  return graph_rewrite(UOp(op, out_dtype, srcs), symbolic)

def c_div(a: int, b: int) -> int:  # C truncates toward zero; numpy floors, so compute it by hand
  q = abs(a) // abs(b)
  return q if (a < 0) == (b < 0) else -q

INT_VALUES = [0, 1, -1, 2, 3, -7, 100, 127, -128, 255, 32767, -32768, 2**31 - 1, -2**31, 2**63 - 1, 12345678901]

@pytest.mark.parametrize("d", dtypes.ints)
def test_int_constant_folding_matches_numpy(d: DType):
  npd = to_np(d)
  vals = sorted({int(np.array(v % 2**64, dtype=np.uint64).astype(npd)) for v in INT_VALUES})
  binops = {Ops.ADD: np.add, Ops.SUB: np.subtract, Ops.MUL: np.multiply, Ops.MAX: np.maximum, Ops.XOR: np.bitwise_xor,
            Ops.OR: np.bitwise_or, Ops.AND: np.bitwise_and, Ops.CMPLT: np.less, Ops.CMPNE: np.not_equal, Ops.CMPEQ: np.equal}
  with np.errstate(all="ignore"):
    for a in vals:
      for b in vals:
        na, nb = np.array(a, dtype=npd), np.array(b, dtype=npd)
        for op, fn in binops.items():
          got = fold(op, d, a, b)
          assert got.op is Ops.CONST and got.arg == fn(na, nb).item(), (op, d, a, b)
        if b != 0:
          q = c_div(a, b)
          assert fold(Ops.IDIV, d, a, b).arg == np.array(q % 2**64, dtype=np.uint64).astype(npd).item(), (d, a, b)
          assert fold(Ops.MOD, d, a, b).arg == np.array((a - q * b) % 2**64, dtype=np.uint64).astype(npd).item(), (d, a, b)
      assert fold(Ops.NEG, d, a).arg == np.negative(np.array(a, dtype=npd)).item()
      for s in (0, 1, 3, 7):
        assert fold(Ops.SHL, d, a, s).arg == np.left_shift(np.array(a, dtype=npd), npd.type(s)).item(), (d, a, s)
        assert fold(Ops.SHR, d, a, s).arg == np.right_shift(np.array(a, dtype=npd), npd.type(s)).item(), (d, a, s)

def test_where_and_cast_folding():
  c = UOp(Ops.WHERE, dtypes.int32, (UOp.const(dtypes.bool, False), UOp.const(dtypes.int32, 3), UOp.const(dtypes.int32, 4)))
  assert graph_rewrite(c, symbolic).arg == 4
  for v, d, want in [(300, dtypes.uint8, 44), (-1, dtypes.uint32, 2**32 - 1), (2.9, dtypes.int32, 2), (-2.9, dtypes.int8, -2),
                     (70000.0, dtypes.float16, math.inf), (3, dtypes.bool, True), (1e-50, dtypes.float32, 0.0)]:
    src = UOp.const(dtypes.float64 if isinstance(v, float) else dtypes.int64, v)
    assert graph_rewrite(src.cast(d), symbolic).arg == want
  bc = UOp.const(dtypes.float32, 1.0).bitcast(dtypes.uint32)
  assert graph_rewrite(bc, symbolic).arg == 0x3f800000

FLOAT_VALUES = [0.0, -0.0, 1.0, -2.5, 3.0e38, 1e-45, math.inf, -math.inf, math.nan, 0.1]

def same_float(a: float, b: float) -> bool:
  return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))

@pytest.mark.parametrize("d", [dtypes.float32, dtypes.float64, dtypes.float16])
def test_float_constant_folding_matches_numpy(d: DType):
  npd = to_np(d)
  binops = {Ops.ADD: np.add, Ops.SUB: np.subtract, Ops.MUL: np.multiply, Ops.FDIV: np.divide, Ops.MAX: np.maximum,
            Ops.CMPLT: np.less, Ops.CMPNE: np.not_equal}
  unops = {Ops.NEG: np.negative, Ops.SQRT: np.sqrt, Ops.EXP2: np.exp2, Ops.LOG2: np.log2, Ops.RECIPROCAL: np.reciprocal,
           Ops.TRUNC: np.trunc}
  with np.errstate(all="ignore"):
    vals = [float(npd.type(v)) for v in FLOAT_VALUES]
    for a in vals:
      for op, fn in unops.items():
        got, want = fold(op, d, a), fn(npd.type(a))
        # exp2 and log2 are within an ulp in libm and numpy, not correctly rounded, and numpy's differ between hosts (SIMD
        # versions on AVX-512): one ulp either way of numpy's. The rest are correctly rounded everywhere: exact.
        near = [want, np.nextafter(want, npd.type(math.inf)), np.nextafter(want, npd.type(-math.inf))] if op in (Ops.EXP2, Ops.LOG2) else [want]
        assert got.op is Ops.CONST and any(same_float(got.arg, float(w)) for w in near), (op, d, a, got.arg, want)
      for b in vals:
        for op, fn in binops.items():
          got, want = fold(op, d, a, b), fn(npd.type(a), npd.type(b))
          assert got.op is Ops.CONST
          if op in (Ops.CMPLT, Ops.CMPNE): assert got.arg == bool(want), (op, a, b)
          elif op is Ops.MAX and a == b == 0: assert got.arg == 0  # the sign of max(0.0, -0.0) is unspecified (C fmax, numpy differ)
          else: assert same_float(got.arg, float(want)), (op, d, a, b, got.arg, want)

def test_sin_folding():
  for v in (0.0, 1.0, -3.0, 100.0):
    assert fold(Ops.SIN, dtypes.float32, v).arg == float(np.float32(np.sin(np.float64(np.float32(v)))))
  assert math.isnan(fold(Ops.SIN, dtypes.float32, math.inf).arg)

x, y = Variable("x", 0, 10), Variable("y", -4, 4)
f = Variable("f", 0, 10, dtypes.int32).cast(dtypes.float32)
b = Variable("b", 0, 1, dtypes.int32) < 1

@pytest.mark.parametrize("expr,want", [
  (x + 0, x), (x * 1, x), (x * 0, 0), (x // 1, x), (x % 1, 0), (x - x, 0), (x.maximum(x), x), (-(-y), y),
  (b.where(x, x), x), (UOp.const(dtypes.bool, True).where(x, y), x), (UOp.const(dtypes.bool, False).where(x, y), y),
  (b & b, b), (b | b, b), (b & True, b), (b | True, True), (b & False, False), (b.logical_not().logical_not(), b),
  (b.where(UOp.const(dtypes.bool, True), UOp.const(dtypes.bool, False)), b), (x < x, False), (x.ne(x), False),
  (f * 1.0, f), (f - 0.0, f), (f.maximum(f), f),
])
def test_identities(expr: UOp, want):
  got = graph_rewrite(expr, symbolic)
  if isinstance(want, UOp): assert got is want, got
  else: assert got.op is Ops.CONST and got.arg == want and type(got.arg) is type(want), got

def test_float_rules_that_are_not_exact_do_not_fire():
  # f + 0.0 is not f for f = -0.0, f * 0.0 is not 0 for inf/nan, f - f is not 0 for inf, f != f is true for nan
  for e in (f + 0.0, f * 0.0, f - f, f.ne(f)):
    assert graph_rewrite(e, symbolic).op is not Ops.CONST and graph_rewrite(e, symbolic) is not f
  assert graph_rewrite(f + (-0.0), symbolic) is f

def test_where_with_negated_condition_swaps():
  c = Variable("v", 0, 5, dtypes.int32).ne(3)
  assert graph_rewrite(c.logical_not().where(x, y), symbolic) is c.where(y, x)

def test_symbolic_simple_and_sym_are_pattern_matchers():
  assert graph_rewrite(UOp.const(dtypes.int32, 3) + UOp.const(dtypes.int32, 4), symbolic_simple).arg == 7
  assert graph_rewrite((x * 4 + 3) // 4, sym) is x
  p = UOp.param(0, dtypes.float32.ptr(16))
  idx = p.index(x, valid=UOp.const(dtypes.bool, True))
  assert graph_rewrite(idx, sym) is p.index(x)
  v = UOp.vectorize(x, y, x + 1)
  assert graph_rewrite(v.gep(1), sym) is y

def test_int8_rules_do_not_assume_no_overflow():
  a = Variable("a", 100, 127, dtypes.int8)
  # (a + 10) // 2 can wrap for a >= 118: folding it to a//2 + 5 would be wrong there
  e = (a + 10) // 2
  s = e.simplify()
  from core.ir.ops import exec_uop_tree
  assert all(exec_uop_tree(s, {a: v}) == exec_uop_tree(e, {a: v}) for v in range(100, 128))
  assert exec_uop_tree(s, {a: 127}) == -59  # 127 + 10 wraps to -119, and -119 / 2 truncates toward zero

# *** commutative chains: one normal form whatever order the terms come in ***

def test_sum_chain_normal_form_does_not_depend_on_term_order():
  import random
  xs = [Variable(f"v{i}", 0, 9) for i in range(12)]
  terms = [x * (i % 3 + 1) for i, x in enumerate(xs)] + [xs[2] * 5, UOp.const(dtypes.index, 7), xs[5]]
  forms = set()
  for seed in range(6):
    order = terms[:]
    random.Random(seed).shuffle(order)
    acc = order[0]
    for t in order[1:]: acc = graph_rewrite(acc + t, symbolic)   # built term by term, as index arithmetic is
    forms.add(acc)
  assert len(forms) == 1
  (f,), env = forms, {x: (3 * i + 1) % 10 for i, x in enumerate(xs)}
  want = sum((i % 3 + 1) * v for i, v in enumerate(env.values())) + 5 * env[xs[2]] + 7 + env[xs[5]]
  assert f.substitute({x: UOp.const(dtypes.index, v) for x, v in env.items()}).simplify().arg == want
  # like terms combined: v2 appears once (3*v2 + 5*v2), v5 once (3*v5 + v5), the constant last
  chain = [u for u in f.toposort() if u.op is Ops.MUL and u.src[0] in (xs[2], xs[5])]
  assert {u.src[1].arg for u in chain} == {8, 4} and f.src[1].op is Ops.CONST

def test_a_term_that_sorts_first_joins_a_long_chain_in_one_rewrite(monkeypatch):
  import core.ir.pattern as pattern
  xs = [Variable(f"w{i:02d}", 0, 9) for i in range(40)]
  full = xs[0]
  for x in xs[1:]: full = graph_rewrite(full + x, symbolic)
  lead = full
  while lead.op is Ops.ADD: lead = lead.src[0]   # the term the normal form puts first
  rest = [x for x in xs if x is not lead]
  chain = rest[0]
  for x in rest[1:]: chain = graph_rewrite(chain + x, symbolic)
  monkeypatch.setattr(pattern, "TRACK_REWRITES", True)
  pattern.rewrite_stats.pop("chain test", None)
  assert graph_rewrite(chain + lead, symbolic, name="chain test") is full
  assert sum(pattern.rewrite_stats["chain test"].values()) <= 3, "the new term was swapped down the chain one step at a time"

# *** a sum's div/mod terms fold back into what they split ***

def _has_divmod(u: UOp) -> bool: return any(x.op in (Ops.IDIV, Ops.MOD) for x in u.toposort())

@pytest.mark.parametrize("dtype", [dtypes.index, dtypes.int32])
def test_divmod_terms_of_a_sum_fold_back(dtype: DType):
  from core.ir.ops import exec_uop_tree
  r, a, z = Variable("r", 0, 255, dtype), Variable("a", 0, 9, dtype), Variable("z", 0, 9, dtype)
  cases = [
    ((r // 16 + 1) * 16 + (r % 16 + 1) - 17, r),      # count_fold's arange index: constant offsets around the pair
    (a * 7 + (r // 16) * 16 + z + r % 16, None),      # the two terms apart in the chain
    ((r % 16) * 3 + a + (r // 16) * 48 + 2, None),    # both scaled by 3
    (((r // 4) % 4) * 4 + r % 4 + (r // 16) * 16, r),  # a reshape split in three: (r//4)%4*4 + r%4 is r%16 first
  ]
  for expr, want in cases:
    got = graph_rewrite(expr, sym)
    assert not _has_divmod(got), got
    if want is not None: assert got is want
    for vals in [(rv, av, zv) for rv in range(256) for av, zv in ((0, 0), (9, 3))]:
      env = dict(zip((r, a, z), vals))
      assert exec_uop_tree(got, env) == exec_uop_tree(expr, env), (expr, vals)

def test_divmod_terms_fold_exactly_for_negative_values():
  from core.ir.ops import exec_uop_tree
  x = Variable("x", -40, 40)
  flat = (x // 8) * 24 + (x % 8) * 3 + 5          # C's x == (x/8)*8 + x%8 holds for either sign
  nested = ((x // 4) % 2) * 4 + x % 4             # == x % 8 only for x >= 0: must stay as it is here
  got_flat, got_nested = graph_rewrite(flat, sym), graph_rewrite(nested, sym)
  assert not _has_divmod(got_flat)
  for v in range(-40, 41):
    assert exec_uop_tree(got_flat, {x: v}) == exec_uop_tree(flat, {x: v})
    assert exec_uop_tree(got_nested, {x: v}) == exec_uop_tree(nested, {x: v})

def test_a_gated_index_divides_a_value_its_gate_keeps_nonnegative():
  """index_given_gate: a padded pool's gradient reads dY[(w + kw - 1)//2] under 0 < w + kw; trunc(-1/2) blocked folding the
  division after w is split (w = 2*wo + w1), so the address kept it. Under the gate the quotient is rewritten nonnegative, the
  same wherever the gate holds, and folds to wo + a constant once w1 and kw are."""
  from core.ir.ops import exec_uop_tree
  wo, w1, kw = Variable("wo", 0, 55), Variable("w1", 0, 1), Variable("kw", 0, 2)
  w = wo * 2 + w1
  buf = UOp(Ops.PARAM, dtypes.float32.ptr(56), arg=0)
  gate = (UOp.const(dtypes.index, 0) < w + kw) & ((w + kw - 1) % 2 < 1) & (w + kw < 112)
  ix = UOp(Ops.INDEX, buf.dtype, (buf, (w + kw - 1) // 2, gate))
  got = graph_rewrite(ix, sym)
  assert got is not graph_rewrite(ix, symbolic_simple) and all(n.vmin >= 0 for n in got.toposort() if n.op in (Ops.IDIV, Ops.MOD))
  for vals in [(a, b, c) for a in range(56) for b in range(2) for c in range(3)]:
    env = dict(zip((wo, w1, kw), vals))
    if exec_uop_tree(gate, env):
      assert exec_uop_tree(got.src[2], env) and exec_uop_tree(got.src[1], env) == exec_uop_tree(ix.src[1], env), vals
    else: assert not exec_uop_tree(got.src[2], env), vals
  # with w1 and kw constants the address is wo plus a constant: no division left
  for b, c in ((0, 0), (1, 2)):
    one = graph_rewrite(got.substitute({w1: UOp.const(dtypes.index, b), kw: UOp.const(dtypes.index, c)}), sym)
    assert not _has_divmod(one.src[1]), one.src[1]
