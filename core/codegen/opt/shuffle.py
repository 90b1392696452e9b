"""A register tile's transpose by two-vector shuffles: rows loaded as whole vectors along one register axis become vectors
along another (a transposing copy's output rows) in log2 steps of interleaves, each one shufflevector of two registers,
where a gather would load every element on its own."""
from __future__ import annotations
from core.ir.ops import UOp, Ops, intern_uop

def _lanes(v: UOp) -> list[UOp]:
  """[v.gep(0), v.gep(1), ...]: the same nodes, made without gep's checks per lane (a conv's tile rows take thousands)."""
  if v.dtype.count == 1: return [v]
  t = v.dtype.scalar()
  return [intern_uop(UOp, Ops.GEP, t, (v,), (i,)) for i in range(v.dtype.count)]

def _swap(a: UOp, c: UOp, b: int) -> tuple[UOp, UOp]:
  """Rows a and c (b rows apart) with their off-diagonal b x b blocks swapped: in each 2b lanes a keeps its first b and takes
  c's first b, c takes a's last b and keeps its own (blends and in-lane shuffles at b < 4 floats, a 128-bit lane swap at 4)."""
  n, la, lc = a.dtype.count, _lanes(a), _lanes(c)
  return (UOp.vectorize(*[la[l] if l & b == 0 else lc[l - b] for l in range(n)]),
          UOp.vectorize(*[la[l + b] if l & b == 0 else lc[l] for l in range(n)]))

def concat(parts: list[UOp]) -> UOp:
  """The vectors of `parts` (one type, a power-of-two count) end to end, two at a time."""
  while len(parts) > 1:
    parts = [UOp.vectorize(*_lanes(a), *_lanes(b)) for a, b in zip(parts[0::2], parts[1::2])]
  return parts[0]

def _square(rows: list[UOp]) -> list[UOp]:
  """The transpose of an S x S tile (S rows of S lanes): blocks of 1, 2, 4 ... lanes swapped across the diagonal."""
  rows, b = list(rows), 1
  while b < len(rows):
    for i in range(len(rows)):
      if i & b == 0: rows[i], rows[i + b] = _swap(rows[i], rows[i + b], b)
    b *= 2
  return rows

def transpose_rows(rows: list[list[UOp]], most: int = 0, side_by_side: bool = False) -> list[UOp]:
  """J rows of M lanes (J, M powers of two), each given as the equal vectors it was loaded in, end to end -> M vectors of J
  lanes, out[a] lane k = row k lane a. Split into square tiles of the smaller side (at most `most` lanes, a register's: a wider
  tile's rows span several registers that its shuffles all keep live at once), each transposed by block swaps, their columns
  put end to end. A row loaded as one vector per register gives each square its own loads (the expander's split rows): the
  stores of one half of the output then read none of the other half's registers (linearize orders such groups one by one).
  side_by_side: rows of one register, wider than a square, are transposed whole, their squares side by side (a block swap stays
  within a square's lanes): one shuffle of two registers a swap for all of them, the columns taken apart at the end."""
  j, w, m = len(rows), rows[0][0].dtype.count, rows[0][0].dtype.count * len(rows[0])
  s = min(j, m, most) if most >= 2 else min(j, m)
  assert w >= s, f"rows loaded in vectors of {w} lanes, narrower than the {s}-lane squares"
  if side_by_side and w == m > s:
    sq = [_square([r[0] for r in rows[g * s:(g + 1) * s]]) for g in range(j // s)]
    return [concat([sq[g][t].gep(tuple(range(p * s, p * s + s))) for g in range(j // s)]) for p in range(m // s) for t in range(s)]
  def piece(r: list[UOp], p: int) -> UOp:
    if len(r) == 1 and m == s: return r[0]
    v, at = r[p * s // w], p * s % w
    return v if w == s else v.gep(tuple(range(at, at + s)))
  pieces = [[piece(r, p) for r in rows] for p in range(m // s)]
  cols = [[_square(pieces[p][g * s:(g + 1) * s]) for g in range(j // s)] for p in range(m // s)]
  return [concat([cols[p][g][t] for g in range(j // s)]) for p in range(m // s) for t in range(s)]
