"""The symbolic simplifier: constant folding, algebraic identities, canonical order and exact div/mod/compare folding."""
from __future__ import annotations
import contextlib, functools, math, threading
from collections.abc import Iterator
from typing import Any, cast
from core.ir.dtype import DType, dtypes, dtype_min, dtype_max, truncate
from core.ir.ops import UOp, Ops, GroupOp
from core.ir.alu import exec_alu, _idiv
from core.ir.pattern import UPat, PatternMatcher, graph_rewrite
from core.helpers import blake2b

# Every rule here must hold for every value inside the operands' bounds. Integer dtypes wrap around (they form a ring
# modulo 2^N), so reassociation, commutation and distribution are exact for them; reasoning about division, remainder
# and order is only exact where no intermediate value can wrap, which `_exact` checks through vmin/vmax.

def _is_int(d: DType) -> bool: return dtypes.is_int(d)
def _is_intish(d: DType) -> bool: return dtypes.is_int(d) or dtypes.is_bool(d)

def _exact(u: UOp) -> bool:
  """True when the value of the ADD/MUL/SUB node `u` never wraps: its bounds are not the whole dtype range
  (the bounds code answers the whole range whenever a wrap-around is possible)."""
  d = u.dtype.scalar()
  if d is dtypes.index: return True
  return not (u.vmin == dtype_min(d) and u.vmax == dtype_max(d))

def _fits(d: DType, v: Any) -> bool:
  s = d.scalar()
  return s is dtypes.index or dtype_min(s) <= v <= dtype_max(s)

# *** a stable sort key, so that equal expressions built in any order end up as the same UOp ***

def _arg_key(a: Any) -> tuple:
  if isinstance(a, bool): return (0, int(a))
  if isinstance(a, int): return (1, a)
  if isinstance(a, str): return (2, a)
  if isinstance(a, tuple) and all(isinstance(x, (int, str)) and not isinstance(x, bool) for x in a):
    return (3, tuple((0, x) if isinstance(x, int) else (1, x) for x in a))
  return (4, repr(a))

def sort_key(u: UOp) -> tuple:
  """(op, readable arg key, structural digest): deterministic across runs (no Python hash), flat (no deep tuples)."""
  if (k := u.__dict__.get("_skey")) is not None: return k
  for x in u.toposort(gate=lambda x: "_skey" not in x.__dict__):
    if "_skey" in x.__dict__: continue
    h = blake2b(f"{x.op.value}|{x.dtype!r}|{x.arg!r}|{x.tag!r}".encode(), digest_size=8)
    for s in x.src: h.update(s.__dict__["_skey"][2])
    x.__dict__["_skey"] = (x.op.value, _arg_key(x.arg) if not x.src else (9,), h.digest())
  return u.__dict__["_skey"]

def _order(u: UOp) -> tuple:
  # constants sort after everything else, so they end up last in commutative chains
  return (1,) if u.op is Ops.CONST else (0, sort_key(u))

def _term_order(op: Ops, u: UOp) -> tuple:
  # terms of a sum sort by what they multiply, so x*2 and x*3 end up next to each other and combine
  if op is Ops.ADD and u.op is Ops.MUL and u.src[1].op is Ops.CONST: return (_order(u.src[0]), _order(u))
  return (_order(u), ())

# *** constant folding ***

def _fold(root: UOp) -> UOp | None:
  vals = tuple(s.arg for s in root.src)
  try: return root.const_like(exec_alu(root.op, root.dtype, vals))
  except (TypeError, ValueError, OverflowError, ZeroDivisionError): return None

def _fold_cast(root: UOp, c: UOp) -> UOp | None:
  if root.dtype.count != 1 or not isinstance(c.arg, (int, float, bool)): return None
  return root.const_like(truncate(root.dtype, c.arg))

def _fold_bounds(root: UOp) -> UOp | None:
  """An integer/bool node whose bounds are one value is that value (comparisons decided by vmin/vmax land here)."""
  if root.dtype.count != 1 or not _is_intish(root.dtype): return None
  lo, hi = root.vmin, root.vmax
  if lo != hi or isinstance(lo, float): return None
  return root.const_like(truncate(root.dtype.scalar(), lo))

# *** canonical order of commutative / associative ops ***

def _base_coef(u: UOp) -> tuple[UOp, Any]:
  """u as base*coef for combining like terms of a sum."""
  if u.op is Ops.MUL and u.src[1].op is Ops.CONST and _is_int(u.dtype): return u.src[0], u.src[1].arg
  return u, 1

