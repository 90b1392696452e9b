"""Randomized differential test: simplified integer expressions equal brute-force evaluation at every point."""
from __future__ import annotations
import itertools, random
import pytest
from core.ir.dtype import DType, dtypes
from core.ir.ops import UOp, Variable, exec_uop_tree

def rand_int_expr(rng: random.Random, vs: list[UOp], depth: int) -> UOp:
  dt = vs[0].dtype
  if depth == 0 or rng.random() < 0.15:
    return rng.choice(vs) if rng.random() < 0.75 else UOp.const(dt, rng.randint(-8, 8))
  a = rand_int_expr(rng, vs, depth - 1)
  k = rng.randrange(9)
  if k == 0: return a + rand_int_expr(rng, vs, depth - 1)
  if k == 1: return a - rand_int_expr(rng, vs, depth - 1)
  if k == 2: return a * rng.choice([-3, -2, -1, 2, 3, 4, 5, 8])
  if k == 3: return a // rng.choice([-4, -3, -2, -1, 1, 2, 3, 4, 5, 6, 8])
  if k == 4: return a % rng.choice([-4, -3, -2, 1, 2, 3, 4, 5, 6, 8])
  if k == 5: return a.maximum(rand_int_expr(rng, vs, depth - 1))
  if k == 6: return rand_bool_expr(rng, vs, depth - 1).where(a, rand_int_expr(rng, vs, depth - 1))
  if k == 7: return a + rng.randint(-10, 10)
  return (a * rng.choice([2, 3, 4])) + rand_int_expr(rng, vs, depth - 1)

def rand_bool_expr(rng: random.Random, vs: list[UOp], depth: int) -> UOp:
  a = rand_int_expr(rng, vs, max(depth - 1, 0))
  b = rand_int_expr(rng, vs, max(depth - 1, 0)) if rng.random() < 0.5 else UOp.const(vs[0].dtype, rng.randint(-6, 12))
  k = rng.randrange(6)
  if k == 0: return a < b
  if k == 1: return a.ne(b)
  if k == 2: return b < a
  if k == 3: return (a < b) & (b < rand_int_expr(rng, vs, 0))
  if k == 4: return (a < b) | a.ne(rand_int_expr(rng, vs, 0))
  return (a < b).logical_not()

def check_equal(orig: UOp, simp: UOp, vs: list[UOp]) -> None:
  for vals in itertools.product(*(range(v.arg[1], v.arg[2] + 1) for v in vs)):
    env = dict(zip(vs, vals))
    want, got = exec_uop_tree(orig, env), exec_uop_tree(simp, env)
    assert want == got, f"at {dict(zip([v.arg[0] for v in vs], vals))}: {want} != {got}\norig={orig}\nsimp={simp}"

def make_vars(rng: random.Random, dtype: DType) -> list[UOp]:
  out = []
  for name in ("a", "b", "c")[:rng.choice([2, 3])]:
    lo = rng.choice([0, 0, 0, 1, -3, -7])
    out.append(Variable(name, lo, lo + rng.choice([1, 2, 3, 5, 7])))
    if dtype is not dtypes.index: out[-1] = Variable(name, out[-1].arg[1], out[-1].arg[2], dtype)
  return out

@pytest.mark.parametrize("dtype,seed,n", [(dtypes.index, 0, 1200), (dtypes.int32, 1, 500), (dtypes.int8, 2, 500)])
def test_random_int_expressions_simplify_exactly(dtype: DType, seed: int, n: int):
  rng = random.Random(seed)
  for _ in range(n):
    vs = make_vars(rng, dtype)
    e = rand_int_expr(rng, vs, rng.randint(1, 4)) if rng.random() < 0.8 else rand_bool_expr(rng, vs, rng.randint(1, 3))
    check_equal(e, e.simplify(), vs)

def test_random_int8_expressions_near_wraparound():
  # big constants make int8 sums wrap: rules that only hold without overflow must not fire
  rng = random.Random(3)
  for _ in range(300):
    vs = [Variable("a", 115, 127, dtypes.int8), Variable("b", -128, -123, dtypes.int8)]
    e = rand_int_expr(rng, vs, rng.randint(1, 3))
    e = (e + rng.choice([1, 50, 100, 127])) // rng.choice([2, 3, 4]) if rng.random() < 0.5 else (e * rng.choice([2, 3])) % rng.choice([3, 4, 5])
    check_equal(e, e.simplify(), vs)

x, y, z = Variable("x", 0, 10), Variable("y", 0, 3), Variable("z", -5, 5)

@pytest.mark.parametrize("expr,want", [
  ((x * 4 + 3) // 4, x), ((x * 4 + y) % 4, y), ((x * 4 + y) // 4, x), (x // 11, UOp.const(dtypes.index, 0)), (y % 4, y),
  ((x // 2) // 3, x // 6), (x - x, UOp.const(dtypes.index, 0)), (x + x, x * 2), (3 * (2 * x), x * 6), (x + 0 + 0, x), (x * 1, x),
  ((x + 3) - 3, x), ((x * 8 + y * 4) // 4, x * 2 + y), ((x % 6) % 3, x % 3), (x < 11, UOp.const(dtypes.bool, True)),
  (x < 0, UOp.const(dtypes.bool, False)), ((x + 1) < 5, x < 4), ((x * 3) < 7, x < 3), ((x // 4) < 2, x < 8),
  (x.maximum(y + 20), y + 20), ((x // 3) * 3 + x % 3, x), ((z * 4) // 4, z), ((z * 4 + 8) % 4, UOp.const(dtypes.index, 0)),
  ((y + x) + (x + y), x * 2 + y * 2), ((x < 3).where(y, y), y), (x * 0, UOp.const(dtypes.index, 0)),
])
def test_simplification_reaches_simple_form(expr: UOp, want: UOp):
  assert expr.simplify() is want.simplify(), f"{expr.simplify()} is not {want}"

def test_equal_expressions_in_any_order_become_one_uop():
  rng = random.Random(5)
  for _ in range(200):
    terms = [x * rng.randint(1, 5), y * rng.randint(1, 5), z, UOp.const(dtypes.index, rng.randint(-5, 5))]
    perm = terms[:]
    rng.shuffle(perm)
    a = terms[0] + terms[1] + terms[2] + terms[3]
    b = perm[0] + (perm[1] + (perm[2] + perm[3]))
    assert a.simplify() is b.simplify()
