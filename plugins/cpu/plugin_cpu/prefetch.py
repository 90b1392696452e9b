"""Software prefetch of the rows ahead in row kernels (softmax, layernorm) and of the next panel in packed copies: which loads also
prefetch, decided on the linear kernel for both CPU renderers.

A row kernel reads each row of a buffer in a first reduce loop (from memory), then again in later loops (from the L1 cache). While
the later loops run, nothing fetches the next row: the hardware prefetcher follows misses, and there are none, so the time is
memory plus compute. The loads of the second reduce loop over the buffer also prefetch the same place a row or two on
(rows_ahead), so a later row's first pass finds it in the cache (one row on, one Zen 3 thread, layernorm 4096x1024: LLVM
2.38 -> 1.70 ms, C 2.63 -> 1.76).

A packed product (core.codegen.opt.pack) copies a panel of an input, then computes on it: the copy waits on memory while no FMA
runs, and the compute reads no memory. The copy's loads also prefetch the next panel, which then arrives while this one is
computed on (panel_offsets). A product whose input is read in place beyond the L2 (heuristic._panel_in_place: few row blocks
reuse each panel) finds its panel in cache only from the second row block on; its loads prefetch the next panel (reread_offsets).

A transpose in strips sweeps along its input rows, a line of each of many rows far apart a step: its loads also prefetch the
same rows a few steps on (sweep_offsets). A permute whose transposing tile steps by more than a line (NHWC -> NCHW) prefetches the
lines its tile reads some steps on (tile_sweep_offsets). A reduction that streams a buffer beyond the last-level cache (a.sum() of
16M floats) prefetches a few lines ahead of its loads into the L2 (stream_offsets)."""
from __future__ import annotations
import functools
from math import prod
from core.codegen.linearize import has_shuffle_network
from core.ir.ops import union_of
from core.helpers import LRUCache
from core.ir.dtype import PtrDType, AddrSpace, global_nbytes
from core.ir.ops import UOp, Ops, AxisType
from core.ir.symbolic import split_sum
from plugin_cpu.streaming import NT_MIN_BYTES, cache_bytes

ROW_MAX_BYTES = 16 << 10   # a row the later passes read from L1 (32 KiB on current x86 cores), with room for the next one

# A row kernel prefetches ROWS_AHEAD rows on where this row and those up to the prefetched one fit half the L1 data cache, else
# the next row. One row on, the prefetches go out during the row's later passes only, a fraction of a row's time before the next
# row's first pass reads it (4 KiB rows at 40 GB/s a thread: ~100 ns, about a memory latency). Zen 5, 2 threads, both variants
# in one process, each Jit-captured and sampled in turn with the copy loop, runs at load 13-23, speed 2 rows on / 1, medians of
# 30 pairs per run: layernorm 4096x1024 1.037, 1.055, 1.099, 0.994, 1.083; softmax 4096x1000 1.046, 1.026, 1.019, 1.076; AVX2
# code (znver3) layernorm 1.031, 1.019, 1.048 (its softmax read the next row's max ahead and prefetched nothing then: 0.998,
# 0.986, the noise of the method; it prefetches now: _shared_rows); C renderer layernorm 1.048, softmax 1.005 (compute-bound);
# the GPT-2 block row (its 256x768 layernorms) 1.003 / 1.002 the time native / AVX2. 3 rows on no better than 2 (1.004, 1.017, 1.010 over 2 rows on)
ROWS_AHEAD = 2
# On the Intel server core (heuristic.big_l2: a 2 MiB L2) ROWS_AHEAD_BIG_L2 rows on, where the rows' buffer is over the panel
# budget (half the L2: the L2 does not keep it) and the pass is not an AVX2 softmax's exp pass (the rows it shares with the max
# pass, _shared_rows: compute-bound). A 2-vCPU Xeon guest (Sapphire Rapids class), 2 threads, the kernels of each setting in one
# process sampled in turn with the copy loop, speed 4 rows on / 2, medians of 31-41 pairs: layernorm 4096x1024 1.078, 1.036,
# 1.045, 1.053, 1.050, 1.040 (3 rows on 0.999, 1.027, 1.020; 5 rows 1.042, 1.055); AVX2 code (znver3) 1.021, 1.033; softmax
# 4096x1000 0.995, 1.007, 0.997, 1.000; AVX2 code's exp pass 0.993, 0.993, 0.992, 0.995. Time 4 rows on / 2, kernels alone,
# medians of 61: GPT-2 block's 256x768 layernorms (768 KiB) 1.025, 1.053, its r_12_64_256 1.020: those keep ROWS_AHEAD; its
# 12x256x256 softmax (3 MiB) 1.000, 0.999, sdpa's 0.981. The Zen hosts keep ROWS_AHEAD
ROWS_AHEAD_BIG_L2 = 4

# each prefetch's locality hint (llvm.prefetch's and __builtin_prefetch's 0-3; on x86 3 is prefetcht0, into the L1, and 1
# prefetcht2, into the L2 only). An in-place panel's next one (reread_offsets) goes to the L2 where a panel is over half the L1
# data cache (L1_BYTES): the L1 then can't hold it beside the current one, which every row block reads again, and the next one
# prefetched into the L1 evicted that. 1x1 convs, one Zen 5 thread (48 KiB L1), thread time, the same kernels with either hint
# interleaved in one process, medians of 9-15, GFLOP/s L1 -> L2: panels of 32 KiB (2 vectors x 8 rows, 256 channels)
# 32x256x28x28 -> 64 209 -> 225, 208 -> 226, 8x256x28x28 -> 64 211 -> 232; 36 KiB (4 x 4, 144 channels) 8x144x56x56 -> 24
# 202 -> 224, 185 -> 203; 24 KiB, kept in the L1: 8x192x28x28 -> 32 240 -> 245, 16x96x56x56 -> 24 235 -> 226, 239 -> 232,
# 8x96x56x56 -> 24 250 -> 241; 16 KiB (1 x 16) 220-221 either way. Packed products' copies (panel_offsets) keep the L1
L1_LOCALITY, L2_LOCALITY = 3, 1
L1_BYTES = cache_bytes(1) or 32 << 10

@functools.cache
def line_bytes() -> int:
  """This CPU's cache line in bytes (sysfs; 64, that of x86 and most ARM cores, when unknown)."""
  try:
    with open("/sys/devices/system/cpu/cpu0/cache/index0/coherency_line_size") as f: return int(f.read()) or 64
  except (OSError, ValueError): return 64