def _combine(op: Ops, a: UOp, b: UOp) -> UOp | None:
  """a OP b merged into one term when that is exact: constants fold, like terms add, idempotent duplicates drop."""
  if a.op is Ops.CONST and b.op is Ops.CONST: return a.alu(op, b)
  if op in GroupOp.Idempotent and a is b: return a
  if op is Ops.XOR and a is b: return a.const_like(0 if _is_int(a.dtype) else False)
  if op is Ops.ADD and _is_int(a.dtype) and a.op is not Ops.CONST and b.op is not Ops.CONST:
    (ba, ca), (bb, cb) = _base_coef(a), _base_coef(b)
    if ba is bb: return ba * truncate(a.dtype.scalar(), ca + cb)
  return None

def _assoc_ok(root: UOp) -> bool:
  # associativity/commutativity hold in wrap-around integer arithmetic and for bools, not for floats
  return root.dtype.count == 1 and (_is_intish(root.dtype) or root.op is Ops.MAX and not dtypes.is_float(root.dtype))

def _insert(op: Ops, chain: UOp, b: UOp) -> UOp:
  """`chain op b` with b moved left past every later-ordered term, or combined with the term it meets: where swapping it
  one term per rewrite would take it, in one step (a chain built term by term would otherwise cost quadratic rewrites)."""
  terms: list[UOp] = []
  u = chain
  while u.op is op and u.dtype is chain.dtype:
    terms.append(u.src[1])
    u = u.src[0]
  terms.append(u)
  terms.reverse()
  kb, i = _term_order(op, b), len(terms) - 1   # b goes before terms[-1] (the caller checked)
  while i > 0:
    if (m := _combine(op, terms[i - 1], b)) is not None:
      terms[i - 1] = m
      break
    if not kb < _term_order(op, terms[i - 1]):
      terms.insert(i, b)
      break
    i -= 1
  else: terms.insert(0, b)
  return functools.reduce(lambda x, y: x.alu(op, y), terms)

def canonical_chain(root: UOp) -> UOp | None:
  """Keep chains left-deep ((t0 op t1) op t2) op c with terms sorted by `_order`, like terms combined, constants last."""
  op, a, b = root.op, root.src[0], root.src[1]
  if not _assoc_ok(root):
    # only commutation is exact for floats: just move constants last
    if a.op is Ops.CONST and b.op is not Ops.CONST: return root.replace(src=(b, a))
    return None
  if b.op is op and b.dtype is root.dtype: return a.alu(op, b.src[0]).alu(op, b.src[1])  # right-nested -> left-deep
  if a.op is op and a.dtype is root.dtype:
    a0, a1 = a.src
    if (m := _combine(op, a1, b)) is not None: return a0.alu(op, m)
    if _term_order(op, b) < _term_order(op, a1): return _insert(op, a, b)
    return None
  if (m := _combine(op, a, b)) is not None: return m
  if _term_order(op, b) < _term_order(op, a): return b.alu(op, a)
  return None

def _swap_consts_last(root: UOp) -> UOp | None:
  a, b = root.src
  if (a.op is Ops.CONST and b.op is not Ops.CONST) or (a.op is not Ops.CONST and b.op is not Ops.CONST and _order(b) < _order(a)):
    return root.replace(src=(b, a))
  return None

# *** division and remainder by a constant (C semantics: the quotient truncates toward zero) ***

def split_sum(x: UOp) -> tuple[list[tuple[UOp, int]], int] | None:
  """x as sum(term*coef) + const with every ADD/MUL on the way exact (no wrap-around); None when that is not known."""
  terms: list[tuple[UOp, int]] = []
  const = 0
  stack = [x]
  while stack:
    u = stack.pop()
    if u.op is Ops.ADD:
      if not _exact(u): return None
      stack.append(u.src[1])
      stack.append(u.src[0])
    elif u.op is Ops.CONST and isinstance(u.arg, int): const += u.arg
    elif u.op is Ops.MUL and u.src[1].op is Ops.CONST and isinstance(u.src[1].arg, int):
      if not _exact(u): return None
      terms.append((u.src[0], u.src[1].arg))
    else: terms.append((u, 1))
  return terms, const

def _build_sum(like: UOp, terms: list[tuple[UOp, int]], const: int) -> UOp:
  acc: UOp | None = None
  for t, c in terms:
    if c == 0: continue
    e = t if c == 1 else t * c
    acc = e if acc is None else acc + e
  if acc is None: return like.const_like(const)
  return acc + const if const != 0 else acc

def _finite(*xs: Any) -> bool: return all(not (isinstance(x, float) and math.isinf(x)) for x in xs)

