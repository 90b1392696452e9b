"""A register tile's output as rows: a conv's tile of W channels (a vector's lanes, NCHW: a plane apart) by L columns (L
vectors) was stored a lane at a time, W * L scalar stores (an AVX-512 3x3 conv: 224, a quarter of its LLVM compile). Each
channel's L columns are neighbours in memory: the L vectors transposed in registers (shuffle.transpose_rows) give each channel's
row, stored as one vector under a constant mask. AVX-512 only: AVX2 code (DEV=CPU:LLVM:znver3, rows of 4 + 2 + 1 floats, as
vmaskmovps is no single store) compiled in 0.998x the time and its kernels ran 0.99-1.005x, no gain."""
from __future__ import annotations
from core.ir.dtype import dtypes
from core.ir.ops import UOp, Ops
from core.ir.pattern import PatternMatcher, UPat
from core.codegen.opt.shuffle import transpose_rows

def _lane_store(s: UOp) -> tuple[tuple[UOp, UOp, int], UOp, int] | None:
  """((buffer, index terms, constant), vector, lane) of an ungated scalar STORE of one lane of a vector at `terms + constant`."""
  if s.op is not Ops.STORE or len(s.src) != 2 or (idx := s.src[0]).op is not Ops.INDEX or len(idx.src) != 2: return None
  if (val := s.src[1]).op is not Ops.GEP or len(val.arg) != 1 or val.dtype.count != 1 or val.dtype.scalar() is dtypes.bool: return None
  i = idx.src[1]
  terms, c = (i.src[0], i.src[1].arg) if i.op is Ops.ADD and i.src[1].op is Ops.CONST else (i, 0)
  return (idx.src[0], terms, c), val.src[0], val.arg[0]

# the most columns transposed at once: 14 columns as 7 + 7 (two 8-row transposes, where one of 16 rows would copy the last column
# twice and keep 16 rows' shuffles live; r_8_128_14_14's tiles of 16 channels ran 0.96-0.98x the lane stores' time so)
ROW_MAX = 8
# a column of 16 channels by 8 pixels is two 8 x 8 squares side by side in one register: transposed together (transpose_rows
# side_by_side), each block swap one shuffle of two zmm, where the squares one at a time took two of ymm halves; ResNet-18's
# 3x3 convs so wrote 44 fewer shufflevectors each (the same kernels' speed; a switch for comparisons)
SIDE_BY_SIDE = True
ROW_ARG = "tile row"   # the arg of a row's STORE (renderer.lane_indices addresses it from its index; rendered as any store)

def row_gate(n: int, width: int) -> UOp | None:
  """The constant gate of a row's first n of `width` lanes (None: all of them)."""
  return UOp.vectorize(*[UOp.const(dtypes.bool, j < n) for j in range(width)]) if n < width else None

def _row_store(idx: UOp, row: UOp, gate: UOp | None) -> UOp:
  """`row` stored at INDEX idx, under `gate` (row_gate: AVX-512 stores it under a mask register, where LLVM wrote a 7-lane vector
  as 4 + 2 + 1 floats)."""
  if gate is not None: idx = idx.replace(src=idx.src + (gate,))
  return UOp(Ops.STORE, dtypes.void, (idx, row), ROW_ARG)

def _stores(g: UOp) -> list[UOp]:
  """The nodes under GROUP g and the GROUPs in it, GROUPs left out."""
  return [s for x in g.src for s in (_stores(x) if x.op is Ops.GROUP else (x,))]

def store_rows(g: UOp, regs: int) -> UOp | None:
  """GROUP g of (groups of) lane stores among which whole tiles: W rows (one per lane) of L >= 2 neighbours, row k's element j
  lane k of the j-th of L vectors -> W row stores of the tile's transpose (_row_store) per piece of at most ROW_MAX columns,
  where the tiles hold at most half of the `regs` vector registers."""
  if len(g.src) < 2 or not all(x.op in (Ops.GROUP, Ops.STORE) for x in g.src): return None
  at: dict[tuple[UOp, UOp, int], tuple[UOp, int, UOp]] = {}
  rest: list[UOp] = []
  for s in _stores(g):
    if (p := _lane_store(s)) is None: rest.append(s)
    elif p[0] in at: return None   # two stores to one address: kept in their order
    else: at[p[0]] = (p[1], p[2], s.src[0])
  tiles: dict[tuple[UOp, ...], list[list[tuple[UOp, int, UOp]]]] = {}
  for key in at:
    if (key[0], key[1], key[2] - 1) in at: continue   # not a row's first element
    row: list[tuple[UOp, int, UOp]] = []
    while (nxt := (key[0], key[1], key[2] + len(row))) in at: row.append(at[nxt])
    tiles.setdefault(tuple(v for v, _, _ in row), []).append(row)
  whole = {vecs: rows for vecs, rows in tiles.items() if len(vecs) >= 2 and len(rows) == vecs[0].dtype.count and
           sorted(r[0][1] for r in rows) == list(range(len(rows))) and all(k == r[0][1] for r in rows for _, k, _ in r)}
  # the tiles' vectors at most half the registers: a 3x3 conv's weight gradient with 28 (r_8_128_14_14) spilled its
  # accumulators in the reduce loop (26 -> 141 zmm references to the stack) and ran 1.9x slower
  if not whole or sum(len(vecs) for vecs in whole) > regs // 2: return None
  out: list[UOp] = []
  for vecs, rows in tiles.items():
    if vecs not in whole:
      rest += [UOp(Ops.STORE, dtypes.void, (ix, v.gep(k))) for r in rows for v, k, ix in r]
      continue
    n, width = len(vecs), vecs[0].dtype.count
    # rows longer than ROW_MAX in equal pieces, each transposed on its own (14 columns as 7 + 7)
    step = -(-n // -(-n // min(ROW_MAX, width)))
    for a in range(0, n, step):
      m = min(step, n - a)
      pad = 1 << (m - 1).bit_length()   # (padded to a power of two with the last column again: its lanes are never stored)
      cols = transpose_rows([[v] for v in vecs[a:a + m] + (vecs[a + m - 1],) * (pad - m)], pad, SIDE_BY_SIDE)
      gate = row_gate(m, pad)
      out += [_row_store(r[a][2], cols[r[0][1]], gate) for r in rows]
  return UOp(Ops.GROUP, dtypes.void, tuple(out + rest)) if out else None

def pm_store_rows(regs: int) -> PatternMatcher:
  """store_rows on the GROUP of stores a loop ENDs with (all of a tile's: the registers it holds are counted at once), for a
  renderer with `regs` vector registers that stores a vector under a constant gate per lane in one instruction (AVX-512)."""
  def end(e: UOp) -> UOp | None: return None if (g := store_rows(e.src[0], regs)) is None else e.replace(src=(g,) + e.src[1:])
  return PatternMatcher([(UPat(Ops.END, src=(UPat(Ops.GROUP),), allow_any_len=True, name="e"), end)], name="tile rows")