def line_offsets(load: UOp, off: int | tuple[int, ...]) -> list[int]:
  """The distances in elements to prefetch at for a LOAD that prefetches `off` elements on: one per cache line its vector spans
  (a tuple: those distances, a line each, as row_tile_offsets gives a scalar load for its tile's rows). A prefetch fetches one
  line, so a vector of two lines (32 floats on AVX-512) with one prefetch left every other line of the next row to its first
  pass (a hand-written AVX-512 layernorm 4096x1024, one Zen 5 thread: 1.00 -> 0.80 ms)."""
  if isinstance(off, tuple): return list(off)
  per_line = max(1, line_bytes() // load.dtype.scalar().itemsize)
  return [off + k * per_line for k in range(max(1, -(-load.dtype.count // per_line)))]

def loop_deps(uops: list[UOp]) -> dict[UOp, frozenset[UOp]]:
  """The loops each value depends on, in one pass over the linear order (a toposort per load doubled a matmul's render time)."""
  deps: dict[UOp, frozenset[UOp]] = {}
  for u in uops:
    if u.op is Ops.END: continue
    if u.op is Ops.RANGE:
      deps[u] = frozenset((u,))
      continue
    deps[u] = union_of(deps, u.src)
  return deps

def is_global_param(buf: UOp) -> bool:
  """Whether `buf` is one of the kernel's buffer parameters in global memory (not a REG or LOCAL buffer the kernel defines)."""
  return buf.op is Ops.PARAM and isinstance(buf.dtype, PtrDType) and buf.dtype.addrspace == AddrSpace.GLOBAL

# (idx without its constant offset, loop) -> step: an unrolled tile's loads differ only in their constant offsets (a 3x3 conv's
# 292 loads on AVX-512 share 5 steps, and simplifying each was 190 ms of its 300 ms codegen)
_steps: LRUCache = LRUCache("index_steps", 4096)

def index_step(idx: UOp, r: UOp) -> int | None:
  """How far index `idx` moves when loop `r` steps by one, where that is a constant (else None)."""
  while idx.op is Ops.ADD and idx.src[1].op is Ops.CONST: idx = idx.src[0]   # a constant offset moves nothing
  if (step := _steps.get((idx, r), _steps)) is _steps:   # (the cache itself: a miss, where None is a step that is not constant)
    if (step := _linear_step(idx, r)) is None:
      step = s.arg if (s := (idx.substitute({r: r + 1}) - idx).simplify()).op is Ops.CONST else None
    _steps[idx, r] = step
  return step

def _linear_step(idx: UOp, r: UOp) -> int | None:
  """r's coefficient in sum `idx` where r appears in it only as terms r or r*c (c an int constant) and every other term is
  free of r, as simplify would find it (~0.6 ms a substitute and simplify); else None."""
  if idx.dtype.count != 1: return None
  step, todo = 0, [idx]
  while todo:
    u = todo.pop()
    if u.op is Ops.ADD: todo += u.src
    elif u is r: step += 1
    elif u.op is Ops.MUL and u.src[0] is r and u.src[1].op is Ops.CONST and type(u.src[1].arg) is int: step += u.src[1].arg
    elif r in u.toposort(): return None
  return step

def global_read(x: UOp) -> UOp | None:
  """The global buffer parameter that `x` loads from through an INDEX, or None when `x` is no such load."""
  return buf if x.op is Ops.LOAD and x.src[0].op is Ops.INDEX and is_global_param(buf := x.src[0].src[0]) else None

def _copied(uops: list[UOp]) -> list[UOp]:
  """The values of a pack's copy: global LOADs stored as they are into a REG buffer, or vectors of them or of their lanes (a
  transposed or strided panel), or of the lanes of such vectors (a panel whose rows load_rows transposes by shuffles)."""
  known: dict[UOp, bool] = {}
  def _read(x: UOp) -> bool:
    if x.op is Ops.GEP: x = x.src[0]
    if x.op is not Ops.VECTORIZE: return global_read(x) is not None
    if (r := known.get(x)) is None: r = known[x] = all(map(_read, x.src))
    return r
  return [st.src[1] for st in uops if st.op is Ops.STORE and st.src[0].op is Ops.INDEX and isinstance(dst := st.src[0].src[0].dtype, PtrDType)
          and dst.addrspace == AddrSpace.REG and _read(st.src[1])]

# where no loop outside a pack's copy steps to the next panel (the panel loop became the THREAD axis: heuristic._panel_blocks), the
# copy's loads prefetch this many of its own cache lines ahead along its outermost loop: enough misses in flight to cover memory
# latency. A matmul's copy of 2048 rows x 256 bytes from memory, 8 KiB apart (C, one Zen 3 thread, best of 20 per block):
# none 56 us, 8 lines ahead 46, 16 44, 32 41, 64 41; 0 turns it off (a switch for comparisons)
COPY_AHEAD_LINES = 32

def panel_offsets(uops: list[UOp], deps: dict[UOp, frozenset[UOp]], order: dict[UOp, int], copied: list[UOp]) -> dict[UOp, int]:
  """For each load of a pack's copy (a global LOAD stored as it is into a REG buffer), the distance to the same place in the
  next panel: its address's step along the innermost loop it uses other than the copy's own (OUTER) loops, where that is a
  positive constant. The last panel's prefetch lies past it, unused (a prefetch never faults). One Zen 5, conv 32x256x28x28
  -> 64 1x1 (13 panels of 64 pixels an image, each reused by 16 row blocks): one thread 150 -> 165 GFLOP/s, two 274 -> 343.
  A copy under no such loop (its panel is the thread block's: the next panel is another block, claimed by whichever thread is
  free) prefetches ahead within itself: its address's step along the copy's outermost loop times the iterations that read
  COPY_AHEAD_LINES lines (copy_ahead_offsets). Its rows lie a matrix row apart (4-8 KiB), a new page each, which the hardware
  prefetchers don't cross: without it a threaded matmul's copy waited on each row (about 1% of a 1024 or 2048 matmul)."""
  out: dict[UOp, int] = {}
  for x in copied:
    if x.op is not Ops.LOAD: continue
    idx = x.src[0].src[1]
    if not (loops := [r for r in deps.get(idx, frozenset()) if r.arg[-1] is not AxisType.OUTER]): continue
    panel = max(loops, key=lambda r: order[r])
    if (step := index_step(idx, panel)) is not None and step > 0: out[x] = step
  return out | copy_ahead_offsets(uops, deps, order, copied)

def copy_ahead_offsets(uops: list[UOp], deps: dict[UOp, frozenset[UOp]], order: dict[UOp, int], copied: list[UOp]) -> dict[UOp, int]:
  """For each load of a pack's copy under no loop but its own (OUTER) ones, the distance to the place it reads COPY_AHEAD_LINES
  cache lines of the copy later: its address's step along the outermost copy loop it uses (a positive constant) times the
  iterations of that loop that read those lines (every copy load under it, with the loops inside it, counts)."""
  copied = [x for x in copied if x.op is Ops.LOAD]
  outer: dict[UOp, tuple[UOp, int]] = {}   # load -> (the outermost loop it uses, its address's step along it)
  for x in copied:
    idx, rngs = x.src[0].src[1], deps.get(x.src[0].src[1], frozenset())
    if not rngs or any(r.arg[-1] is not AxisType.OUTER for r in rngs): continue
    r = min(rngs, key=lambda r: order[r])
    if (step := index_step(idx, r)) is not None and step > 0: outer[x] = (r, step)
  def per_iter(loop: UOp) -> int:   # bytes the copy reads per iteration of `loop`
    return sum(x.dtype.itemsize * prod(r.src[0].arg if r.src[0].op is Ops.CONST else 1 for r in deps.get(x.src[0].src[1], frozenset())
                                       if order[r] > order[loop]) for x in copied if loop in deps.get(x.src[0].src[1], frozenset()))
  ahead = {r: max(1, -(-COPY_AHEAD_LINES * line_bytes() // per_iter(r))) for r in {r for r, _ in outer.values()}} if COPY_AHEAD_LINES else {}
  return {x: step * ahead[r] for x, (r, step) in outer.items() if r in ahead}

# A packed product's FMA loop reads its panel (the pack's REG buffer) from the L2 where the panel is bigger than the L1 (a reduce of
# 1024 over 64 columns: 256 KiB), a line per vector a reduce step. The loads of the panel also prefetch it PACKED_AHEAD_BYTES on
# into the L1 (each reduce step's vectors the same place that many bytes of steps on), on the cores the register tile takes
# MM_TILES_BIG_L2 on (heuristic.big_l2: a 2 MiB L2, the Intel AVX-512 server core; the Zen 3/4/5 are unmeasured and keep their
# code) with AVX-512 code. That Intel guest, one thread, thread time, the same 4x6 kernel's IR with and without interleaved in
# one process, medians of 7-15, GFLOP/s: 1024^3 none 179.7, 185.3, 178.8; 1 KiB on 185.5, 195.7, 188.5; 2 KiB 187.9, 194.0;
# 4 KiB 188.0, 195.8, 191.1; 8 KiB 184.3; 2048^3 none 187.6, 2 KiB 196.7, 4 KiB 196.8; into the L2 (prefetcht1), 2 KiB: 178.0
PACKED_AHEAD_BYTES = 2048
PACKED_PREFETCH = True      # packed_panel_offsets on (a switch for comparisons)
PACKED_PREFETCH_SIMD = 64   # vector bytes of the targets that take it (AVX-512: measured)

def packed_panel_offsets(uops: list[UOp], deps: dict[UOp, frozenset[UOp]], order: dict[UOp, int], copied: list[UOp]) -> dict[UOp, int]:
  """For each vector load of a pack's panel (a REG buffer its copy stores into) bigger than L1_BYTES, inside a reduce loop
  along which its index steps by a positive constant: that step times the steps that cover PACKED_AHEAD_BYTES."""
  values = set(copied)
  panels = {st.src[0].src[0] for st in uops if st.op is Ops.STORE and st.src[1] in values and st.src[0].op is Ops.INDEX}
  out: dict[UOp, int] = {}
  for x in uops:
    if x.op is not Ops.LOAD or x.dtype.count == 1 or x.src[0].op is not Ops.INDEX or (buf := x.src[0].src[0]) not in panels or \
       not isinstance(pt := buf.dtype, PtrDType) or pt.size * pt.base.itemsize <= L1_BYTES: continue
    idx = x.src[0].src[1]
    if not (reds := [r for r in deps.get(idx, frozenset()) if r.arg[-1] is AxisType.REDUCE]): continue
    if (step := index_step(idx, max(reds, key=lambda r: order[r]))) is not None and step > 0:
      out[x] = step * max(1, PACKED_AHEAD_BYTES // (step * buf.dtype.base.itemsize))
  return out

# an in-place panel's next one is prefetched by the first row block's loads, and again by every other row block's (AVX2's 2 x 6
# tile: 64 channels in 11 blocks, each line 11 times): one prefetch instruction per reduce step each, and the first block's
# burst of misses. Where `spread` and a panel with the next one fill the L1 (L1_BYTES), row block b's reduce step k prefetches
# only where k = b modulo the greatest power of two up to the row blocks (8 of 11): every line once or twice, the misses spread
# over the blocks, for a compare and a branch per step. One Zen 3 thread, 1x1 conv 32x256x28x28 -> 64, one prefetch per line,
# the kernel's LLVM IR gated by hand, A/B in one process, medians of 11, time vs every block's: mod 8 0.96, 0.92, mod 4 0.96,
# 0.94, mod 2 0.97, 0.97, mod 11 (each line once) 0.96, 0.91; the same offset chosen by a select in place of the branch (a
# prefetch of the current line) 0.96-0.99; only in block 0 1.12 (its burst alone leaves lines missing: the later blocks fetch
# them). This rule vs every block's (both once per line), same measure: 32x256x28x28 -> 64 (16 KiB panels) 0.98, 0.98; 16x256
# 0.97, 0.97; 8x256 0.96, 0.96; 8x256 -> 72 0.99, 0.96; but 32x192 (12 KiB, two fit the L1 with room) 0.99, 0.99 and 32x128
# (8 KiB) 1.02, 1.02 (twice): hence the L1 bound. Measured with 16 vector registers only (AVX2): renderers with
# SPREAD_BELOW_REGS or more (AVX-512's 8-row tiles) keep every block's. The LLVM renderer's alone: the C renderer's source,
# the gate a conditional expression, ran 0.78x the time built by clang but 1.22x by gcc (32x256x28x28 -> 32 and 4x256 -> 32).
SPREAD_BELOW_REGS = 32
# and so do AVX-512 renderers on a big_l2 core (heuristic.big_l2: the Intel AVX-512 server core), where every block's prefetch
# (8 blocks of 8 channels, 32 KiB panels: each line prefetched by all 8) ran slower. This 2-vCPU Xeon
# guest, 32x256x28x28 -> 64, the kernel rendered both ways in one process, A/B interleaved, medians [quartiles] of the pair ratios
# (load 13-15): 2 threads (chrt, wall) 0.951 [0.923-0.992], 0.971 [0.942-0.991] (61 pairs), 0.967 [0.938-0.998] (41); one thread
# 0.957 [0.939-0.978] (31). The Zen 5 (AVX-512, 1 MiB L2) keeps every block's: unmeasured there
SPREAD_BIG_L2 = True
# (the gate of a spread prefetch: the reduce range, the row-block range or a constant, the mask both are compared under)
Spread = tuple[UOp, UOp | int, int]

def reread_offsets(uops: list[UOp], deps: dict[UOp, frozenset[UOp]], order: dict[UOp, int], budget: int,
                   spread: bool = False) -> dict[UOp, tuple[int, int, Spread | None]]:
  """For each global load in a reduce loop of a buffer beyond `budget` bytes (the renderer's panel_budget) that is re-read across
  a loop it doesn't use (a product's column-side input read in place: every row block reads the panel again), (the step of its
  address along the innermost loop it uses outside that one (the next panel), where that is a positive constant; the locality
  hint: L2_LOCALITY where the panel's loads read over half of L1_BYTES, else L1_LOCALITY; with `spread`, the gate that
  spreads it over the row blocks (see SPREAD_BELOW_REGS) where one row loop and one reduce loop lie inside the panel's, or
  None; each line once: _once_per_line). One Zen 5 thread, conv 32x256x28x28 -> 64 1x1 in place: 125 GFLOP/s without, 205
  with (170 packed); from the L3 (8 images) it costs 222 -> 216."""
  out: dict[UOp, int] = {}
  gates: dict[UOp, Spread] = {}
  panels: dict[UOp, tuple[UOp, UOp]] = {}             # load -> (its buffer, the next-panel loop)
  panel_bytes: dict[tuple[UOp, UOp], int] = {}         # (buffer, next-panel loop) -> bytes its loads read per panel
  opened: list[UOp] = []   # the loops open at each point of the linear order
  for x in uops:
    if x.op is Ops.RANGE: opened.append(x)
    elif x.op is Ops.END: opened = [r for r in opened if r not in x.src]
    if (buf := global_read(x)) is None or global_nbytes(buf.dtype) <= budget: continue
    idx = x.src[0].src[1]
    rngs = deps.get(idx, frozenset())
    if not any(r.arg[-1] is AxisType.REDUCE for r in rngs): continue
    if not (loops := [r for r in rngs if r.arg[-1] not in (AxisType.REDUCE, AxisType.OUTER)]): continue
    panel = max(loops, key=lambda r: order[r])
    # (every load of the panel counts, those that prefetch nothing too: a padded one, whose gated address steps by no constant)
    trips = prod(r.src[0].arg if r.src[0].op is Ops.CONST else 1 for r in rngs if r.arg[-1] is AxisType.REDUCE)
    panel_bytes[(buf, panel)] = panel_bytes.get((buf, panel), 0) + x.dtype.itemsize * trips
    if not (rows := [r for r in opened if order[r] > order[panel] and r not in rngs and r.arg[-1] is not AxisType.REDUCE]): continue
    if (step := index_step(idx, panel)) is not None and step > 0: out[x], panels[x] = step, (buf, panel)
    reds = [r for r in rngs if r.arg[-1] is AxisType.REDUCE]
    if spread and x in out and len(rows) == 1 and len(reds) == 1 and rows[0].src[0].op is Ops.CONST and (n := rows[0].src[0].arg) >= 2:
      gates[x] = (reds[0], rows[0], (1 << (n.bit_length() - 1)) - 1)
  return _once_per_line({x: (o, L2_LOCALITY if 2 * panel_bytes[panels[x]] > L1_BYTES else L1_LOCALITY,
                             gates.get(x) if 2 * panel_bytes[panels[x]] >= L1_BYTES else None) for x, o in out.items()})

def _once_per_line(offs: dict[UOp, tuple[int, int, Spread | None]]) -> dict[UOp, tuple[int, int, Spread | None]]:
  """offs without the loads whose every prefetched line another load of the same buffer and index terms (up to a constant)
  prefetches already: AVX2's two 8-float vectors of a 64-byte panel line each prefetched that line, one prefetch instruction
  per reduce step too many (one Zen 3 thread, 1x1 conv 32x256x28x28 -> 64, A/B in one process, medians of 11: 0.97x the
  time). Only where the index terms and the distance are whole lines (the buffer starts on a line: the lines each constant
  falls on are known); a vector of a line or more keeps its prefetches (AVX-512's 16 floats)."""
  groups: dict[tuple, list[tuple[int, UOp]]] = {}
  for x, (o, loc, gate) in offs.items():
    per_line = max(1, line_bytes() // x.dtype.scalar().itemsize)
    parts = split_sum(x.src[0].src[1])
    if parts is None or o % per_line or any(c % per_line for _, c in parts[0]): continue
    groups.setdefault((x.src[0].src[0], frozenset(parts[0]), o, loc, gate, per_line), []).append((parts[1], x))
  out = dict(offs)
  for (_, _, o, _, _, per_line), loads in groups.items():
    fetched: set[int] = set()   # the lines the kept loads prefetch, in lines from the terms' own
    for c, x in sorted(loads, key=lambda cx: cx[0]):
      if all(ln in fetched for ln in range((c + o) // per_line, (c + o + x.dtype.count - 1) // per_line + 1)): del out[x]
      else: fetched.update((c + p) // per_line for p in line_offsets(x, o))
  return out

WINDOW_PREFETCH = True     # window_offsets on (a switch for comparisons)

def window_offsets(uops: list[UOp], deps: dict[UOp, frozenset[UOp]], order: dict[UOp, int], budget: int,
                   copied: list[UOp]) -> dict[UOp, int]:
  """For a conv's broadcast input loads (scalar global LOADs in a reduce loop of a buffer beyond `budget` bytes, beside a pack
  copy: heuristic._channel_block's tile), the step of the address along the output rows: the innermost loop it uses whose step
  is a cache line or more, inside at most a row (ROW_MAX_BYTES), with a loop further in that steps less (the pixel blocks, whose
  neighbours read the same lines). Each reduce step reads another input channel's plane, so the tile reads a line or two of
  every channel per row: too many streams for the hardware prefetcher, and the first pixel block of each row waited on all of
  them. Only the first and last load of each window row (one index up to a constant) prefetch: their lines are all the row's.
  A product's row-side loads (no loop inside the row block) and the next image of a 7x7 map (more than a row on) don't.
  One Zen 5 thread, 3x3 32x64x56x56 (27.5 MiB padded input): 212-219 -> 221-232 GFLOP/s."""
  copies = set(copied)
  rows: dict[UOp, tuple[frozenset[tuple[UOp, int]], int]] = {}   # load -> (its index's terms, its constant)
  for x in uops:
    if x.dtype.count != 1 or x in copies or (buf := global_read(x)) is None or \
       global_nbytes(buf.dtype) <= budget: continue
    idx = x.src[0].src[1]
    if any(r.arg[-1] is AxisType.REDUCE for r in deps.get(idx, frozenset())) and (parts := split_sum(idx)) is not None:
      rows[x] = (frozenset(parts[0]), parts[1])
  ends: dict[frozenset[tuple[UOp, int]], list[UOp]] = {}   # a window row's terms -> its loads of the least and greatest constant
  for x, (terms, c) in rows.items():
    end = ends.setdefault(terms, [x, x])
    if c < rows[end[0]][1]: end[0] = x
    if c > rows[end[1]][1]: end[1] = x
  out: dict[UOp, int] = {}
  for x in {x for end in ends.values() for x in end}:
    idx, item = x.src[0].src[1], x.dtype.itemsize
    loops = sorted((r for r in deps.get(idx, frozenset()) if r.arg[-1] not in (AxisType.REDUCE, AxisType.OUTER)), key=lambda r: -order[r])
    for i, r in enumerate(loops):
      if (step := index_step(idx, r)) is None or step <= 0: break
      if step * item >= line_bytes():
        if i and step * item <= ROW_MAX_BYTES: out[x] = step
        break
  return out

# A packed product's row-side loads (a matmul's A, broadcast a row of the row tile each: no loop inside the row block, which
# window_offsets leaves) read each row tile from the L3 for the first panel of a group and from the L2 for the rest: nothing
# fetches the next tile before its first reduce steps miss. The tile's first load also prefetches the same place of each of
# its rows one row tile on into the L2, where the reduce index starts a line: each line once, for a compare and a branch a
# step. znver3 code on a Zen 4, A/B in one process (rule off / on), medians of 15-61, load 6-20, one thread (thread time) and
# two (process CPU time, no numpy between: its spinning threads slowed whichever ran next), GFLOP/s: 2048^3 93-104 -> 94-106
# (+0.1 to +2.4% in 7 runs), 2T 99.7 -> 101.1, 102.3 -> 103.2; 2048x768x768 99.3 -> 109.6, 2T 95.6 -> 104.1; 2048x768x3072
# 105.6 -> 110.1, 2T 100.2 -> 107.2; 1024^3 101.6 -> 102.2, 108.6 -> 108.3, 2T 100.1 -> 103.4; a @ b.T 1024 101.8 -> 105.5;
# 256x768x3072 and 256x3072x768 unchanged (+-0.4%). Hand-edited variants of 2048^3 (104.8 before): a prefetch per load per
# step 86.8, into the L1 97.6 (it evicts the panel's lines); the rule's first form, a gate a load between the padded rows'
# gated loads, kept LLVM from unswitching the loop on those: 48. Whatever the tile's size: it took tiles over half the L1
# only (K = 1024 on a Zen 3 or 4, not on the Zen 5's 48 KiB), but A beyond the L2 is read from the L3 all the same. znver3
# code on a Zen 5, one thread (thread time), A/B in one process, medians of 25-41 pair ratios [min-max], load 13-15,
# 1024xKx1024 (rule off below half the L1 / on): K = 1024 1.034 [1.007-1.056] (122.7 -> 127.6 GFLOP/s), 768 1.017
# [0.987-1.055], 512 1.028 [1.006-1.056], 256 1.010 [0.978-1.032]. Measured with 16 vector registers only (AVX2), LLVM
# renderer only, as SPREAD_BELOW_REGS
ROW_TILE_PREFETCH = True   # row_tile_offsets on (a switch for comparisons)

def row_tile_offsets(uops: list[UOp], deps: dict[UOp, frozenset[UOp]], order: dict[UOp, int], budget: int,
                     copied: list[UOp]) -> dict[UOp, tuple[tuple[int, ...], int, Spread]]:
  """For a packed product's row tiles (scalar global LOADs in a reduce loop of a buffer beyond `budget` bytes, beside a pack's
  copy, one element apart a reduce step, with the same index terms: its rows) whose innermost other loop steps by a line or
  more: for the tile's first load (the least constant), the distances to each row's place one step of that loop on,
  L2_LOCALITY, and the gate of the reduce steps that start a line."""
  copies, per_line = set(copied), line_bytes()
  rows: dict[UOp, tuple[UOp, int, frozenset[tuple[UOp, int]], int]] = {}   # load -> (its reduce, row step, index terms, constant)
  for x in uops:
    if x.dtype.count != 1 or x in copies or (buf := global_read(x)) is None or \
       global_nbytes(buf.dtype) <= budget: continue
    idx, item = x.src[0].src[1], x.dtype.itemsize
    rngs = deps.get(idx, frozenset())
    reds = [r for r in rngs if r.arg[-1] is AxisType.REDUCE]
    loops = [r for r in rngs if r.arg[-1] not in (AxisType.REDUCE, AxisType.OUTER)]
    if len(reds) != 1 or not loops or (parts := split_sum(idx)) is None: continue
    if index_step(idx, reds[0]) != 1: continue
    row = max(loops, key=lambda r: order[r])
    if (step := index_step(idx, row)) is not None and step * item >= per_line: rows[x] = (reds[0], step, frozenset(parts[0]), parts[1])
  tiles: dict[tuple[UOp, frozenset[tuple[UOp, int]]], list[UOp]] = {}   # a row tile's loads, by reduce and index terms
  for x, (red, _, terms, _) in rows.items(): tiles.setdefault((red, terms), []).append(x)
  out: dict[UOp, tuple[tuple[int, ...], int, Spread]] = {}
  for (red, _), loads in tiles.items():
    loads = sorted(loads, key=lambda x: rows[x][3])
    first, item = loads[0], loads[0].dtype.itemsize
    if red.src[0].op is not Ops.CONST: continue
    out[first] = (tuple(rows[x][1] + rows[x][3] - rows[first][3] for x in loads), L2_LOCALITY, (red, 0, per_line // item - 1))
  return out

# A transpose in strips (heuristic.STRIP_TILES) sweeps along its input rows: each step reads the next line of each of the strip's
# rows (64 at one thread, 32 a thread at two), each row a page or more from the next: more streams than the hardware prefetchers
# follow, so a step's loads waited on memory that nothing had asked for yet. Its loads also prefetch the same rows SWEEP_AHEAD
# steps on. 2 threads, wall time at real-time priority, A/B in one process, medians of 72, GB/s (Zen 3, load 20): 4096^2 28.4 ->
# 34.6, 8192x1024 31.1 -> 35.7, 8192x2048 30.7 -> 36.4, 4096x4160 16.8 -> 22.5, 2048^2 42.4 -> 42.5 (16x4096x4096 batched 0.98-1.03x);
# 4096^2 1, 2, 3 steps on: 35.6, 36.2, 36.1 (none 32.8); the next strip's lines instead 21.0; prefetcht0 or t1 alike. One thread,
# thread time: 0.97-1.08x (8192x1024 0.97-0.99, 4096x4160 1.08)
SWEEP_PREFETCH = True     # sweep_offsets on (a switch for comparisons)
SWEEP_AHEAD = 2           # steps of the sweep the prefetched lines lie ahead
SWEEP_MIN_GAP = 4096      # bytes between the rows a sweep reads (a page: rows in other pages are other hardware-prefetch streams)
SWEEP_MIN_BYTES = 4096    # and along each row (a page of it at least: a short sweep's rows are next to each other's)
SWEEP_MAX_STEP = 4096     # bytes one step of a sweep reads at most (the 1-thread strip's 64 lines), so the next steps' fit L1 beside it
# AVX-512 targets' strips, and AVX2 ones whose sweep is all the kernel reads, prefetch them into the L2 (prefetcht2), not the L1:
# likely a prefetch into the L1 holds one of its few misses in flight until the line comes, and a step's 32-64 rows two steps
# ahead are more (not the L1 sets: with rows 64 bytes off a multiple of 4 KiB, a read-only sweep lost as much). AVX-512 code, one Zen 4 thread, thread
# time, A/B in one process, GB/s, input shapes: 4096^2 24.3 -> 28.6, 2048^2 27.4 -> 30.9, 8192x1024 22.9 -> 26.0, 1024x8192
# 24.7 -> 31.3, 3072^2 20.4 -> 26.8; 2 threads, wall at real-time priority, medians of 21: 52.2 -> 60.7, 30.8 -> 34.5, 53.9 ->
# 60.6, 59.6 -> 68.0, 58.4 -> 67.2; 4, 8 steps ahead gained no more. AVX2 code (znver3) on the same Zen 4, against our copy
# kernel in the same rounds (load 10-13; two kernels of each): one thread 4096^2 17.8/18.6 -> 21.4/21.5, 8192x1024 19.8/20.0
# -> 22.5/24.3, 2048^2 23.1/23.9 -> 27.3/27.9, 1024x8192 17.2/17.8 -> 23.7/22.7, 3072^2 19.6/19.7 -> 24.1/25.2, 2048^2 a.T + 1
# 15.3/15.7 -> 19.9/19.3; 2 threads at real-time priority, rounds whose copy ran above 60 GB/s: 4096^2 43.4/43.4 -> 49.0/49.2
# (58-59% -> 66-67% of copy), 8192x1024 43.6/44.4 -> 49.1/48.8, 2048^2 51.8/51.1 -> 56.2/55.5; with the copy contended (45-51
# GB/s) 2048^2 a.T + 1 23.6/24.1 -> 26.0/25.9. Zen 3 had measured prefetcht0 and t1 alike (2 threads, 4096^2). But an AVX2 sweep beside other global loads
# (a * a.T reads a's rows too) lost in the L2: 2 threads 21.1/20.8 -> 19.2/19.1, one 13.4/13.1 -> 12.9/12.7 (AVX-512 code even,
# 23.2/23.1 vs 23.4/23.4): AVX2 targets take the L2 only for a sweep that is all of the kernel's global loads. Narrower vectors
# (aarch64) keep the L1: not measured
SWEEP_L2_SIMD = 64        # vector bytes of the targets whose sweep prefetches into the L2
SWEEP_ALONE_L2_SIMD = 32  # and of those whose sweep does where its loads are all of the kernel's global loads

def sweep_offsets(uops: list[UOp], deps: dict[UOp, frozenset[UOp]], order: dict[UOp, int]) -> dict[UOp, int]:
  """For each global load outside reduce loops under a loop along which its address steps by at most a cache line, for
  SWEEP_MIN_BYTES or more (a sweep along the input's rows), with a loop inside it along which it steps by SWEEP_MIN_GAP
  bytes or more (a strip's tiles, rows far apart), where the sweep's loads read at most SWEEP_MAX_STEP bytes a step: the
  sweep's step (the same rows' next line)."""
  sweeps: dict[UOp, tuple[UOp, int]] = {}   # load -> (its sweep loop, its address's step along it)
  step_bytes: dict[UOp, int] = {}           # sweep loop -> bytes its loads read per step
  for x in uops:
    if (buf := global_read(x)) is None: continue
    idx, item = x.src[0].src[1], buf.dtype.base.itemsize
    if not (rngs := deps.get(idx, frozenset())) or any(r.arg[-1] is AxisType.REDUCE for r in rngs): continue
    # steps asked only where a loop could be the sweep (outermost first): each new one substitutes into and simplifies the index
    loops = sorted(rngs, key=order.__getitem__)
    for i, r in enumerate(loops):
      if r.src[0].op is Ops.CONST and r.src[0].arg * line_bytes() >= SWEEP_MIN_BYTES and i + 1 < len(loops) and \
         (s := index_step(idx, r)) is not None and 0 < s * item <= line_bytes() and r.src[0].arg * s * item >= SWEEP_MIN_BYTES and \
         any((t := index_step(idx, q)) is not None and t * item >= SWEEP_MIN_GAP for q in loops[i + 1:]):
        sweeps[x] = (r, s)
        step_bytes[r] = step_bytes.get(r, 0) + x.dtype.itemsize * prod(q.src[0].arg if q.src[0].op is Ops.CONST else 1
                                                                       for q in rngs if order[q] > order[r])
        break
  return {x: s for x, (r, s) in sweeps.items() if step_bytes[r] <= SWEEP_MAX_STEP}

# A transposing tile (a shuffle network: opt/shuffle.py) whose innermost loop steps its loads by more than a cache line (NHWC ->
# NCHW, 32x56x56x64: 8 or 16 pixels of 64 channels a step, each of its loads a line 256 bytes from the next) reads in a stride
# no hardware prefetcher follows far enough ahead. Its loads also prefetch the same lines TILE_SWEEP_AHEAD steps on, into the
# L2, where they are all of the kernel's global loads and the loop runs TILE_SWEEP_MIN_STEPS steps or more (a shorter one's
# prefetches fall mostly past its end: a 64x96 transpose's 8 steps). Zen 4, our kernels through our pool, rule off/on twice
# each, interleaved in one process with our copy kernel, medians of 21-41 rounds, GB/s (load 5-7): 32x56x56x64 one thread
# (thread time) AVX2 code 19.4/19.8 -> 25.0/25.6 (52% -> 67% of copy), AVX-512 27.6/28.0 -> 33.5/33.7; its + 1 AVX2
# 15.5/15.8 -> 28.4/28.4, AVX-512 23.9/23.5 -> 32.5/33.6; 32x28x28x128 AVX2 15.1/15.4 -> 19.2/19.9; 2 threads (wall, real-time
# priority) AVX2 57.7/57.9 -> 61.6/60.4 (80% -> 87-88% of copy), AVX-512 60.5/58.6 -> 63.0/62.6. The hand-edited IR in a C
# harness: 2 or 4 steps ahead gained less than 8, the L1 hint much less. 0 turns it off
TILE_SWEEP_AHEAD = 8
TILE_SWEEP_MIN_STEPS = 4 * TILE_SWEEP_AHEAD

def tile_sweep_offsets(uops: list[UOp], deps: dict[UOp, frozenset[UOp]], order: dict[UOp, int]) -> dict[UOp, int]:
  """Where the kernel holds a transposing tile and each of its global loads lies outside reduce loops and steps along its
  innermost loop (TILE_SWEEP_MIN_STEPS or more iterations, over SWEEP_MIN_BYTES or more) by more than a cache line and at most
  SWEEP_MAX_STEP bytes: each load's step (else none)."""
  if not has_shuffle_network(uops): return {}
  out: dict[UOp, int] = {}
  for x in uops:
    if (buf := global_read(x)) is None: continue
    idx, item = x.src[0].src[1], buf.dtype.base.itemsize
    if not (rngs := deps.get(idx, frozenset())) or any(r.arg[-1] is AxisType.REDUCE for r in rngs): return {}
    r = max(rngs, key=lambda q: order[q])
    if r.src[0].op is not Ops.CONST or (s := index_step(idx, r)) is None: return {}
    if not (line_bytes() < s * item <= SWEEP_MAX_STEP and r.src[0].arg >= TILE_SWEEP_MIN_STEPS and
            r.src[0].arg * s * item >= SWEEP_MIN_BYTES): return {}
    out[x] = s
  return out

# A reduction whose global loads all stream a buffer too big for the last-level cache (NT_MIN_BYTES: the bound of streaming
# stores) along its reduce loop, a whole line or more a load, reads it from memory as fast as the hardware prefetchers fetch it.
# On Zen 4 the same kernel ran faster over data 16 bytes off a line (each load then spans two lines) than over our 64-byte aligned
# buffers: our a.sum() kernel through our pool, per-round ratios 1.08-1.13 (line-aligned but not page-aligned: 1.01-1.07), a C
# loop of the same reads +7-10%; numpy's big arrays, torch.from_numpy's with them, lie 16 bytes off. Its loads also prefetch
# STREAM_AHEAD_LINES lines on, into the L2 (prefetcht2). a.sum() of 16M float32 (2 threads, 8 blocks of 4 rows of 4096 a step),
# the kernels alone, A/B in one process, medians of 20-25 per-round ratios (min of 10 calls each), load 9-13: 8 lines on 1.10x
# and 1.19x, 4 lines 1.07x, 32 and 128 lines 0.97x and 0.92x; into the L1 (prefetcht0) 4 lines 1.06x, 8 lines 0.79x (1 line
# 1.28x, once); the C loop, medians of 150 interleaved calls, GB/s: aligned 42.8, 16 bytes off 45.6, t2 4 and 8 lines on 45.1
# and 45.6, t0 8 lines 37.9. The non-temporal hint (prefetchnta) kept the interpreter's lines in the L3 (the Python before the
# submit, 10th percentile, 52 -> 23 us) but the kernel lost 17-27% (2-32 KiB ahead), its L3 hits on the next call among them. AVX-512
# code only (STREAM_L2_SIMD): AVX2 code (znver3's 32-byte loads) on the same Zen 4 has a smaller gap and the rule gains at most 2% there. Its a.sum()
# kernel, no prefetch, ran at the AVX-512 one with it (0.99-1.04x) and the bench's 8-lane read loop at it (one thread, 0.99-1.05x);
# the rule on it, 600-1000 interleaved rounds, medians of per-round ratios, load 2.5-5: 8 lines on 1.00-1.02x (1 and 2 threads), 16
# lines 1.01x, 4 lines 0.99x; 16 bytes off a line 1.02-1.03x (AVX-512 code there, rule off/on: 0.91x). A real AVX2 host (Zen 3)
# is unmeasured. The C renderer's kernels are unchanged too.
# Not on a Zen 5 (AVX-512 on 512-bit datapaths), where it costs: a.sum() / a.mean() of 16M floats, ours against torch in one
# process, processes alternating rule on/off at real-time priority (chrt -f 10; load 11-15 from other processes), each the
# median of 10 cells of 10 calls, 2 runs of 3 pairs, GB/s on 2 threads: sum 101-109 -> 135-142 (torch 110-130: 0.82-0.95x ->
# 1.16-1.25x), mean 102-110 -> 131-143; one thread sum 48-55 -> 55-62 (1.02-1.14x -> 1.20-1.29x torch), mean 48-59 -> 55-62.
# Where memory ran slower (~70 GB/s, the host's other load) even (1.04-1.05x torch either way); dot (a*b).sum() even (ratios to
# torch +-3%, either sign). STREAM_SKIP_FLAGS names the Zen 5 by a feature the Zen 4 lacks, the VEX-coded AVX-VNNI; Intel's
# AVX-512 server cores since Sapphire Rapids have it too, and AMX (STREAM_KEEP_FLAGS), which no Zen has: they keep the rule.
# There (a 2-vCPU Xeon guest, avx_vnni and amx_tile, load 5-7), a.sum() of 16M floats, the kernels alone, rule off/on in one
# process, interleaved with the read loop, medians [quartiles] of per-sample ratios of the off kernel's time to the on one's:
# 2 threads, process CPU time 1.055 [1.008-1.118] (200 samples), 1.091 [1.014-1.208] (200, order swapped); wall 1.034, 1.039
# (400 and 300 samples, quartiles 0.76-1.37); one thread (its 2-row kernel), CPU time 1.010 [0.939-1.105]. Later runs, 2 threads,
# CPU time: sum 1.028 [0.944-1.141], a.mean() 1.023 [0.966-1.098], a dot (a*b).sum() 0.984 [0.963-1.009] and 0.989 [0.972-1.005]
# (150-250 samples: the dot, two streams, about a percent slower with it; on the Zen 5 it was even either way). A renderer held to
# an arch (DEV=CPU:LLVM:znver4) carries neither flag (compiler._ARCH_MACROS has no AVX-VNNI) and keeps the rule
STREAM_AHEAD_LINES = 8
STREAM_L2_SIMD = 64
STREAM_SKIP_FLAGS = frozenset({"avx_vnni"})
STREAM_KEEP_FLAGS = frozenset({"amx_tile"})
STREAM_MIN_BYTES = NT_MIN_BYTES

def streams_ahead(simd_width: int, flags: frozenset[str]) -> bool:
  """Whether a target of `simd_width`-byte vectors and CPU features `flags` takes the streaming reduction's prefetch
  (stream_offsets): vectors of STREAM_L2_SIMD bytes or more, not a Zen 5 (a STREAM_SKIP_FLAGS feature without a STREAM_KEEP_FLAGS one)."""
  return simd_width >= STREAM_L2_SIMD and not (flags & STREAM_SKIP_FLAGS and not flags & STREAM_KEEP_FLAGS)

# A Zen 5 (named by STREAM_SKIP_FLAGS, as above) running AVX-512 code wants a transposing tile's lines TILE_SWEEP_NEAR steps on,
# not TILE_SWEEP_AHEAD (the Zen 4's best). NHWC -> NCHW 32x56x56x64, 2 threads, native code, both distances in one process, each
# Jit-captured and sampled in turn with the copy loop, load 27-41, speed 4 steps / 8, medians of 20-40 pairs a run: slow memory
# spell 1.046, 1.043, 1.053, 1.047, 1.040, 1.045; fast spell 1.043, 1.062, 0.985; 2 steps 1.01-1.04 of 8, below 4. AVX2 code
# (znver3, no such flag) on the same host: 4 / 8 1.000, 2 / 8 1.003 (it keeps 8). The training step's 64x64x3x3 weight
# transpose takes it too: resnet18_train 1.001 the time
# Intel's AVX-512 server cores have that flag too (STREAM_SKIP_FLAGS, whatever STREAM_KEEP_FLAGS) and keep 4 steps: a 2-vCPU
# Xeon guest (avx_vnni, amx_tile), the kernel alone, both in one process, medians [quartiles] of per-sample time ratios, load
# 5: 8 steps / 4 one thread (CPU time) 1.038 [0.975-1.124] (100 samples), 2 threads (wall) 1.045 (200); 2 and 6 steps / 4
# one thread 1.024 and 1.018, no prefetch 1.018 (80 each)
TILE_SWEEP_NEAR = 4

def tile_sweep_ahead(simd_width: int, flags: frozenset[str]) -> int:
  """Steps on that a transposing tile's loads prefetch (tile_sweep_offsets): TILE_SWEEP_NEAR for AVX-512 code on a CPU with any
  of STREAM_SKIP_FLAGS, else TILE_SWEEP_AHEAD (0: the rule off)."""
  return TILE_SWEEP_NEAR if TILE_SWEEP_AHEAD and simd_width >= STREAM_L2_SIMD and flags & STREAM_SKIP_FLAGS else TILE_SWEEP_AHEAD

def stream_offsets(uops: list[UOp], deps: dict[UOp, frozenset[UOp]]) -> dict[UOp, int]:
  """Where every global load of the kernel reads a buffer of STREAM_MIN_BYTES or more, a whole cache line or more a load, one after
  another along its only reduce loop: each load's distance to STREAM_AHEAD_LINES lines on, in elements (else none)."""
  out: dict[UOp, int] = {}
  for x in uops:
    if (buf := global_read(x)) is None: continue
    idx, item = x.src[0].src[1], buf.dtype.base.itemsize
    reds = [r for r in deps.get(idx, frozenset()) if r.arg[-1] is AxisType.REDUCE]
    if len(reds) != 1 or x.dtype.itemsize < line_bytes() or global_nbytes(buf.dtype) < STREAM_MIN_BYTES: return {}
    if index_step(idx, reds[0]) != x.dtype.count: return {}
    out[x] = STREAM_AHEAD_LINES * line_bytes() // item
  return out

SHARED_ROWS = True   # _shared_rows on (a switch for comparisons)

def _shared_rows(x: UOp, red: UOp, buf: UOp, uops: list[UOp], deps: dict[UOp, frozenset[UOp]]) -> list[UOp]:
  """The loops other than reduces around load `x` (of `buf`, in reduce loop `red`) that a read of `buf` in another reduce loop
  is in too: the row loop of a row kernel whose first pass is not in it. core.codegen.stash.max_ahead takes the first row's
  max before the row loop and each next row's after this row's exps, so the exp pass is the second over the buffer but shares
  its row loop with the max pass after it. Without a prefetch there the exp pass, compute-bound in AVX2 code, runs while no
  line of the next rows is on its way. AVX2 code (znver3) on a 2-vCPU Xeon guest (Sapphire Rapids class), softmax 4096x1000's
  kernel, this rule off/on in one process, medians [quartiles]: 2 threads, wall, against the copy loop, load 10: 1.22x
  [1.09-1.54] and 1.23x the speed (0.80 -> 0.95-1.02 of the copy loop); one thread, CPU time: 0.885x [0.867-0.900] the time.
  1 row on instead of rows_ahead's 2: 1.018x and 0.982x the time of 2."""
  return [r for r in deps.get(x.src[0].src[1], frozenset()) if r.arg[-1] is not AxisType.REDUCE and any(
    y is not x and global_read(y) is buf and r in (dy := deps.get(y.src[0].src[1], frozenset())) and red not in dy and
    any(q.arg[-1] is AxisType.REDUCE for q in dy) for y in uops)]

def rows_ahead(row_bytes: int, big_l2: bool = False) -> int:
  """How many rows on a row kernel prefetches: ROWS_AHEAD (ROWS_AHEAD_BIG_L2 on a `big_l2` core), fewer where the row and those up
  to the prefetched one would not fit half the L1 data cache (the rest holds what the later passes read beside it: a layernorm's
  weight and bias), at least 1."""
  return max(1, min(ROWS_AHEAD_BIG_L2 if big_l2 else ROWS_AHEAD, L1_BYTES // 2 // row_bytes - 1))

def prefetch_offsets(uops: list[UOp], panel_budget: int = 0, simd_regs: int = 0, simd_width: int = 0,
                     flags: frozenset[str] = frozenset(), deps: dict[UOp, frozenset[UOp]] | None = None, big_l2: bool = False) \
    -> dict[UOp, tuple[int | tuple[int, ...], int, Spread | None]]:
  """For each LOAD that should prefetch, (the prefetched address's distance from its own in elements, the locality hint, the gate
  that skips it or None): a pack copy's next panel (panel_offsets), a strip transpose's lines SWEEP_AHEAD steps on along its
  rows (sweep_offsets; into the L2 where the target's vectors, `simd_width`, are SWEEP_L2_SIMD bytes or more, or
  SWEEP_ALONE_L2_SIMD where the sweep's loads are all of the kernel's global loads), where no load sweeps, a transposing tile's
  lines tile_sweep_ahead steps on (tile_sweep_offsets, into the L2), where neither, the target's vectors are STREAM_L2_SIMD
  bytes or more and its CPU features (`flags`) not a Zen 5's (streams_ahead), a streaming reduction's lines STREAM_AHEAD_LINES on
  (stream_offsets, into the L2), an in-place
  panel's next one (reread_offsets, where the renderer's `panel_budget` is known: big panels into the L2; spread over the row
  blocks below SPREAD_BELOW_REGS `simd_regs` and on a `big_l2` core: SPREAD_BIG_L2), a packed panel's loads PACKED_AHEAD_BYTES on (packed_panel_offsets, where
  `big_l2`, heuristic.big_l2 of the renderer, and the vectors are PACKED_PREFETCH_SIMD bytes), a packed product's next row tile (row_tile_offsets, into the L2, below
  SPREAD_BELOW_REGS `simd_regs`: distances a tuple), or rows_ahead rows on (more on a `big_l2` core; all but those L2 ones
  L1_LOCALITY). A load
  qualifies for the row where it reads a global buffer in the second reduce loop over that buffer, under a loop of rows (not a
  reduce) that the first reduce loop's reads share (or where those are outside it, another reduce loop's: _shared_rows), and the
  row step of its address is a constant of at most ROW_MAX_BYTES.
  `deps`: loop_deps(uops), where the caller has it (the LLVM renderer asks it too)."""
  order = {u: i for i, u in enumerate(uops)}
  if deps is None: deps = loop_deps(uops)
  first: dict[UOp, tuple[UOp, frozenset[UOp]]] = {}   # buffer -> (the first reduce range reading it, that read's ranges)
  second: dict[UOp, UOp] = {}                    # buffer -> the second reduce range reading it
  copied = _copied(uops)   # (asked by most of the passes below: one scan of the kernel)
  out: dict[UOp, tuple[int | tuple[int, ...], int, Spread | None]] = {x: (o, L1_LOCALITY, None) for x, o in panel_offsets(uops, deps, order, copied).items()}
  if sweeps := sweep_offsets(uops, deps, order) if SWEEP_PREFETCH else {}:
    alone = all(x in sweeps for x in uops if global_read(x) is not None)
    loc = L2_LOCALITY if simd_width >= (SWEEP_ALONE_L2_SIMD if alone else SWEEP_L2_SIMD) else L1_LOCALITY
    out.update(_once_per_line({x: (o * SWEEP_AHEAD, loc, None) for x, o in sweeps.items() if x not in out}))
  elif ahead := tile_sweep_ahead(simd_width, flags):
    out.update(_once_per_line({x: (o * ahead, L2_LOCALITY, None) for x, o in tile_sweep_offsets(uops, deps, order).items() if x not in out}))
  if streams_ahead(simd_width, flags) and not out:
    out.update((x, (o, L2_LOCALITY, None)) for x, o in stream_offsets(uops, deps).items())
  # (not beside a pack's copy: the other input's row tile, re-read across a group of panels, is in the L1 already)
  if panel_budget and not copied:
    out.update(reread_offsets(uops, deps, order, panel_budget, 0 < simd_regs < SPREAD_BELOW_REGS or (big_l2 and SPREAD_BIG_L2)))
  # (a conv's channel tile packs its weights: its input's broadcast loads prefetch the next row)
  if panel_budget and WINDOW_PREFETCH and copied:
    out.update((x, (o, L1_LOCALITY, None)) for x, o in window_offsets(uops, deps, order, panel_budget, copied).items())
  if PACKED_PREFETCH and big_l2 and simd_width >= PACKED_PREFETCH_SIMD and copied:
    out.update((x, (o, L1_LOCALITY, None)) for x, o in packed_panel_offsets(uops, deps, order, copied).items())
  # (the row-side loads of a packed product's row tile: the LLVM renderer below SPREAD_BELOW_REGS alone, where measured)
  if panel_budget and ROW_TILE_PREFETCH and 0 < simd_regs < SPREAD_BELOW_REGS and copied:
    out.update((x, v) for x, v in row_tile_offsets(uops, deps, order, panel_budget, copied).items() if x not in out)
  for x in uops:
    if x in out or (buf := global_read(x)) is None: continue
    idx = x.src[0].src[1]
    rngs = deps.get(idx, frozenset())
    reds = [r for r in rngs if r.arg[-1] is AxisType.REDUCE]
    if len(reds) != 1: continue
    if buf not in first:
      first[buf] = (reds[0], rngs)
      continue
    if reds[0] is first[buf][0] or second.setdefault(buf, reds[0]) is not reds[0]: continue
    # the innermost loop both passes share, other than reduces: the row
    rows = [r for r in rngs if r in first[buf][1] and r.arg[-1] is not AxisType.REDUCE]
    if shared := not rows and SHARED_ROWS: rows = _shared_rows(x, reds[0], buf, uops, deps)
    if not rows: continue
    row = max(rows, key=lambda r: order[r])
    if (step := index_step(idx, row)) is not None and 0 < (row_bytes := step * buf.dtype.base.itemsize) <= ROW_MAX_BYTES:
      far = big_l2 and not shared and global_nbytes(buf.dtype) > panel_budget   # ROWS_AHEAD_BIG_L2's kernels
      out[x] = (step * rows_ahead(row_bytes, far), L1_LOCALITY, None)
  return out