def _divmod_parts(x: UOp, c: int):
  """Split x = c*Q + R where Q = sum(q_i*t_i) + qb and R = sum(r_i*t_i) + rb with 0 <= r_i < c; None if unknown."""
  if (sp := split_sum(x)) is None: return None
  terms, b = sp
  q_terms, r_terms = [], []
  for t, f in terms:
    q, r = divmod(f, c)
    q_terms.append((t, q))
    if r: r_terms.append((t, r))
  qb, rb = divmod(b, c)
  bounds = [(t.vmin, t.vmax) for t, _ in r_terms]
  if not _finite(*(v for bd in bounds for v in bd)): rlo = rhi = None
  else:
    rlo = rb + sum(r * lo for (_, r), (lo, _) in zip(r_terms, bounds))
    rhi = rb + sum(r * hi for (_, r), (_, hi) in zip(r_terms, bounds))
  return terms, b, q_terms, qb, r_terms, rb, rlo, rhi

def _magnitude(terms: list[tuple[UOp, int]], const: int) -> int:
  return abs(const) + sum(abs(f) * max(abs(cast(int, t.vmin)), abs(cast(int, t.vmax))) for t, f in terms)

def _block_split(x: UOp, c: int, terms: list[tuple[UOp, int]], b: int) -> tuple[UOp, UOp, int] | None:
  """x = g*S + y with g > 1 dividing c, g dividing the coefficient of every term of S and 0 <= y < g (the other terms and
  the constant, y's bounds from its terms'): (S, y, g), the largest such g, or None. Then for x >= 0, x // c == S // (c//g)
  and x % c == g*(S % (c//g)) + y: a lane offset l < 32 beside 32*r drops out of (32*r + l) // 64."""
  for g in sorted({math.gcd(c, f) for _, f in terms} - {1, c}, reverse=True):
    big = [(t, f // g) for t, f in terms if f % g == 0]
    small = [(t, f) for t, f in terms if f % g]
    bounds = [(cast(int, t.vmin), cast(int, t.vmax)) for t, _ in small]
    if not big or not _finite(*(v for t, _ in terms for v in (t.vmin, t.vmax))): continue
    ylo = b + sum(f * (lo if f > 0 else hi) for (_, f), (lo, hi) in zip(small, bounds))
    yhi = b + sum(f * (hi if f > 0 else lo) for (_, f), (lo, hi) in zip(small, bounds))
    if (k := ylo // g) != yhi // g: continue
    # S and y are new sums: no partial sum of theirs may wrap (bounded by the sum of the terms' magnitudes)
    if not all(_fits(x.dtype, _magnitude(part, const)) for part, const in ((big, k), (small, b - k * g))): continue
    return _build_sum(x, big, k), _build_sum(x, small, b - k * g), g
  return None

def fold_div(x: UOp, d: UOp) -> UOp | None:
  """x // c for a constant c."""
  c = d.arg
  if not isinstance(c, int) or c == 0 or not _is_int(x.dtype) or x.dtype.count != 1: return None
  if c < 0:
    # trunc(x / c) == -trunc(x / -c); x // -1 stays exact under wrap-around too
    if not _fits(x.dtype, -c) or dtypes.is_unsigned(x.dtype): return None
    return (x // -c) * -1
  if c == 1: return x
  if _finite(x.vmin, x.vmax) and (q := _idiv(cast(int, x.vmin), c)) == _idiv(cast(int, x.vmax), c): return x.const_like(q)  # truncation is monotone
  if x.op is Ops.IDIV and x.src[1].op is Ops.CONST and isinstance(x.src[1].arg, int) and x.src[1].arg > 0 and _fits(x.dtype, x.src[1].arg * c):
    return x.src[0] // (x.src[1].arg * c)  # trunc(trunc(x/a)/b) == trunc(x/(a*b)) for a, b > 0
  if (parts := _divmod_parts(x, c)) is None: return None
  terms, b, q_terms, qb, r_terms, rb, rlo, rhi = parts
  # x is an exact multiple of c: the quotient is exact whatever the sign
  if not r_terms and rb == 0: return _build_sum(x, q_terms, qb)
  if x.vmin < 0: return None  # below, trunc == floor is needed
  if rlo is not None and rhi is not None and rlo // c == rhi // c: return _build_sum(x, q_terms, qb + rlo // c)
  if (g := math.gcd(c, *(f for _, f in terms))) > 1:
    # floor((g*S + b) / (g*c')) == floor((S + b//g) / c') since b%g < g adds less than one step of c'
    return _build_sum(x, [(t, f // g) for t, f in terms], b // g) // (c // g)
  if rlo is not None and rlo >= 0 and _fits(x.dtype, rhi) and (any(q for _, q in q_terms) or qb):
    # floor((c*Q + R)/c) == Q + floor(R/c), and R >= 0 keeps the truncating division equal to floor (R must not wrap)
    return _build_sum(x, q_terms, qb) + _build_sum(x, r_terms, rb) // c
  if (sp := _block_split(x, c, terms, b)) is not None: return sp[0] // (c // sp[2])
  return None

def fold_mod(x: UOp, d: UOp) -> UOp | None:
  """x % c for a constant c."""
  c = d.arg
  if not isinstance(c, int) or c == 0 or not _is_int(x.dtype) or x.dtype.count != 1: return None
  if c < 0:
    if not _fits(x.dtype, -c) or dtypes.is_unsigned(x.dtype): return None
    return x % -c  # the C remainder takes the sign of the dividend only
  if c == 1: return x.const_like(0)
  if _finite(x.vmin, x.vmax) and (q := _idiv(cast(int, x.vmin), c)) == _idiv(cast(int, x.vmax), c): return x if q == 0 else x - q * c
  if x.op is Ops.MOD and x.src[1].op is Ops.CONST and isinstance(x.src[1].arg, int) and x.src[1].arg > 0 and x.src[1].arg % c == 0:
    return x.src[0] % c  # (x % a) % c == x % c when c divides a: same residue, same sign
  if (parts := _divmod_parts(x, c)) is None: return None
  terms, b, q_terms, qb, r_terms, rb, rlo, rhi = parts
  if not r_terms and rb == 0: return x.const_like(0)
  if x.vmin < 0: return None
  if rlo is not None and rhi is not None and rlo // c == rhi // c: return _build_sum(x, r_terms, rb - (rlo // c) * c)
  if (g := math.gcd(c, *(f for _, f in terms))) > 1:
    inner = _build_sum(x, [(t, f // g) for t, f in terms], b // g) % (c // g)
    return inner * g + (b % g) if b % g else inner * g
  if rlo is not None and rlo >= 0 and _fits(x.dtype, rhi) and (any(q for _, q in q_terms) or qb):
    return _build_sum(x, r_terms, rb) % c  # x and R differ by a multiple of c and are both >= 0 (R must not wrap)
  if (sp := _block_split(x, c, terms, b)) is not None: return (sp[0] % (c // sp[2])) * sp[2] + sp[1]
  return None

def fold_divmod_terms(root: UOp) -> UOp | None:
  """A sum holding (x//c)*(k*c) and (x%c)*k anywhere in its chain has x*k there instead (C's x == (x/c)*c + x%c, exact for
  either sign), and ((x//c)%d)*(k*c) with (x%c)*k gives (x%(c*d))*k for x >= 0: index math split by tiling or reshapes
  (a row index as block*16 + lane) folds back however its terms were ordered, scaled or offset by constants."""
  if root.dtype.count != 1 or (sp := split_sum(root)) is None or not any(t.op is Ops.MOD for t, _ in sp[0]): return None
  coefs: dict[UOp, int] = {}
  for t, f in sp[0]: coefs[t] = coefs.get(t, 0) + f
  changed = False
  for m in [t for t in coefs if t.op is Ops.MOD and t.src[1].op is Ops.CONST]:
    x, c, k = m.src[0], m.src[1].arg, coefs.get(m, 0)
    if not isinstance(c, int) or c <= 0 or k == 0: continue
    for q, f in list(coefs.items()):
      if f != k * c or q.op not in (Ops.IDIV, Ops.MOD): continue
      if q.op is Ops.IDIV and q.src[0] is x and q.src[1].op is Ops.CONST and q.src[1].arg == c: whole = x
      elif q.op is Ops.MOD and q.src[1].op is Ops.CONST and isinstance(d := q.src[1].arg, int) and d > 0 and _fits(x.dtype, c * d) and \
           (i := q.src[0]).op is Ops.IDIV and i.src[0] is x and i.src[1].op is Ops.CONST and i.src[1].arg == c and x.vmin >= 0:
        whole = x % (c * d)
      else: continue
      del coefs[q], coefs[m]
      coefs[whole] = coefs.get(whole, 0) + k
      changed = True
      break
  return _build_sum(root, list(coefs.items()), sp[1]) if changed else None

def _gate_bounds(gate: UOp) -> list[tuple[dict[UOp, int], int]]:
  """Lower bounds the gate's clauses `c < sum` (ANDed) put on sums free of div/mod: (terms with their coefficients, the
  least value of the terms' sum)."""
  facts, stack = [], [gate]
  while stack:
    u = stack.pop()
    if u.op is Ops.AND and u.dtype.count == 1: stack.extend(u.src)
    elif u.op is Ops.CMPLT and u.src[0].op is Ops.CONST and isinstance(c := u.src[0].arg, int) and (sp := split_sum(u.src[1])) is not None \
         and not any(t.op in (Ops.IDIV, Ops.MOD) for t in u.src[1].toposort()):
      facts.append((dict(sp[0]), c + 1 - sp[1]))
  return facts

def index_given_gate(root: UOp) -> UOp | None:
  """A gated address (INDEX buf, idx, gate) is used only where its gate holds: x//d and x%d of an x that may be negative (C
  semantics truncate) but that a clause of the gate bounds to x >= 0 become (x + k*d)//d - k and (x + k*d)%d, nonnegative
  everywhere, which the bounds rules fold once a split axis's inner part is a constant. A padded pool's gradient reads
  dY[(w + kw - 1)//2] under 0 < w + kw: with w = 2*wo + w1 and w1, kw unrolled, (2*wo + w1 + kw + 1)//2 - 1 is wo + a constant,
  where trunc(-1/2) kept the division (and its lanes scalar)."""
  facts: list[tuple[dict[UOp, int], int]] | None = None
  subs: dict[UOp, UOp] = {}
  for n in root.src[1].toposort() | root.src[2].toposort():
    if n.op not in (Ops.IDIV, Ops.MOD) or n.dtype.count != 1 or not _is_int(n.dtype) or dtypes.is_unsigned(n.dtype) or \
       n.src[1].op is not Ops.CONST or not isinstance(d := n.src[1].arg, int) or d <= 0: continue
    x = n.src[0]
    if not _finite(x.vmin, x.vmax) or x.vmin >= 0 or (sp := split_sum(x)) is None: continue
    if facts is None: facts = _gate_bounds(root.src[2])
    terms = dict(sp[0])
    if not any(t == terms and lo + sp[1] >= 0 for t, lo in facts) or not _fits(x.dtype, x.vmax + (k := -(cast(int, x.vmin) // d)) * d): continue
    x2 = _build_sum(x, sp[0], sp[1] + k * d)
    subs[n] = x2 // d - k if n.op is Ops.IDIV else x2 % d
  if not subs: return None
  return root.replace(src=(root.src[0], root.src[1].substitute(subs), root.src[2].substitute(subs)))

# *** comparisons ***

def _lt_const(root: UOp, x: UOp, d: UOp) -> UOp | None:
  """x < c with x a sum/product/quotient: move what is constant to the right (only where nothing wraps)."""
  c = d.arg
  if not isinstance(c, int) or not _is_int(x.dtype) or x.dtype.count != 1: return None
  if x.op is Ops.ADD and x.src[1].op is Ops.CONST and _exact(x) and _fits(x.dtype, c - x.src[1].arg):
    return x.src[0] < (c - x.src[1].arg)
  if x.op is Ops.MUL and x.src[1].op is Ops.CONST and isinstance(k := x.src[1].arg, int) and k > 0 and _exact(x):
    return x.src[0] < -(-c // k)  # x*k < c  <=>  x < ceil(c/k)
  if x.op is Ops.IDIV and x.src[1].op is Ops.CONST and isinstance(k := x.src[1].arg, int) and k > 0:
    # trunc(y/k) < c  <=>  y < c*k for c > 0, and y < (c-1)*k + 1 for c <= 0 (trunc rounds negatives up)
    bound = c * k if c > 0 else (c - 1) * k + 1
    if _fits(x.dtype, bound): return x.src[0] < bound
  if x.op is Ops.ADD and (sp := split_sum(x)) is not None and sp[1] == 0 and (g := math.gcd(*(f for _, f in sp[0]))) > 1:
    return _build_sum(x, [(t, f // g) for t, f in sp[0]], 0) < -(-c // g)  # sum(g*f_i*t_i) < c  <=>  sum(f_i*t_i) < ceil(c/g)
  return None

def _const_lt(root: UOp, d: UOp, x: UOp) -> UOp | None:
  c = d.arg
  if not isinstance(c, int) or not _is_int(x.dtype) or x.dtype.count != 1: return None
  if x.op is Ops.ADD and x.src[1].op is Ops.CONST and _exact(x) and _fits(x.dtype, c - x.src[1].arg):
    return x.src[1].const_like(c - x.src[1].arg) < x.src[0]
  if x.op is Ops.MUL and x.src[1].op is Ops.CONST and isinstance(k := x.src[1].arg, int) and k > 0 and _exact(x):
    return x.src[1].const_like(c // k) < x.src[0]  # c < x*k  <=>  floor(c/k) < x: a lane's gate 767 - l < 32*r is 23 < r
  return None

def _ne_const(x: UOp, d: UOp) -> UOp | None:
  # x + k != c  <=>  x != c - k, in wrap-around arithmetic too (adding k is a bijection)
  if x.op is Ops.ADD and x.src[1].op is Ops.CONST and _is_int(x.dtype) and x.dtype.count == 1 and isinstance(d.arg, int):
    return x.src[0].ne(truncate(x.dtype.scalar(), d.arg - x.src[1].arg))
  return None

def _not_lt(x: UOp, y: UOp) -> UOp | None:
  """!(x < y) for ints is y <= x, i.e. y-1 < x or y < x+1 when y or x is a constant that can move."""
  if not _is_int(x.dtype) or x.dtype.count != 1: return None
  if y.op is Ops.CONST and isinstance(y.arg, int) and _fits(x.dtype, y.arg - 1): return y.const_like(y.arg - 1) < x
  if x.op is Ops.CONST and isinstance(x.arg, int) and _fits(x.dtype, x.arg + 1): return y < x.const_like(x.arg + 1)
  return None

def _max_bounds(a: UOp, b: UOp) -> UOp | None:
  if not _is_intish(a.dtype) or a.dtype.count != 1: return None
  if a.vmin >= b.vmax: return a
  if b.vmin >= a.vmax: return b
  return None

def _cast_cast(root: UOp, y: UOp, x: UOp) -> UOp | None:
  # the inner cast keeps every value of x, so it can go
  if _is_intish(x.dtype) and _is_int(y.dtype) and x.dtype.count == y.dtype.count == 1 and _fits(y.dtype, x.vmin) and _fits(y.dtype, x.vmax):
    return x.cast(root.dtype)
  return None

def _index_cast(u: UOp) -> UOp | None:
  """x when u is an exact cast of an index x to an integer (every value of x fits), else None."""
  if u.op is not Ops.CAST or not _is_int(u.dtype) or u.dtype.count != 1 or u.src[0].dtype is not dtypes.index: return None
  x = u.src[0]
  return x if _fits(u.dtype, x.vmin) and _fits(u.dtype, x.vmax) else None

def _lift_cast_alu(root: UOp, a: UOp, b: UOp) -> UOp | None:
  """cast(x) op cast(y) (or a constant) computed on the indices and cast once, when no value of the result wraps: an
  integer arange folded to index math (count_fold) then simplifies with the index expression it came from."""
  if (x := _index_cast(a)) is None: return None
  y = b.arg if b.op is Ops.CONST and isinstance(b.arg, int) else _index_cast(b)
  if y is None: return None
  r = x.alu(root.op, y if isinstance(y, UOp) else UOp.const(dtypes.index, y))
  return r.cast(root.dtype) if _fits(root.dtype, r.vmin) and _fits(root.dtype, r.vmax) else None

def _lift_cast_cmp(root: UOp, a: UOp, b: UOp) -> UOp | None:
  """cast(x) < cast(y) is x < y when both casts keep every value (also against a constant)."""
  xs = [_index_cast(u) if u.op is not Ops.CONST else (UOp.const(dtypes.index, u.arg) if isinstance(u.arg, int) else None) for u in (a, b)]
  if any(x is None for x in xs) or all(u.op is Ops.CONST for u in (a, b)): return None
  return cast(UOp, xs[0]).alu(root.op, cast(UOp, xs[1]))

def _bitcast_const(root: UOp, c: UOp) -> UOp | None:
  import struct
  fi, fo = c.dtype.scalar().fmt, root.dtype.scalar().fmt
  if root.dtype.count != 1 or c.dtype.count != 1 or fi is None or fo is None or c.dtype.itemsize != root.dtype.itemsize: return None
  return root.const_like(struct.unpack("<" + fo, struct.pack("<" + fi, c.arg))[0])

def _int(u: UOp) -> bool: return _is_int(u.dtype)

x_, y_, c_, c2_ = UPat.var("x"), UPat.var("y"), UPat.cvar("c", vec=False), UPat.cvar("c2", vec=False)
ints, bools = tuple(dtypes.ints) + (dtypes.index,), dtypes.bool
ix, iy = UPat.var("x", ints), UPat.var("y", ints)
bx = UPat.var("x", bools)

# *** the passes ***

pm_constant_fold = PatternMatcher([
  (UPat(GroupOp.ALU, src=UPat(Ops.CONST), name="root"), _fold),
  (UPat(Ops.CAST, src=(UPat(Ops.CONST, name="c"),), name="root"), _fold_cast),
  (UPat(Ops.BITCAST, src=(UPat(Ops.CONST, name="c"),), name="root"), _bitcast_const),
], name="constant fold")

pm_identities = PatternMatcher([
  # additive / multiplicative identities; for floats only the IEEE-exact ones (x+0.0 is not x for x=-0.0)
  (ix + 0, lambda x: x), (UPat.var("x") + UPat.const(dtypes.floats, -0.0), lambda x: x),
  (UPat.var("x") - UPat.const(dtypes.floats, 0.0), lambda x: x), (ix - 0, lambda x: x),
  (ix * 1, lambda x: x), (UPat.var("x") * UPat.const(dtypes.floats, 1.0), lambda x: x),
  (UPat.var("x") / UPat.const(dtypes.floats, 1.0), lambda x: x),
  (ix * 0, lambda x: x.const_like(0)),
  (ix // 1, lambda x: x), (ix % 1, lambda x: x.const_like(0)),
  (ix - ix, lambda x: x.const_like(0)),
  (UPat(Ops.NEG, src=(UPat(Ops.NEG, src=(x_,)),)), lambda x: x),
  (x_.maximum(x_), lambda x: x),
  (UPat.var("c").where(x_, x_), lambda c, x: x),
  (UPat.const(bools, True).where(x_, y_), lambda x, y: x), (UPat.const(bools, False).where(x_, y_), lambda x, y: y),
  (UPat.var("c", bools).where(UPat.const(bools, True), UPat.const(bools, False)), lambda c: c),
  (UPat.var("c", bools).where(UPat.const(bools, False), UPat.const(bools, True)), lambda c: c.logical_not()),
  (UPat.var("c", bools).ne(True).where(x_, y_), lambda c, x, y: c.where(y, x)),
  # bools and bits
  (bx & True, lambda x: x), (bx & False, lambda x: x.const_like(False)), (bx | True, lambda x: x.const_like(True)),
  (bx | False, lambda x: x), (bx ^ False, lambda x: x), (bx.ne(False), lambda x: x), (bx.eq(True), lambda x: x),
  (bx.ne(True).ne(True), lambda x: x), (bx.eq(False), lambda x: x.logical_not()),
  (ix & 0, lambda x: x.const_like(0)), (ix | 0, lambda x: x), (ix ^ 0, lambda x: x),
  (UPat.var("x", ints + (bools,)) & UPat.var("x"), lambda x: x), (UPat.var("x", ints + (bools,)) | UPat.var("x"), lambda x: x),
  (UPat.var("x", ints + (bools,)) ^ UPat.var("x"), lambda x: x.const_like(0) if _int(x) else x.const_like(False)),
  (bx & bx.ne(True), lambda x: x.const_like(False)), (bx | bx.ne(True), lambda x: x.const_like(True)),
  # comparisons of a value with itself (x < x is false even for NaN; x != x is not, so ints only)
  (x_ < x_, lambda x: UOp.const(dtypes.bool.vec(x.dtype.count), False)),
  (ix.ne(ix), lambda x: UOp.const(dtypes.bool.vec(x.dtype.count), False)),
  (ix.eq(ix), lambda x: UOp.const(dtypes.bool.vec(x.dtype.count), True)),
  # casts
  (UPat(Ops.CAST, name="root", src=(x_,)), lambda root, x: x if root.dtype is x.dtype else None),
  (UPat(Ops.CAST, name="root", src=(UPat(Ops.CAST, name="y", src=(x_,)),)), _cast_cast),
], name="identities")

symbolic_simple = pm_constant_fold + pm_identities
symbolic_simple.name = "symbolic simple"

pm_canonical = PatternMatcher([
  # subtraction and negation of signed ints become a sum with coefficient -1, so x-x and friends cancel by combining
  (UPat(Ops.SUB, dtype=tuple(dtypes.sints) + (dtypes.index,), src=(x_, y_)), lambda x, y: x + y * -1),
  (UPat(Ops.NEG, dtype=tuple(dtypes.sints) + (dtypes.index,), src=(x_,)), lambda x: x * -1),
  (UPat(Ops.SUB, dtype=tuple(dtypes.uints), src=(x_, c_)), lambda x, c: x + (-c.arg)),  # x - c == x + (2^N - c) mod 2^N
  # a constant factor distributes over a sum, so index expressions flatten into sum(coef*term) + const
  (UPat(Ops.MUL, dtype=ints, src=(UPat(Ops.ADD, name="s"), c_)), lambda s, c: s.src[0] * c + s.src[1] * c),
  (UPat((Ops.ADD, Ops.MUL, Ops.AND, Ops.OR, Ops.XOR, Ops.MAX), name="root"), canonical_chain),
  (UPat((Ops.CMPNE, Ops.CMPEQ), name="root"), _swap_consts_last),
], name="canonical order")

pm_bounds = PatternMatcher([
  (UPat(GroupOp.ALU | {Ops.CAST}, name="root"), _fold_bounds),
  (UPat.var("a").maximum(UPat.var("b")), _max_bounds),
  (UPat(Ops.IDIV, src=(ix, UPat.cvar("d", vec=False))), fold_div),
  (UPat(Ops.MOD, src=(ix, UPat.cvar("d", vec=False))), fold_mod),
  # x//c*c + x%c == x: the C identity a == (a/b)*b + a%b
  (UPat(Ops.ADD, src=[UPat(Ops.MUL, src=(UPat(Ops.IDIV, src=(x_, c_)), c_)), UPat(Ops.MOD, src=(x_, c_))]), lambda x, c: x),
  (UPat(Ops.ADD, dtype=ints, name="root"), fold_divmod_terms),
  (UPat(Ops.CMPLT, src=(ix, UPat.cvar("d", vec=False)), name="root"), _lt_const),
  (UPat(Ops.INDEX, src=(UPat(), UPat(), UPat(dtype=dtypes.bool)), name="root"), index_given_gate),
  (UPat(Ops.CMPLT, src=(UPat.cvar("d", vec=False), ix), name="root"), _const_lt),
  (UPat(Ops.CMPNE, src=(ix, UPat.cvar("d", vec=False))), _ne_const),
  (UPat(Ops.CMPLT, src=(ix, iy)).ne(True), _not_lt),
  # integer math on casts of indices moves onto the indices (where the index rules apply) when nothing wraps
  (UPat((Ops.ADD, Ops.MUL), name="root", src=(UPat(Ops.CAST, name="a"), UPat((Ops.CAST, Ops.CONST), name="b"))), _lift_cast_alu),
  (UPat((Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ), name="root", src=(UPat((Ops.CAST, Ops.CONST), name="a"), UPat((Ops.CAST, Ops.CONST), name="b"))),
   _lift_cast_cmp),
], name="bounds")

symbolic = symbolic_simple + pm_canonical + pm_bounds
symbolic.name = "symbolic"

# *** one memo for every simplify of a kernel's codegen ***

# a node's simplification by `symbolic` is a function of the node alone (no ctx, bounds from its own fields), so a memo may
# serve every call: a kernel's trial opts, rebuilds and unrolled copies keep asking for the same, mostly final, index math
_memo = threading.local()

# the memo stays for the thread's next kernel: kernels of one shape (a network's blocks, a training step's forward and
# backward) ask for the same index math. Past this many entries (~0.5 KB each with the nodes they keep alive: ResNet-18's
# inference 14k, its training step 45k) the next kernel starts a new one
SIMPLIFY_MEMO_ENTRIES = 1 << 16

@contextlib.contextmanager
def shared_simplify() -> Iterator[None]:
  """Inside (this thread, nested calls join the outermost), simplify() shares one memo, kept for the thread's next session
  (a new one past SIMPLIFY_MEMO_ENTRIES)."""
  if getattr(_memo, "done", None) is not None:
    yield
    return
  if (kept := getattr(_memo, "kept", None)) is None or len(kept) > SIMPLIFY_MEMO_ENTRIES: kept = _memo.kept = {}
  _memo.done = kept
  try: yield
  finally: _memo.done = None

def simplify(u: UOp, name: str = "simplify", memo: dict[UOp, UOp] | None = None) -> UOp:
  """u rewritten by `symbolic` to its fixed point, with the memo of shared_simplify where one is open (else `memo`)."""
  return graph_rewrite(u, symbolic, name=name, memo=shared if (shared := getattr(_memo, "done", None)) is not None else memo)

def mark_simplified(u: UOp, memo: dict[UOp, UOp] | None = None) -> UOp:
  """u, recorded as its own simplification in the open shared_simplify memo (else `memo`), so later simplify() calls stop at
  it. The caller promises that simplify(u) is u: a node built as simplify would return it (kernel.rebuild's range sums)."""
  if (m := getattr(_memo, "done", None)) is None: m = memo
  if m is not None: m[u] = u
  return u

# *** index-specific rules the code generator adds ***

def _gep_vectorize(v: UOp, root: UOp) -> UOp | None:
  return v.src[root.arg[0]] if len(root.arg) == 1 else UOp.vectorize(*(v.src[i] for i in root.arg))

pm_index = PatternMatcher([
  # a gate that is always true is no gate
  (UPat(Ops.INDEX, name="root", src=(UPat.var("b"), UPat.var("i"), UPat.const(bools, True))), lambda root, b, i: root.replace(src=(b, i))),
  (UPat(Ops.GEP, name="root", src=(UPat(Ops.VECTORIZE, name="v"),)), _gep_vectorize),
  (UPat(Ops.GEP, name="root", src=(x_,)), lambda root, x: x if root.arg == tuple(range(x.dtype.count)) else None),
], name="index")

sym = symbolic + pm_index
sym.name = "sym"
