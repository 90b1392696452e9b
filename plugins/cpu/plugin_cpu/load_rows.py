"""A register tile read as rows: vectors gathered a lane at a time, lane k of the j-th vector at `base + k*S + j` (a 3x3 conv's
weight panel: 16 output channels by 3 taps, S the channel's stride; a residual add's input, NCHW: 16 channels a plane apart by
7 pixels), are W rows of L neighbours in memory. Each row loaded as one vector under a constant mask and the rows transposed in
registers (shuffle.transpose_rows) give the L vectors: ResNet-18's 3x3 convs gathered 96 (and the residual adds another 224)
floats one by one, an insertelement each. ResNet-18 b8 inference's LLVM compile so: 12 kernels 0.80-0.94x the time (the
residual adds' 0.80), but the two 512-channel ones whose panel copies one tile of 16 channels a kh step 1.09x (LLVM then
unrolls that loop fully), 0.945x in all; the kernels 0.97-1.008x the time (one thread). AVX-512 only, as tile_rows' row stores."""
from __future__ import annotations
from core.ir.dtype import dtypes
from core.ir.ops import UOp, Ops
from core.ir.pattern import PatternMatcher, UPat
from core.codegen.opt.shuffle import transpose_rows
from plugin_cpu.tile_rows import ROW_MAX, ROW_ARG, row_gate

LOAD_ROWS = True   # load_rows on (a switch for comparisons)

def _lane_load(x: UOp) -> tuple[UOp, UOp, int] | None:
  """(buffer, index terms, constant) of an ungated scalar LOAD at `terms + constant`."""
  if x.op is not Ops.LOAD or len(x.src) != 1 or x.dtype.count != 1 or x.dtype is dtypes.bool: return None
  if (idx := x.src[0]).op is not Ops.INDEX or len(idx.src) != 2: return None
  i = idx.src[1]
  return (idx.src[0], *((i.src[0], i.src[1].arg) if i.op is Ops.ADD and i.src[1].op is Ops.CONST else (i, 0)))

def _column(v: UOp) -> tuple[tuple[UOp, UOp, int, int], int] | None:
  """((buffer, terms, lane stride, lanes), first lane's constant) of a VECTORIZE of lane loads at terms + c + k * stride
  (lane k), a power-of-two count of lanes, with a stride other than 0 (a broadcast) and 1 (a row)."""
  if (n := len(v.src)) < 2 or n & (n - 1) or (first := _lane_load(v.src[0])) is None: return None
  buf, terms, c = first
  lanes = [_lane_load(s) for s in v.src[1:]]
  if lanes[0] is None or (step := lanes[0][2] - c) in (0, 1): return None
  if any(p is None or p[0] is not buf or p[1] is not terms or p[2] != c + (k + 1) * step for k, p in enumerate(lanes)): return None
  return (buf, terms, step, n), c

def _stored(topo: dict[UOp, None]) -> set[UOp]:
  return {u.src[0].src[0] for u in topo if u.op is Ops.STORE and u.src[0].op is Ops.INDEX}

def column_rows(sink: UOp) -> dict[UOp, UOp]:
  """Each tile of gathered columns (_column: L >= 2 of them at neighbouring constants, of a buffer the kernel does not store to)
  of the kernel `sink` -> its columns read as its W rows (masked vector loads of L lanes padded to a power of two, arg
  ROW_ARG) transposed, in pieces of at most ROW_MAX columns as tile_rows stores them: {column: its transposed rows' lanes}."""
  sub: dict[UOp, UOp] = {}
  if not LOAD_ROWS: return sub
  topo = sink.toposort()
  cols: dict[tuple[UOp, UOp, int, int], dict[int, UOp]] = {}
  for v in topo:
    if v.op is Ops.VECTORIZE and v.src[0].op is Ops.LOAD and (p := _column(v)) is not None: cols.setdefault(p[0], {})[p[1]] = v
  if not cols: return sub
  stored = _stored(topo)
  for (buf, _, _, width), at in cols.items():
    if buf in stored: continue
    for c in at:
      if c - 1 in at: continue   # not a tile's first column
      n = 0
      while c + n in at: n += 1
      if n < 2: continue
      step = -(-n // -(-n // min(ROW_MAX, width)))
      for a in range(c, c + n, step):
        m = min(step, c + n - a)
        pad = 1 << (m - 1).bit_length()
        gate = row_gate(m, pad)
        rows = [UOp(Ops.LOAD, ld.dtype.vec(pad), (ld.src[0] if gate is None else ld.src[0].replace(src=ld.src[0].src + (gate,)),), ROW_ARG)
                for ld in at[a].src]
        for j, col in enumerate(transpose_rows([[r] for r in rows], pad)[:m]): sub[at[a + j]] = col
  return sub

class RowLoads:
  """The LLVM renderer's rules' ctx for one kernel: its columns' rows (column_rows of the kernel as lowered, before the rules,
  which rewrite no load, index or gathered VECTORIZE), found when the rules first meet a VECTORIZE. Each column is so replaced
  where the rules' walk meets it and its users rebuilt once, where a rule on the kernel's SINK substituted the whole kernel
  after the walk and walked what that rebuilt a second time (ResNet-18 b8 inference: ~1 ms a kernel of ~21)."""
  def __init__(self, sink: UOp):
    self.sink = sink
    self.sub: dict[UOp, UOp] | None = None
  def rows(self, v: UOp) -> UOp | None:
    """Column v's transposed rows, or None where v is no tile's column."""
    if self.sub is None: self.sub = column_rows(self.sink)
    return self.sub.get(v)

pm_load_rows = PatternMatcher([(UPat(Ops.VECTORIZE, name="v"), lambda ctx, v: None if ctx is None else ctx.rows(v))], name="load rows")
