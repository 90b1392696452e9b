"""Hand-coded optimizations: register blocking for matmul/conv, SIMD-width vectors along the contiguous axis, thread blocks."""
from __future__ import annotations
from collections import Counter
from typing import TYPE_CHECKING
from core.ir.ops import UOp, Ops, AxisType, GroupOp, reduce_op, params_nbytes
from core.ir.dtype import dtypes
from core.ir.pattern import graph_rewrite
from core.ir.symbolic import symbolic
from core.helpers import ContextVar, prod
from core.codegen.opt.kernel import Kernel, Opt, OptOps, KernelOptError, range_size, MAX_REGISTER_ELEMS
from core.codegen.opt.expander import contiguous_offset, strided_offset, VECTOR_MEM_DTYPES, MAX_SHUFFLED_STRIDE
from core.codegen.opt.pack import PACK_MAX_BYTES, linear_strides, read_index
from core.codegen.opt.copy import input_row_strides, halves_meet, rows_far_apart, rows_innermost, stores_cached, stores_streamed, tile_lines_share_sets, tiles_along_rows
from core.codegen.stash import COSTLY_OPS
if TYPE_CHECKING: from core.device.renderer import Renderer

# conv register block, measured on a 2-core AVX-512 host: 2 vectors along the contiguous output axis x 4 rows, the reduce
# unrolled by 2, and the reused axis's loop outside the other's so a panel of the second input stays in cache
MM_J2, MM_I, MM_K, MM_SWAP = 2, 4, 2, True
# a tile whose vectors come from `third` (WHOLE_ROW_THIRD_VECTORS, NARROW_THIRD_VECTORS: a 1x1 conv's 1 vector of pixels x 8
# channels x 2 images) unrolls its reduce by 4 on a big_l2 core (the Intel AVX-512 server core) where 4 steps' vectors and
# broadcasts fit the registers: each step loads its vectors from rows far apart (an input channel of each image) beside 8
# weight broadcasts, and 4 steps an iteration ran faster than 2. This 2-vCPU Xeon guest, per-kernel A/B in one process,
# medians [quartiles] of the pair ratios, load 8-11: conv 32x256x28x28 -> 64 on 2 threads (chrt, wall) 0.934 [0.918-0.959],
# 0.944 [0.921-0.978], 0.948 [0.920-0.975] (41 pairs), 0.950 [0.925-0.988] (61), one thread (thread time) 0.950, 0.931; a
# training step's r_8_64_28_28 (8x128x28x28 by a 128x64 weight) 0.957 [0.928-0.989] (201); 8 steps 1.049x the time of 4.
# Other tiles with room for 4 steps gained nothing where measured (ResNet-18's 1x1/2 downsample convs 1.019 [0.984-1.045],
# 0.978 [0.947-1.007]) and keep MM_K; so do the Zen hosts (unmeasured: their integer pipes run the loop control apart)
MM_K_BIG_L2 = 4
# matmul register tiles (vectors along the contiguous output axis, rows), best first; the first that fits the host's vector
# registers (renderer.simd_regs: accumulators + one vector per column + the broadcast row value) and whose packed panel fits
# is used. CPU time of one thread, 1024/2048 on a Zen 5 (32 zmm), three runs: 4x4 174-202/173-193 GFLOP/s, 2x8 189-192/
# 145-165, 2x6 142-200/145-165, 2x4 165-174/99-154. With 16 registers (AVX2) 4x4 does not fit; the same Zen 5 running code
# built for Haswell (ymm only), 1024: 2x4 98 GFLOP/s (about its 256-bit peak), 2x6 78 (1024 rows padded to 1026: gated loads;
# then with the columns upcast first and the reduce unrolled, which spill). With 16 registers (a Zen 3, one thread, rows
# upcast first, no reduce unroll; medians of 5 in one process under load) 960/1024/2048: 2x6 69/63/56, 3x4 74/63/54, 2x4 64/51/49
MM_TILES = ((4, 4), (2, 4))
# a plain product (matmul, 1x1 conv: no sliding window, the row-side input read along the reduce, rows enough to stay a loop of
# packed-panel reuse) may take 2x6 where 4x4 does not fit; so does a conv's weight gradient (_taps_product: rows of input channels,
# padded to 6): ResNet-18's 3x3 dW in znver3 code on the Zen 4, one thread, thread CPU time, medians of 7, processes alternated,
# 2x4 -> 2x6 ms: 8x64x56x56 20.3/20.9 -> 19.6/18.6, /2 -> 128 11.6/11.3 -> 10.0/10.2, 8x128x28x28 20.4/19.7 -> 18.2/17.7, /2 11.9/
# 11.5 -> 10.5/10.3, 8x256x14x14 19.6/19.1 -> 17.9/17.9, /2 12.8/13.0 -> 12.0/11.9, 8x512x7x7 20.8/21.1 -> 20.2/21.0. Convs, the
# stem's gathers and a.T @ b keep MM_TILES (unmeasured)
MM_TILES_PLAIN = ((4, 4), (2, 6), (2, 4))
# a plain product on a core whose L2 holds BIG_L2_BYTES or more takes 4x6 first: 24 FMAs per 4 panel vectors (4x4: 16), and
# the panel, past the L1 for a long reduce (1024 x 64 floats: 256 KiB), is read from the L2 each step. The L2 size stands for
# the core here: it is what sysfs tells apart between the Intel AVX-512 server core these were measured on (2 MiB, LLVM's
# rocketlake: Sapphire Rapids or later; its L1 prefetcher fetches the next line only) and the Zen 3/4/5 (0.5-1 MiB), where 4x4
# was measured best (above). One thread of that Intel guest, thread time, A/B in one process, medians of 11-15, GFLOP/s (% of
# the FMA peak loop's, timed between): 1024^3 4x4 175-188 (74-79%), 4x6 197-201 (83-84%), 2x12 198-200, 2x14 196-201, 3x8
# 186-192, 3x9 193; 2048^3 4x4 180-195, 4x6 187-206, 2x12 187-204. 4x6 leaves no registers for a reduce unrolled by MM_K,
# which a bf16 product's dot product needs (mm_tile's `half`: those keep MM_TILES_PLAIN)
MM_TILES_BIG_L2 = ((4, 6),)
BIG_L2_BYTES = 2 << 20

def big_l2(renderer: Renderer) -> bool:
  """Whether `renderer` takes the choices measured on a big L2: it declares `big_l2_tiles` (the CPU LLVM renderer; the C
  renderer's gcc code ran 4x6 at 0.96-0.98x the time of 4x4: 1024^3 and 256x768x2304, one thread) and its per-core L2 holds
  BIG_L2_BYTES or more (unknown, 0, does not)."""
  return renderer.big_l2_tiles and renderer.l2_bytes >= BIG_L2_BYTES
# 2-byte inputs (bf16 on the CPU's dot product: each column vector is interleaved by a shuffle per two reduce steps, so more rows
# per column vector pay): one Zen 5 thread, 1024/2048: 2x8 324-330/364-372 GFLOP/s, 4x6 289/323, 3x8 267/310, 4x4 279-284/270-295
MM_TILES_NARROW = ((2, 8), (2, 4))
MM_MIN_ACC = 8                # vector accumulators a register tile needs: FMA latency x FMA units
# a conv that reads its input at a stride (a reduce window sliding along the output, x[2*ow + kw]) and whose rows hold an odd
# number of vectors gets the register tile's accumulators (tile_j x tile_i) from a third output axis, not MM_MIN_ACC: the stem's
# 7x7/2 over rows of 112 on 16 lanes took 1 vector x 4 channels x 2 rows, 8 FMAs per 2 strided input vectors (2 loads and a
# shuffle each) and 4 weight broadcasts; with 4 rows, 16 per 4 vectors and 4 broadcasts. One Zen 5 thread, A/B in one process,
# medians of 9-13: the stem 8x3x224x224 7x7/2 -> 64 182.7 -> 209.7 and 183.0 -> 208.9 GFLOP/s (8 channels x 2 rows: 205),
# 8x3x224x224 3x3/2 -> 32 181 -> 187. Not at stride 1, whose input vectors are plain loads: 8x3x112x112 3x3 -> 16 175 -> 184, but
# 2x8x48x48 5x5 -> 16 (read in place through gates) 64 -> 40
CONV_ODD_ROW_ACC = True
MM_WINDOW = 4                 # reduce axes this small are unrolled whole
MM_PACK_REUSE = 4             # row blocks that must reuse a packed panel for the copy to pay
# a plain a @ W.T (_plain_product) with few rows takes vector sums along the reduce axis instead (hand_coded's few_rows), its
# register tile (_reuse_outputs) FEW_ROW_COLS columns x the rows half the vector registers leave: W read once per tile of rows,
# from cache. Up to FEW_ROW_PASSES such passes it beats the packed tile. Zen 5, 2 threads, kernel time, packed vs reduce path
# in one process, interleaved, medians of 201 pair ratios reduce/packed (load 10-11), rows 16/24/32/48/64/80: AVX-512 (32 zmm:
# 4 rows a tile) x512x1000 0.26/0.35/0.42/0.55/0.61/0.68, x768x3072 0.68/0.74/0.76/0.78/0.78, x1024x4096 0.05/0.06/0.06/0.24/
# 0.27; AVX2 code (znver3, 16 ymm: 2 rows) x512x1000 0.70/0.87/0.87/1.00/1.00/1.02, x768x3072 0.79/0.86/0.86/0.98/1.00
# (passes of the tile that fits: rows no such tile divides pass once a row, native 31/61x768x3072 1.23/1.33x the packed time).
# Nor more passes than the reduce path's vector steps along the reduce axis: each output ends in a horizontal sum of its
# vector, a large share of a short reduction's work, where the packed tile's panel copy costs less a row the more rows share
# it. Intel Xeon (AVX-512, LLVM rocketlake), one thread, kernel time, reduce / packed, rows x K x 1024 (min of 35 calls, processes
# alternated twice): K = 64 (4 steps) rows 16/24/32/48/64 1.05/1.33/1.53/1.69/1.99, attention's 12 heads x 64 x 64 x 256 1.95;
# K = 128 (8) 16/32/48/64 0.69/0.96/1.23/1.36; K = 256 (16) 16/32/64 0.58/0.78/1.13; K = 512 64 rows 0.95. AVX2 code (znver3,
# 2-row tiles) on that host: K = 64 (8 steps) 16/24/32 rows 0.92/1.0-1.1/1.16, 32 x 64 x 256 1.07-1.15; K = 128 (16) 16/32 0.82/1.01
FEW_ROW_PASSES, FEW_ROW_COLS = 16, 4
MM_COL_VECS = 4               # vectors per reduce step of a column reduction (4 x 32 bytes: two cache lines; 6.7 -> 19 GB/s)
MM_PAD_FULL = 4               # padding allowed (1/4 more work) for an output row that holds no whole vector
MM_ROW_TILE = 16              # row tiles per packed row block when the row-side input is strided along the reduce axis
MM_PACK_BOTH_MIN_K = 256      # reduce length below which copying the row block costs more than its reuse saves (a.T @ b with
                              # K=128: 98 packed vs 132 GFLOP/s not; K=256: 127 vs 95)
MASKED_PAD_SHARE = 3         # an elementwise row padded to whole masked vectors may grow by up to 1/3 (26 -> 32 on 16 lanes)
THREAD_IDLE_MAX = 1 / 16      # thread time a split may leave idle before a loop further in that splits more evenly is taken
MIN_THREADED_WORK = 1 << 15   # iterations below which a kernel runs on one thread: dispatching blocks costs more
TRANSPOSE_MIN_ROW = 512       # output rows this long read a line per element of a transposed input: more lines than L1 holds
                              # (a bound on renderers with workgroups only: CPU ones tile every size, see hand_coded)
TRANSPOSE_ROW_BYTES = 64      # a transpose tile's output row: a whole cache line, whatever the vector width (see hand_coded)
WHOLE_LINE_TILES = True       # and its input rows too (False: one register each, half a line on AVX2; for comparisons)
STRIP_TILES = 4               # a transpose's strip of tiles along the output row (see hand_coded; 0: none, for comparisons)
STRIP_PARTS_DEALT = True      # a strip's parts on the threads' j-th blocks (see hand_coded; False: runs, for comparisons)
STRIP_PART_UNROLLED = True    # a block's part of a strip of register-sized tiles unrolled (see hand_coded; False: a loop)
STRIP_ALONE_TILES = 2         # the tiles of such an unrolled strip where one thread runs it all (see hand_coded; 0: STRIP_TILES)
SPLIT_PART_TILES = 2          # split tiles (AVX2's) of a strip part unrolled up to this many (see _unrolls_part; 0: none)
STRIP_ALONE_SPAN = 4          # where its buffers total this many times the renderer's stream_min_bytes or more
STRIP_MIN_ROW = 4096          # bytes of an input row (a page) that such strips sweep along; shorter rows keep the tiles across them
# A close-rows transpose's chunk (_close_rows_chunks): at most CLOSE_CHUNK_BYTES of input (half a Zen 3/4 L1d, a third of this
# Intel host's), at least CLOSE_CHUNK_STEPS tile steps. A 2-vCPU Xeon guest (AVX-512, 2 MiB L2), NHWC -> NCHW, kernels alone, A/B
# in one process at real-time priority, medians [quartiles] of 31 per-sample ratios, new/old speed: 32x56x56x64 2 threads 1.041
# [1.013-1.073], one thread 1.076 (0.81 -> 0.87 of the copy loop's one-thread figure); 4x56x56x64 1.082 / 1.138; 8x112x112x32 one
# thread 1.204; AVX2 code (znver3) 32x56x56x64 1.015 / 1.047, 4x56x56x64 1.142 / 1.264. Chunks of 64 KiB 1.052, 8 KiB 1.054 (one
# thread, 32x56x56x64). Chunks of 2 steps lost in AVX2 code (a 256x512 transpose 0.81x, gpt2_block's E_256_2304 0.82x), so did the
# C renderer's whole-row tiles (0.91x): neither takes them
CLOSE_CHUNK_BYTES = 16384     # (0: none, for comparisons)
CLOSE_CHUNK_STEPS = 4
# A transpose whose output rows hold no whole vector (NHWC -> NCHW of 14x14 images: rows of 196 floats) takes a tile whose side along
# the output row is half or a quarter of a vector, down to NARROW_TILE_BYTES (an SSE register: 4 floats), where it was a gather of
# one element a lane over loops of channels outside pixels, each input line read again by the next 15 channels' passes. The 2-vCPU
# Xeon guest, 2 threads, kernels alone at real-time priority, A/B in one process, medians of 21 per-sample speed ratios new/old,
# NHWC -> NCHW input shapes, AVX-512 / AVX2 (znver3) / C: 8x14x14x256 3.49 (0.58 -> 2.1x the copy loop's figure at that
# footprint) / 3.39 / 3.58, 4x30x30x256 2.70 / 2.90 / 3.17, 32x14x14x64 1.06 / 1.02 / 1.72; 2-D transposes of 1000 and 4100 rows
# (1000x1024 and 4100x512 inputs) 12-16x (2.3 -> 29-37 GB/s; AVX2's 8 lanes already divide 1000)
NARROW_TILE_BYTES = 16        # (0: none, for comparisons)
CACHED_TILE_REGS = True       # a cached transpose's output row at most half the registers (False: a line; for comparisons)
ALU_HEAVY = 64                # arithmetic ops per element above which an elementwise kernel is compute-bound
ROW_RED_VECTORS = 4           # vectors of partial results per row reduction of a fused row kernel (_row_pass)
ROW_MAX_VECTORS = 8           # the same for a row max, whose NaN-keeping step is two dependent instructions (see _row_pass)
ROW_FMA_VECTORS = MM_MIN_ACC  # the same for a row sum of products (a variance), each vector its own accumulator (see _row_pass;
                              # 0: copies as for other sums, for comparisons)
RED_STREAMS = 4               # rows a thread's block of a reduction along memory reads at once, far apart
RED_STREAMS_ALONE = 2         # the same where one thread runs the whole kernel and the rows share no load (see hand_coded)
RED_ALONE_SIMD = 64           # vector bytes of the targets that take RED_STREAMS_ALONE (AVX-512; see hand_coded)
WG_FEW_OUTPUTS = 4096         # outputs below which a GPU has idle lanes unless the work-items of a group share a reduction
WG_LONG_REDUCE = 256          # reductions this long are shared by a workgroup (GROUP of WG_GROUP, or a quarter of it)
WG_GROUP = 64
WG_LOCAL = 32                 # work-items per workgroup along the contiguous output axis

def _narrow_sides(lanes: int, itemsize: int) -> tuple[int, ...]:
  """A transpose tile's sides narrower than a vector of `lanes`, widest first, down to NARROW_TILE_BYTES."""
  return tuple(w for w in (lanes // 2, lanes // 4, lanes // 8) if w > 1 and NARROW_TILE_BYTES and w * itemsize >= NARROW_TILE_BYTES)

def simd_lanes(renderer: Renderer, itemsize: int) -> int:
  """Elements of `itemsize` bytes per SIMD register (Renderer.simd_width is in bytes; unknown means 16 with vector support)."""
  width = renderer.simd_width
  if width <= 1: width = 16 if renderer.supports_float4 else 0
  return max(1, width // itemsize)

def _try(k: Kernel, *opts: Opt) -> Kernel:
  """k with all of `opts` applied, or k unchanged when one does not fit."""
  try:
    for o in opts: k = k.apply(o)
  except KernelOptError: pass
  return k

def _pick_amt(n: int | None, wants: tuple[int, ...]) -> int:
  return next((a for a in wants if n is not None and 2 <= a <= n and n % a == 0), 0)

def _red_vectors(n: int | None, lanes: int) -> tuple[int, ...]:
  """Vector widths for partial sums along a contiguous reduce axis of n, best first: 4, 2 and 1 full vectors; for a length
  no full vector divides (softmax's rows of 1000 on 16 lanes) the half or quarter width (down to 4 lanes) that divides it,
  twice or once: lanes along the rows read whole vectors, where lanes across rows would gather."""
  full = (4 * lanes, 2 * lanes, lanes)
  if n is None or _pick_amt(n, full): return full
  return next(((2 * w, w) for w in (lanes // 2, lanes // 4) if w >= 4 and n % w == 0), full)

def _alu_count(k: Kernel) -> int: return sum(1 for u in k.ast.toposort() if u.op in GroupOp.ALU)

def _loads(k: Kernel) -> list[UOp]: return [u for u in k.ast.toposort() if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX]

def _contiguous_in(k: Kernel, r: UOp, mem: list[UOp]) -> bool:
  return any(contiguous_offset(m.src[0].src[1], r) is not None for m in mem if r in m.src[0].src[1].toposort())

def _strided_in(r: UOp, ld: UOp) -> bool:
  """Load ld reads along axis r a few elements apart (a stride-2 conv's input): the expander's shuffled whole vectors."""
  return (st := strided_offset(ld.src[0].src[1], r)) is not None and 2 <= st[1] <= MAX_SHUFFLED_STRIDE

def _sliding(r: UOp, outs: list[UOp], mem: list[UOp]) -> bool:
  """Reduce axis r slides a window along an output axis in some load (conv: x[oh + kh], or x[2*oh + kh] with stride 2).
  Unrolling such a window lets neighbouring taps share loads; other small reduce axes only add code."""
  from core.ir.symbolic import split_sum
  for m in mem:
    if (parts := split_sum(m.src[0].src[1])) is None: continue
    coef = {t: c for t, c in parts[0]}
    # x[s*oh + kh]: the output's coefficient a small multiple of the window's (the stride), and windows of neighbouring outputs
    # overlap (a channel axis nested inside the batch, x[n*C + c], spans exactly one step of it)
    if r in coef and any(o in coef and coef[o] % coef[r] == 0 and coef[o] // coef[r] <= MAX_SHUFFLED_STRIDE and
                         coef[o] < coef[r] * (range_size(r) or 0) for o in outs): return True
  return False

def _window_sized(r: UOp, most: int = MM_WINDOW) -> bool:
  """Axis r is short enough to be a kernel window (at most `most` steps); one of unknown (symbolic) or zero size is not."""
  return (n := range_size(r)) is not None and n != 0 and n <= most

def _taps_product(outs: list[UOp], reds: list[UOp], mem: list[UOp]) -> bool:
  """A conv's weight gradient, dW[c, k, o] = sum over n, p of X[n, c, s*p + k] * dY[n, p, o]: an output axis no longer than a
  kernel window (a tap) slides over a reduce axis (the pixels) in some load."""
  return any(_window_sized(o) and _sliding(o, reds, mem) for o in outs)

def _divmod_in(idx: UOp, r: UOp) -> bool:
  """idx uses axis r inside a term that is not affine in it (a div or mod of an expression of r)."""
  from core.ir.symbolic import split_sum
  if r not in idx.toposort(): return False
  if (parts := split_sum(idx)) is None: return True
  return any(t is not r and r in t.toposort() for t, _ in parts[0])

def _pos(k: Kernel, r: UOp) -> int: return k.axes.index(r)
def _sink_loop(k: Kernel, r: UOp) -> Kernel:
  """k with LOOP r moved inward, one SWAP with the next loop at a time, to just outside the innermost loop; the others keep
  their order."""
  while (i := (loops := k.of_type(AxisType.LOOP)).index(r)) < len(loops) - 2:
    if (k2 := _try(k, Opt(OptOps.SWAP, _pos(k, r), _pos(k, nxt := loops[i + 1])))) is k: break
    k, r = k2, _same(k2, nxt)
  return k
def _same(k: Kernel, r: UOp) -> UOp:
  """The axis of k that kept r's id (its outer part after a split)."""
  return next(x for x in k.axes if x.arg[0] == r.arg[0])

def _packed_product(k: Kernel, outs: list[UOp], reds: list[UOp], loads: list[UOp], col: UOp, lanes: int, itemsize: int) -> bool:
  """A product of two inputs that each miss a different output axis (a @ b.T: both run along the reduce axis), on a renderer
  that can PACK, with a panel that fits and rows enough to reuse it: register tiles reuse each load (a packed panel turns the
  other input's column reads into vector reads), where vector partial sums along the reduce axis would reuse nothing."""
  red_len = prod(range_size(r) or 0 for r in reds)
  if k.renderer.has_local or red_len * MM_J2 * lanes * itemsize > PACK_MAX_BYTES: return False
  rows = _panel_rows(outs, reds, loads, col)
  if _plain_product(reds, [ld for ld in loads if any(r in ld.toposort() for r in reds)]):
    if -(-rows // _few_row_tile(rows, k.renderer.simd_regs)) <= min(FEW_ROW_PASSES, -(-red_len // lanes)): return False
  return rows >= MM_PACK_REUSE * MM_I and _crossed_inputs(outs, loads)

# rows no tile of _few_row_tile divides (17, 31) padded to the largest that fits, up to FEW_ROW_PAD_ROWS padded rows: 1-row
# tiles passed W once a row. Zen 5, 2 threads, kernel time, one process, interleaved, medians of 21 pair ratios padded/today's
# plan (load 3.7-4.2, slow-bandwidth spell: copy 55 GB/s), rows 17/19/23/29/31: AVX-512 x512x1000 0.27/0.63/0.66/0.74/0.75,
# x768x3072 0.33/0.86/0.91/0.94/0.96; AVX2 code (znver3) x512x1000 0.30/0.74/0.78/0.91/0.30, x768x3072 0.30/0.82/0.84/0.91/0.28;
# rows 5/7/11/13 AVX-512 x500x1000 0.85/0.61/0.59/0.66, x768x3072 0.79/0.63/0.68/0.75; rows 3/5/7/9/11/13 AVX2 x500x1000
# 0.75/0.73/0.70/0.68/0.67/0.66, x768x3072 0.76/0.76/0.73/0.70/0.69/0.68.
# More rows lose to the packed tile (AVX-512 x768x3072 47 -> 48 1.02, 61 -> 64 1.04: as unpadded 48 and 64 rows do, 1.00, 1.04)
FEW_ROW_PAD_ROWS = 32

def _few_row_tile(rows: int, regs: int) -> int:
  """The rows of _reuse_outputs' tile beside FEW_ROW_COLS columns within half the vector registers: the largest of 4, 3, 2
  that divides them, else the largest of 4, 2 that fits where the rows padded to it (_pad_few_rows) are few, else 1."""
  fits = tuple(a for a in (4, 3, 2) if FEW_ROW_COLS * a <= regs // 2)
  if tile := _pick_amt(rows, fits): return tile
  return next((a for a in fits if a != 3 and -(-rows // a) * a <= FEW_ROW_PAD_ROWS), 1)

def _pad_few_rows(k: Kernel, red_loads: list[UOp], contig_out: UOp) -> Kernel:
  """A few-row product's rows padded to a whole tile of _few_row_tile (31 -> 32): the padded rows read zeros and store nothing."""
  rows = [r for r in k.of_type(AxisType.LOOP) if r is not _same(k, contig_out) and any(r not in ld.toposort() for ld in red_loads)]
  if len(rows) != 1 or (n := range_size(rows[0])) is None: return k
  tile = _few_row_tile(n, k.renderer.simd_regs)
  return k if n % tile == 0 else _try(k, Opt(OptOps.PADTO, _pos(k, rows[0]), tile))

def _plain_product(reds: list[UOp], red_loads: list[UOp]) -> bool:
  """a @ W.T itself: one reduce axis that every input in the reduction reads at stride 1, each input's rows (its other
  axes' strides) no closer than the reduce length, so no two rows overlap as a conv window's do (a strided or NCHW 1x1 conv
  reads its input channels a plane apart: not this)."""
  if len(reds) != 1 or (n := range_size(reds[0])) is None: return False
  for ld in red_loads:
    idx = read_index(ld.src[0])
    axes = [r for r in idx.toposort() if r.op is Ops.RANGE]
    if (strides := linear_strides(idx, axes)) is None or strides.get(reds[0]) != 1: return False
    if any(abs(v) < n for r, v in strides.items() if r is not reds[0]): return False
  return True

def _panel_rows(outs: list[UOp], reds: list[UOp], loads: list[UOp], col: UOp) -> int:
  """The rows a panel of the input read along output axis `col` in the reduction serves: the output axes it misses. Fewer than
  MM_PACK_REUSE row blocks (a batch-8 a @ W.T) leave _register_block's tile unpacked, each column vector gathered a row apart."""
  panel = [ld for ld in loads if col in ld.toposort() and any(r in ld.toposort() for r in reds)]
  return prod(range_size(o) or 0 for o in outs if o is not col and all(o not in ld.toposort() for ld in panel))

def _crossed_inputs(outs: list[UOp], loads: list[UOp]) -> bool:
  """Two inputs that each miss an output axis the other reads (a product, a conv): each load serves several outputs."""
  misses = [{r for r in outs if r not in ld.toposort()} for ld in loads]
  return any(p in m1 and q in m2 and p not in m2 and q not in m1 for m1 in misses for m2 in misses for p in outs for q in outs if p is not q)

def _block_count(n: int, threads: int) -> int:
  """Thread blocks for a loop of n: a multiple of `threads` dividing n, about 4 per thread; the loop itself when small."""
  if n <= 4 * threads: return n
  for want in range(4 * threads, threads - 1, -threads):
    if n % want == 0: return want
  return n if n <= 64 * threads else next((b for b in range(4 * threads, 1, -1) if n % b == 0), n)

def _block_counts(n: int, threads: int) -> list[int]:
  """_block_count(n, threads) first, then the other multiples of `threads` that divide n, nearest 4 per thread first."""
  first = _block_count(n, threads)
  return [first, *sorted((b for b in range(threads, n + 1, threads) if n % b == 0 and b != first), key=lambda b: (abs(b - 4 * threads), b))]

def _idle_share(blocks: int, threads: int) -> float:
  """The share of thread time left idle when `blocks` equal blocks run on `threads`: 3 blocks on 2 threads idle one of 4 slots."""
  slots = -(-blocks // threads) * threads
  return (slots - blocks) / slots

def _thread_loop(k: Kernel, threads: int) -> UOp | None:
  """The loop split into thread blocks: the outermost whose blocks leave at most THREAD_IDLE_MAX of the thread time idle, else
  the one that leaves the least (outermost on a tie). 3 batch blocks on 2 threads leave a quarter idle (a batched product whose
  batch the panel grouping tiled by 4: sdpa's 12 heads), where a loop further in splits evenly.
  Only a loop every reduction varies with: a block of another (a row pass's output columns, _row_pass) would redo each whole
  reduction for its part of the loop (softmax 4095x1000: 7 row blocks leave 1/8 idle, so its 63 column vectors were split and
  every block ran the row max and sum of all 4095 rows, 63x the work: 17.6 ms, not 0.6)."""
  # the loops every reduction reads (one walk a reduction, not one a loop and reduction)
  seen = [frozenset(u.toposort()) for u in k.ast.toposort() if u.op is Ops.REDUCE]
  loops = [r for r in k.of_type(AxisType.LOOP) if (range_size(r) or 0) >= 2 and all(r in s for s in seen)]
  idle = [_idle_share(_block_count(range_size(r) or 1, threads), threads) for r in loops]
  return next((r for r, i in zip(loops, idle) if i <= THREAD_IDLE_MAX), min(zip(loops, idle), key=lambda x: x[1], default=(None,))[0])

# a plain product's tile where the first of MM_TILES_PLAIN pads the columns more (28x28 = 784 pixels: 832 in 4 vectors of 16,
# 800 in 2): the same accumulators. One Zen 5 thread, A/B in one process, medians of 9, GFLOP/s 4x4 -> 2x8: 1x1 convs 32x256x28x28
# -> 64 169 -> 180, 8x256x28x28 -> 64 185 -> 207, 8x128x28x28 -> 512 230 -> 237, 8x512x28x28 -> 128 202 -> 210; matmuls
# 512x512 @ 512x784 227 -> 235, 256x256 @ 256x80 130 -> 216 (x1000, padded to 1024 either way, 230 vs 233: keeps 4x4)
MM_TILE_FEWER_COLS = (2, 8)
# and one vector x 16 rows where that pads less still (784 = 49 vectors: 800 in 2) and its panel, from beyond the L2, is read in
# place where a two-vector one would be packed (_panel_in_place: 16-row blocks read it, half as many as 8-row ones). Where both
# are read in place 2 x 8 loads less per FMA (17 vector loads per 16 FMAs, near the FPU's two a cycle); packed, a one-vector
# panel has the row side read twice as often; an input in the L2 packs at little cost. One Zen 5 thread, A/B in one process,
# medians of 9-11, GFLOP/s: 1x1 convs 8x256x28x28 -> 128 (2 x 8 packed) 204 -> 223, 8x512x28x28 -> 128 211 -> 225,
# 32x64x28x28 -> 128 203 -> 218, but 4x64x28x28 -> 128 (800 KiB) 227 -> 215; in place, 2 x 8 (its next panel prefetched into
# the L2) vs 1 x 16: 32x256x28x28 -> 64 226 vs 218, 8x256x28x28 -> 64 232 vs 218, 32x128x28x28 -> 64 222 vs 208
MM_TILE_ONE_VECTOR = (1, 16)

def mm_tile(renderer: Renderer, window: bool, col_bytes: int, narrow: bool = False, plain: bool = False, n_cols: int = 0,
            lanes: int = 1, one_vector: bool = False, taps: bool = False, half: bool = False) -> tuple[int, int]:
  """(vectors, rows) of the register tile for a product over `renderer`; `window`: a reduction that slides over an output
  axis (conv), which keeps (MM_J2, MM_I); `col_bytes`: bytes of one vector-wide column of the packed panel (reduce length x
  vector bytes), so a tile whose panel would not fit PACK_MAX_BYTES falls back to a narrower one; `narrow`: 2-byte inputs;
  `plain`: a plain product (MM_TILES_PLAIN, after MM_TILES_BIG_L2 on a big_l2 renderer, or MM_TILE_FEWER_COLS where its vectors pad the `n_cols` columns of `lanes`-wide
  vectors less, or MM_TILE_ONE_VECTOR where that pads less still and `one_vector`: its panel from beyond the L2 would be read in
  place, a two-vector one's packed); `taps`: a conv's weight gradient (_taps_product), which takes MM_TILES_PLAIN's tiles;
  `half`: the product goes through 2-byte floats (bf16 inputs cast in the kernel: their dot product pairs the reduce steps, an
  unroll 4x6 has no registers for), which keeps MM_TILES_PLAIN."""
  if window: return MM_J2, MM_I
  regs = renderer.simd_regs
  def fits(j: int, i: int) -> bool: return j * i + j + 1 <= regs and j * col_bytes <= PACK_MAX_BYTES
  tiles = MM_TILES_NARROW if narrow else (MM_TILES_BIG_L2 if plain and not half and big_l2(renderer) else ()) + MM_TILES_PLAIN if plain or taps else MM_TILES
  tile = next(((j, i) for j, i in tiles if fits(j, i)), (MM_J2, MM_I))
  def padded(j: int) -> int: return -(-n_cols // (lanes * j)) * lanes * j
  if not (plain and n_cols): return tile
  fewer = [t for t in (MM_TILE_FEWER_COLS, MM_TILE_ONE_VECTOR) if fits(*t) and (t[0] > 1 or one_vector)]
  return min([tile, *fewer], key=lambda t: padded(t[0]))   # (the first of the least padded)

MM_GROUP_COLS = 64            # output columns a row tile of the row-side input is read once for (from L3; from the cache for
                              # the rest of its group): AVX-512's 4x4 tile has 64 in one panel, where it runs at 87-93% of peak
                              # (ungrouped there); AVX2's 2x6 has 16. One Zen 3 thread, CPU time, medians, A/B in one process
                              # under load: 2048^3 panels of 1, 2, 4: 75.6, 83.6, 86.7 GFLOP/s (2 threads 75.6, 80.6, 85.5);
                              # 1024^3: 1 85-89, 2, 4 and 8 all 89-93
# on a big_l2 core with AVX-512 code, panels that hold MM_GROUP_COLS already (the 4x6 tile's 64 columns) go two a group: the row
# tile is read from L3 once per 128 columns. That Intel guest, A/B in one process, medians, 1024^3 2 threads (wall at real-time
# priority; both cores read the row tiles from the shared L3) 347.6 -> 354.7, 357.1 -> 362.1, 345.6 -> 352.6, 338.7 -> 342.4
# GFLOP/s, one thread (thread time) 159.8 -> 162.3, 162.7 -> 163.1. Narrower panels keep MM_GROUP_COLS: a 1x1/2 conv's 32-column
# panels went four a group and lost their PACK (ResNet-18's 8x64x56x56 -> 128: 6x the time)
MM_GROUP_COLS_BIG_L2 = 128
MM_GROUP_BIG_L2_SIMD = 64     # vector bytes of the code that takes it (AVX-512: measured)

def mm_panel_group(renderer: Renderer, n_panels: int, panel_bytes: int, panel_cols: int) -> int:
  """How many of a product's `n_panels` packed column panels (`panel_bytes` and `panel_cols` columns each) to pack together
  and walk inside each row tile, so each row tile is read for MM_GROUP_COLS columns (MM_GROUP_COLS_BIG_L2 for panels that wide
  on a big_l2 renderer with AVX-512 code): the most up to that which fit the renderer's per-core L2 (`l2_bytes`) and
  PACK_MAX_BYTES and leave a group per thread; 1 (each panel alone) where the panel is that wide already or the L2 is unknown."""
  budget = min(renderer.l2_bytes, PACK_MAX_BYTES)
  threads = max(1, renderer.threads)
  cols = MM_GROUP_COLS_BIG_L2 if panel_cols >= MM_GROUP_COLS and big_l2(renderer) and renderer.simd_width >= MM_GROUP_BIG_L2_SIMD else MM_GROUP_COLS
  return max((g for g in range(2, cols // max(panel_cols, 1) + 1) if n_panels % g == 0 and g * panel_bytes <= budget and
              n_panels // g >= threads), default=1)

MM_PANEL_BLOCKS = 16          # thread blocks per thread a plain product's column-panel loop may be cut into (_panel_blocks)

def _panel_blocks(n: int, threads: int) -> int:
  """Thread blocks for a plain product's loop over its packed column panels (n iterations): the most, up to MM_PANEL_BLOCKS
  per thread, that divide n evenly among the threads, else _block_count's. Each iteration packs its own panels, so smaller
  blocks copy nothing more; where other processes share the cores, a thread that fell behind leaves the others one small
  block at the end, not a quarter of its share. 2 threads on the 2-core Zen 3 under load 7, A/B in one process, medians of 11,
  GFLOP/s per CPU second (waiting pool threads spin) and wall: 1024^3 8 -> 16 blocks 46 -> 77 and 20 -> 30 (numpy 47, 15);
  2048^3 8 -> 32 blocks 65 -> 73 and 36 -> 39 (numpy 69, 41); 2048x768x3072 8 -> 24 blocks 67 -> 75 and 30 -> 34 (numpy 79, 35)."""
  return max((b for b in range(threads, min(n, MM_PANEL_BLOCKS * threads) + 1, threads) if n % b == 0), default=0) or \
    _block_count(n, threads)

MIN_BLOCK_WORK = 1 << 22      # iterations (~100 us of one core's FMAs) a compute kernel's thread block keeps when cut finer

def _compute_blocks(n: int, threads: int, work: int) -> int:
  """Thread blocks for the loop of n split from a product of `work` iterations (_crossed_inputs) with no packed copy (a conv's
  images): as _panel_blocks, the most up to MM_PANEL_BLOCKS per thread that divide n evenly among the threads, as long as each
  holds MIN_BLOCK_WORK iterations; never fewer than _block_count's. Its iterations share no copy, so smaller blocks add only a
  claim each, and the last block the threads finish at different times is shorter. 32x256x28x28 -> 64 1x1 conv, 2 threads
  on the 2-core Zen 3, 8 -> 32 blocks, per-block traces in two runs: the threads' end gap 0.80 and 0.28 -> 0.22 and 0.12 ms
  (medians; see docs/internals.md)."""
  base = _block_count(n, threads)
  return max(base, max((b for b in range(threads, min(n, MM_PANEL_BLOCKS * threads) + 1, threads)
                        if n % b == 0 and work // b >= MIN_BLOCK_WORK), default=0))

# conv register tiles (vectors along the output row, output channels), widest first: 4x4 where the vector registers hold its 16
# accumulators, 4 input vectors and a weight (AVX-512's 32; not AVX2's 16). One loaded Zen 5 thread, 3x3 conv 8x64x56x56 by CPU
# time: 4x4 139-156 GFLOP/s, 2x4 123-131
CONV_TILES = ((4, 4), (MM_J2, MM_I))

def _conv_tile(renderer: Renderer, n: int | None, lanes: int) -> tuple[int, int]:
  """The conv tile for an output row of n: the widest that fits the registers and covers the row whole or padded by at most
  1/MM_PAD_FULL (a row of 28 on 16 lanes keeps two vectors: four would pad it to 64)."""
  regs = renderer.simd_regs
  return next(((j, i) for j, i in CONV_TILES if j * i + j + 1 <= regs and n is not None and
               (n % (lanes * j) == 0 or _pad_ok(n, lanes * j, MM_PAD_FULL))), (MM_J2, MM_I))

DW_ROW_SPARE = 2              # vector registers a whole-row depthwise tile leaves beside its accumulators (a load, a weight)
# rows a whole-row depthwise tile may hold, most first: each input row loaded serves up to 3 output rows of the tile, so more
# rows load less per output (6 and 3 where 4 does not divide the rows or fit: mobilenet's 12- and 24-row maps)
DW_TILE_ROWS = (6, 4, 3, 2, 1)

def _whole_row_tile(renderer: Renderer, n: int | None, n_rows: int | None, lanes: int, win: int) -> tuple[int, int] | None:
  """(vectors, rows) of a depthwise conv tile that holds whole output rows of n (padded to whole vectors by at most
  1/MM_PAD_FULL, or as _dw_row_masked allows), the most rows (DW_TILE_ROWS) whose accumulators fit the vector registers and the
  register limit; None where one row does not fit. Its input is read in place through gates along the row: with the row
  unrolled whole, each vector's column gates are constants, where a tile at a loop position computes and applies a lane mask
  per load. One Zen 3 thread, A/B in one process, medians of 9: 8x32x112x112 3x3 2.22 -> 1.60 ms (14 vectors x 1 row),
  8x144x56 1.08 -> 0.90 ms at stride 2 (4x2), 2.36 -> 1.64 at stride 1; rows of 14 and less keep their tile (the same kernel)."""
  if n is None or n_rows is None or not (n % lanes == 0 or _pad_ok(n, lanes, MM_PAD_FULL) or _dw_row_masked(renderer, n, lanes)): return None
  vecs, regs = -(-n // lanes), renderer.simd_regs
  return next(((vecs, r) for r in DW_TILE_ROWS if n_rows % r == 0 and vecs * r + DW_ROW_SPARE <= regs and
               lanes * vecs * r * win <= MAX_REGISTER_ELEMS), None)

DW_MASK_LONG_ROWS = True      # a depthwise row longer than one vector always takes the masked whole-row tile (_dw_row_masked)

def _dw_row_masked(renderer: Renderer, n: int, lanes: int) -> bool:
  """Whether a depthwise conv's row of n is padded to masked whole vectors for the whole-row tile: as _row_masked allows, or any
  row longer than one vector and a lane (18 on 16 lanes -> 32), whose other tiles run most of the row lane by lane (one Zen 5
  thread, 3x3 + relu 1x32x18x18 24.6 -> 2.7 us, 1x32x34x34 87.9 -> 7.1). A vector and one lane (9 on 8) keeps its tile."""
  return _row_masked(renderer, n, lanes) or (DW_MASK_LONG_ROWS and renderer.masked_vectors and n > lanes + 1)

def _row_masked(renderer: Renderer, n: int, lanes: int) -> bool:
  """Whether a row of n is padded to whole vectors on `renderer` whose vector loads and stores take a gate per lane: the pad's
  lanes are masked (about the cost of a full vector), and at most 1/MASKED_PAD_SHARE more (24 on 16 lanes -> 32, not 7 -> 16)."""
  return renderer.masked_vectors and _pad_ok(n, lanes, MASKED_PAD_SHARE)

def _pad_ok(n: int | None, m: int, share: int = 8) -> bool:
  """Padding n up to a multiple of m costs at most 1/share more work."""
  return n is not None and n % m != 0 and (-n % m) * share <= n

def _narrow_tile(renderer: Renderer, n: int | None, lanes: int, tile: tuple[int, int]) -> tuple[int, int] | None:
  """A narrower (vectors, rows) tile than `tile` for a product's output row of n that holds no whole number of vectors and
  would pad by more than 1/MM_PAD_FULL to the tile's vectors: the most vectors (2, then 1) the row pads to within that
  (within 1/MASKED_PAD_SHARE where the pad lanes are masked), with rows for as many accumulators, at most half the vector
  registers (the rest hold the unrolled reduce's columns and broadcasts); None where `tile` pads well or no narrower one
  does. Else the row takes part vectors (196 on 16 lanes: 4 lanes). One Zen 5 thread, Haswell code (16 ymm), 1x512x7x7 ->
  512 1x1: 1 vector x 8 rows 85 GFLOP/s, x 12 57 (spills); AVX-512 code there 2 x 8 180, 1 x 16 161, 2 x 12 176."""
  j, i = tile
  if n is None or n % lanes == 0 or n % (lanes * j) == 0 or _pad_ok(n, lanes * j, MM_PAD_FULL): return None
  share, regs = _narrow_share(renderer), renderer.simd_regs
  return next(((nj, min(j * i, regs // 2) // nj) for nj in (2, 1) if nj < j and _pad_ok(n, lanes * nj, share)), None)

# a one-vector narrow tile with fewer accumulators than the plain tile takes the plain tile's vectors along another output axis
# the row-side input does not use (`third`: the images), and as rows the most up to the plain tile's that divide the output
# channels (unpadded: the C renderer's clang keeps a padded row block's gated broadcasts in the loop and spills, 1.4-1.8x the
# time with 6 rows over 2048 channels; LLVM gains about the same either way). AVX2's 1 x 8 (9 loads per 8 FMAs) becomes 1 x 4-6
# x 2 images (6-8 per 8-12), the reduce unrolled where the registers hold a second step (not beside 12 accumulators: spills).
# AVX-512's 1 x 16 already holds the 4 x 4 tile's 16. One Zen 3 thread, A/B in one process, medians of 9, new/old time, two
# runs each, LLVM | C: 1x1 8x512x7x7 -> 2048 0.82-0.85 | 0.78, 8x2048x7x7 -> 512 0.71 | 0.64-0.73, 8x1024x7x7 -> 1024
# 0.71-0.73 | 0.69-0.70, 8x960x7x7 -> 160 0.85-0.88 | 0.85-0.88, 8x160x7x7 -> 960 0.76-0.88 | 0.76-0.81, 8x64x7x7 -> 64
# 0.82-1.00 | 0.81-0.82
NARROW_THIRD_VECTORS = True
# so does a row of whole vectors that the plain tile's vectors don't divide (784 pixels, 49 vectors of 16, in 2 x 8 tiles), where
# `third` divides by them, instead of the row padded to the tile (800: 1/49 more FMAs, and the masked loads and stores of the
# pair that holds the pad, in every pixel block): per reduce step the same vector loads, broadcasts and FMAs as the padded tile.
# 1x1 conv 32x256x28x28 -> 64, the 2-core Zen 4 (AVX-512 on 256-bit units), A/B in one process at real-time priority, medians
# of 21, GFLOP/s 2 x 8 padded -> 1 x 8 x 2 images: one thread (thread time) 108.8 -> 113.4, two (wall) 215.6 -> 227.3 (1 x 16,
# unpadded, one image: 113.9, 218.6). Only where the pad's lanes are masked (Renderer.masked_vectors): the C renderer pads no
# whole vectors and keeps 1 x 8 there, which the compiler ran faster than its 1 x 8 x 2 images (102 vs 78.5 GFLOP/s, one thread)
WHOLE_ROW_THIRD_VECTORS = True

def _dividing_rows(n: int | None, most: int) -> int:
  """The most rows up to `most` that divide n (0 where none of 2 or more does)."""
  return next((i for i in range(most, 1, -1) if n is not None and n % i == 0), 0)

def _narrow_share(renderer: Renderer) -> int:
  """_narrow_tile's padding limit (1/share more work): a third where the pad lanes are masked, else a quarter."""
  return MASKED_PAD_SHARE if renderer.masked_vectors else MM_PAD_FULL

def _long_transposed(k: Kernel, rows: UOp, cols: UOp) -> bool:
  """A product that _packed_both may tile (its row-side input, if strided along the reduce, packed by row blocks): one reduce
  axis at least MM_PACK_BOTH_MIN_K long, the rows before the columns, on a renderer without local memory."""
  reds = k.of_type(AxisType.REDUCE)
  return not k.renderer.has_local and len(reds) == 1 and (range_size(reds[0]) or 0) >= MM_PACK_BOTH_MIN_K and \
    rows.arg[0] <= cols.arg[0]

def _packed_both(k: Kernel, col: UOp, row: UOp, row_regs: int) -> Kernel | None:
  """The tile order of a product whose row-side input runs across the reduce axis (a.T @ b: each reduce step reads a few
  floats a whole row apart): column blocks on the threads, then row blocks of MM_ROW_TILE tiles, column panels, row tiles.
  The row block's rows of that input are packed once per row block (contiguous along the reduce axis, reused by every column
  panel) and each column panel once per row block. None when the kernel is not such a product or a panel does not fit."""
  rows, cols = _same(k, row), _same(k, col)
  if not _long_transposed(k, rows, cols): return None
  red, kn = k.of_type(AxisType.REDUCE)[0], range_size(k.of_type(AxisType.REDUCE)[0]) or 0
  strided = [ld for ld in _loads(k) if cols not in ld.toposort() and red in ld.toposort() and contiguous_offset(ld.src[0].src[1], red) is None]
  if not strided or (n := range_size(rows)) is None: return None
  item = strided[0].dtype.itemsize
  tile = next((t for t in (MM_ROW_TILE, MM_ROW_TILE // 2, MM_ROW_TILE // 4) if t < n and n % t == 0 and t * row_regs * kn * item <= PACK_MAX_BYTES), 0)
  if not tile: return None
  threads, nc = k.renderer.threads, range_size(cols)
  # (column blocks whose panels an input reads at fixed strides: attention's output in head layout, read as columns of 64, packs
  # only where each block starts at a head, so the block count that does so nearest about 4 per thread; 768 columns of 16: 12)
  for blocks in (_block_counts(nc, threads) if threads and nc is not None else [0]):
    try:
      kb = k.apply(Opt(OptOps.THREAD, _pos(k, cols), blocks)) if blocks else k
      kb = kb.apply(Opt(OptOps.TILE, _pos(kb, _same(kb, rows)), tile))   # the inner part gets the newest id: innermost loop
      kb = kb.apply(Opt(OptOps.PACK, _pos(kb, _same(kb, cols))))         # the row block's rows, before the column panels
      inner = max(kb.of_type(AxisType.LOOP), key=lambda r: r.arg[0])
      return kb.apply(Opt(OptOps.PACK, _pos(kb, inner)))                 # each column panel, before the row tiles
    except KernelOptError: pass
  return None

CHANNEL_ROW_VECTORS = 2       # conv output rows shorter than this many vectors take their vectors along the output channels
CHANNEL_GATHER_RED = 16       # a residual the channel tile gathers costs more than a reduction shorter than this many vectors
CHANNEL_PAD_SHARE = 16        # so do longer rows of no whole number of vectors, where padding them adds more than 1/16 of the work
# and rows of an odd number of whole vectors (3 or more) with at most CHANNEL_ODD_ROW_REGS vector registers: the row tile holds one
# vector along them (two would pad the row), AVX2's 56 = 7 x 8 as 4 channels x 2 rows, 36 weight broadcasts and 18 input vectors
# per 72 FMAs and a copy of the input's window rows per tile; the channel tile of 2 vectors x 4 pixels broadcasts 18 inputs,
# loads 18 weight vectors from its panel and reads the input in place. One Zen 3 thread, kernel thread time, A/B in one process,
# medians of 9, each twice, 3x3 32x64x56x56 86.3/87.6 -> 80.8/81.2 ms, with ResNet's bn and relu 8x64x56x56 21.8/21.6 -> 20.0/20.0
# (the 1 x 7 pixels tile: 0.92x the row tile's FLOP rate). The C renderer's source, built by clang, ran 1.08-1.12x the time: only
# where the renderer says so (Renderer.odd_row_channel_tile). With 32 registers the row tile holds more rows per broadcast:
# not measured there, so not taken
CHANNEL_ODD_ROWS = True
CHANNEL_ODD_ROW_REGS = 16
# a row whose channel tiles of a pixel block that is not a power of two hold fewer than MM_MIN_ACC accumulators (16 registers: rows
# of 28 on AVX2's 8 lanes took 1 vector x 7 pixels, 7) may also take a block of 2 or 4 pixels below the lanes with 2 or more
# channel vectors, as odd rows do: 2 x 4, 8 accumulators, each broadcast input feeding 2 FMAs. 2-core Zen 4, znver3 code, one
# thread, kernel thread CPU time, A/B in one process, medians of 7-9 (load 5-8), ms: 3x3 8x128x28x28 -> 128 20.1 -> 17.6 (its
# input gradient 20.2 -> 17.8), the input gradient's phase convs of 8x64x56x56 -> 128 3x3/2 2.71 -> 2.18 and 4.78 -> 4.27, of
# 8x128x56x56 -> 128 3x3/2 5.48 -> 4.48 and 9.47 -> 8.51; the C renderer's (clang) 26.5 -> 22.6, 35.0 -> 28.9, 2.59 -> 2.15,
# 5.10 -> 5.09. With 32 registers (AVX-512) the other tiles hold 8 or more: the same sources
CHANNEL_POW2_ROWS = True
# an odd row's channel tile with its kernel window left as loops (LLVM unrolls them itself, tap by tap): each tap loads `rows`
# broadcasts, held, and streams its j weight vectors through one register, so j x rows accumulators fit where the unrolled
# window's j x 3 weight vectors do not: AVX2's 4 x 3 (12 accumulators, 3 + 4 loads per 12 FMAs; the row of 56 padded to 57)
# against the unrolled 2 x 4 (8, no slack over the FMA latency x 2 pipes). With the window unrolled the 12-accumulator tiles
# spilled (4 x 3, 2 x 6, 1 x 12, 2 x 2 rows x 3: 34-68 spill stores per loop); as loops 4 x 3 and 2 x 5 don't (2 x 6 and 1 x 12
# still do). Zen 5, znver3 code, kernel time, A/B in one process: 3x3 8x64x56x56 one thread (CPU time, medians of 15) 2 x 4
# 16.3 ms, 4 x 3 14.6, 2 x 5 15.8; 32x64x56x56 one thread (medians of 11) 63.4 -> 56.6 ms, two (wall, 31) 32.6 -> 29.3. Its
# loop: 1.8 instructions and 0.58 loads (+0.17 prefetches) per FMA, 1.5 loads a cycle at 2 FMAs a cycle (Zen 3: 2 or more)
# The rows of part vectors too (AVX2's 28 and 14), one thread, medians of 11-21: 3x3 8x128x28x28 -> 128 2 x 4 15.0 -> 4 x 3 (28
# padded to 30) 14.1 ms, 8x64x28x28 -> 64 3.79 -> 3.56, 8x256x14x14 -> 256 1 x 7 16.7 -> 4 x 3 (14 padded to 15) 14.1 (0.84-0.96x
# over 11 shapes of 32-512 channels). Not where the input is read in place through gates (a small one, no padded copy): 8x8x40x40
# -> 32 1.48x the time, 8x16x24x24 -> 32 1.16x, 8x64x14x14 -> 64 1.54x, 8x16x28x28 -> 32 1.64x (taps left as loops, spills).
# Rows of powers of two below the lanes spilled or ran 2.5-5x the time as loops (2 x 4, 4 x 2); a stride-2 conv's phases (1 or
# 2 taps along the row) are not measured: TAP_LOOP_MIN_WINDOW
# 2 channel vectors x 5 pixels (10 accumulators) gained little or lost: 8x64x56x56 -> 64 0.97x, 8x16x56x56 -> 16 1.02x:
# TAP_LOOP_VECTORS
CHANNEL_TAP_LOOPS = True
TAP_LOOP_MIN_WINDOW = 3
TAP_LOOP_VECTORS = 4

def _tap_loop_tile(regs: int, n_out: int, n_vecs: int, lanes: int, panel_bytes: int) -> tuple[int, int] | None:
  """(channel vectors, pixels) of a channel tile with the window as loops (CHANNEL_TAP_LOOPS): TAP_LOOP_VECTORS dividing the
  `n_vecs` channel vectors, their panel (`panel_bytes` a vector) within PACK_MAX_BYTES, and the most pixels, no power of two,
  whose registers (one per accumulator, a broadcast per pixel, a weight) fit `regs`, the row of `n_out` padded by at most
  1/MM_PAD_FULL (least padding first among as many)."""
  j = TAP_LOOP_VECTORS
  if n_vecs % j or j * panel_bytes > PACK_MAX_BYTES: return None
  fits = [(rows, -(-n_out % rows)) for rows in range(3, lanes) if rows & (rows - 1) and j * rows + rows + 1 <= regs and
          lanes * j * rows <= MAX_REGISTER_ELEMS and (n_out % rows == 0 or _pad_ok(n_out, rows, MM_PAD_FULL))]
  return (j, max(fits)[0]) if fits else None

def _channel_block(k: Kernel, outs: list[UOp], loads: list[UOp], contig_out: UOp, lanes: int) -> Kernel | None:
  """A conv whose output rows hold few vectors (ResNet's 7x7 and 14x14 stages: a row of 7 holds none), or no whole number of
  them (CHANNEL_PAD_SHARE), as the product it is
  (rows n*oh*ow, columns the output channels): vectors along the channels, a packed panel of the weights (contiguous along
  them, copied once per channel block and read by every pixel), a block of `rows` pixels of the output row broadcast from the
  input, the kernel columns unrolled so neighbouring pixels share those loads. The tile (vectors x rows) with the most
  accumulators that fits the vector registers, the register limit and the panel; the row block is not a power of two, which
  would win the expander's vector axis (the store is contiguous along it), unless it is below the lanes beside 2 or more
  channel vectors (odd rows, CHANNEL_POW2_ROWS). None when the kernel is not such a conv."""
  rnd = k.renderer
  n_out = range_size(contig_out)
  if rnd.has_local or n_out is None: return None
  # the product's inputs: loads inside the reduction (a fused batchnorm's parameters or a residual are read once per output)
  reds = [r for r in k.of_type(AxisType.REDUCE) if range_size(r) is not None]
  red_loads = [ld for ld in loads if any(r in ld.toposort() for r in reds)]
  # a longer row only where padding it to whole vectors costs more than the channel tile's scattered stores: a row of 56 on
  # AVX-512's 16 lanes pads to 64, 1/8 of the FMAs on padding. One Zen 5 thread, CPU time, A/B in one process, medians of 7-9:
  # 3x3 8x64x56x56 175-198 -> 195-208 GFLOP/s, 8x32x100x100 39-42 -> 136-156; the same Zen 5 running code built for Haswell:
  # 8x128x28x28 (28 on 8 lanes) 75-78 -> 88-89; 56 there (7 whole vectors) lost with 1 x 7 pixels. Not where an input is read
  # once per output along the row (a residual): lanes across the channels gather it (ResNet-18's 8x64x56x56 conv-bn-add-relu,
  # same method: 9.96-10.04 -> 10.36-10.59 ms), nor at a stride, where a row block of 14 reads 29 inputs per kernel row, not
  # 16 (ResNet-18's 8x64x56x56 -> 128 3x3/2 in Haswell code, same method: 11.6-12.2 -> 12.3-13.2 ms)
  x_loads = [ld for ld in red_loads if contig_out in ld.toposort()]
  strided = max((st[1] for ld in x_loads if (st := strided_offset(ld.src[0].src[1], contig_out)) is not None), default=1)
  odd = CHANNEL_ODD_ROWS and rnd.odd_row_channel_tile and rnd.simd_regs <= CHANNEL_ODD_ROW_REGS and n_out > lanes and \
    n_out % lanes == 0 and (n_out // lanes) % 2 == 1
  if n_out >= CHANNEL_ROW_VECTORS * lanes and ((n_out % lanes == 0 and not odd) or _pad_ok(n_out, lanes, CHANNEL_PAD_SHARE) or
                                               strided >= 2 or any(contig_out in ld.toposort() for ld in loads if ld not in red_loads)): return None
  w_loads = [ld for ld in red_loads if contig_out not in ld.toposort()]
  chan = next((r for r in reversed(outs) if r is not contig_out and all(r not in ld.toposort() for ld in x_loads) and
               all(r in ld.toposort() for ld in w_loads)), None)
  if chan is None or not x_loads or not w_loads or (nc := range_size(chan)) is None or nc % lanes: return None
  windows = [r for r in reds if _window_sized(r) and _sliding(r, [contig_out], x_loads)]
  # (or a 1x1 conv at a stride, x[2*ow], whose rows hold no whole vector: no window, and its pixels can't merge into a longer
  # row; one Zen 3 thread, A/B in one process: ResNet's 8x256x14x14 -> 512 1x1/2 7.1 -> 2.9 ms, where _register_block ran its
  # 7 columns scalar; 8x128x28x28 -> 256 1x1/2 (14 columns, 2 vectors padded to 16 there) 1.9 -> 2.4 here, so not that; nor
  # where the row pads to one vector as _narrow_tile allows, whose tile of one vector x rows of output channels beats this one:
  # one Zen 5 thread, A/B in one process, medians of 11: that 14 on 16 lanes 70 -> 117 GFLOP/s, 7 on AVX2's 8 52 -> 73)
  # (a window down the rows only, on rows shorter than a vector, is a conv too: _merge_loops leaves those rows apart)
  more = [r for r in reds if r not in windows and _window_sized(r) and _sliding(r, outs, x_loads)]
  if not windows and not (more and n_out < lanes) and (strided < 2 or n_out >= lanes or _pad_ok(n_out, lanes, _narrow_share(rnd))):
    return None
  # the windows along the other output axes too (the kernel rows), unrolled after the tile where the register limit allows: a
  # loop of 3 around the tile pays its branch and address updates every 3 steps (one Zen 3 thread, A/B in one process: 3x3
  # 8x256x14x14 25.7 -> 23.0 ms, 8x512x7x7 27.2 -> 23.6; AVX-512's wider tiles don't fit it)
  # each weight's panel holds its own reduction (a conv with its 1x1 shortcut conv fused in: 512x3x3 and 256 long)
  regs, item = rnd.simd_regs, w_loads[0].dtype.itemsize
  red_len = max(prod(range_size(r) or 1 for r in reds if r in ld.toposort()) for ld in w_loads)
  # a residual along a row of one vector (ONNX resnet's 16x16 stage on 16 lanes) over a short reduction: the row tile reads it
  # as vectors, the channel tile gathers it (a load and insert per element, against red_len/lanes FMAs per output). One Zen 5
  # thread, A/B in one process, medians of 11, 3x3 + r: 2x16x16x16 -> 16 21.7 -> 17.5 us, 1x 14.0 -> 11.5, 8x 107 -> 83, -> 32
  # 46.9 -> 36.1; from 32 input channels on mixed (2x32 -> 32 85 -> 79, 2x64 -> 64 224 -> 301, 8x64 1117 -> 871, 1x128 -> 128
  # 514 -> 1132 us), so not there
  if n_out % lanes == 0 and strided < 2 and red_len < CHANNEL_GATHER_RED * lanes and \
     any(contig_out in ld.toposort() for ld in loads if ld not in red_loads): return None
  win = prod(range_size(r) or 1 for r in windows)
  # registers: the accumulators, a weight vector per kernel column unrolled (each broadcast input serves its neighbours'
  # columns: j * win of them live) and the broadcast. Counting one weight vector, AVX2 took 14 accumulators and spilled; one
  # Zen 3 thread, A/B in one process: 3x3 8x128x28x28 28.4 -> 24.5 ms with 7, 8x256x14x14 31.7 -> 27.5, 8x512x7x7 27.1 -> 25.2
  def fits(j: int, rows: int) -> bool:
    return (nc // lanes) % j == 0 and j * rows + j * win + 1 <= regs and lanes * j * rows * win <= MAX_REGISTER_ELEMS and \
      j * lanes * red_len * item <= PACK_MAX_BYTES
  tiles = [(j * rows, j, rows) for j in (4, 2, 1) for rows in range(3, n_out + 1) if n_out % rows == 0 and rows & (rows - 1) and fits(j, rows)]
  # (2 or more vectors of channels, a pixel block below the lanes: the channels keep the expander's vector axis)
  below_lanes = [(j * rows, j, rows) for j in (4, 2) for rows in range(2, lanes) if n_out % rows == 0 and fits(j, rows)]
  if CHANNEL_POW2_ROWS and tiles and max(tiles)[0] < MM_MIN_ACC: tiles += below_lanes
  if odd:
    tiles = below_lanes
    if not tiles or max(tiles)[0] < MM_MIN_ACC: return None
  pixels = contig_out
  # (only where the input's window loads are ungated, read from its padded copy: a small input read in place through gates keeps
  # the unrolled window, its gated loads' branches in the tap loops leave LLVM's unroller and scheduler to spill)
  taps = _tap_loop_tile(regs, n_out, nc // lanes, lanes, lanes * red_len * item) if CHANNEL_TAP_LOOPS and \
    rnd.odd_row_channel_tile and regs <= CHANNEL_ODD_ROW_REGS and strided < 2 and win >= TAP_LOOP_MIN_WINDOW and \
    not any(len(ld.src[0].src) > 2 for ld in x_loads) else None
  if taps is not None and (not tiles or taps[0] * taps[1] <= max(tiles)[0]): taps = None
  if taps is not None: j, rows = taps
  elif tiles: _, j, rows = max(tiles)
  else:
    # a row of 8 or 16 (a stride-2 conv's gradient by phases, 8x512x7x7 -> 8x8 outputs) holds no such block: the rows come from
    # the next output axis the input uses and the weights don't (the output rows: no load is contiguous along them, so any
    # block works), the most rows first; the row stays a loop. One Zen 5 thread, A/B in one process, medians of 7: the phase
    # convs of 8x256x14x14 -> 512 3x3/2's input gradient (8x512x9x9 -> 256 over 8x8) 2x2 8.0 -> 3.0 ms (67 -> 177 GFLOP/s), 1x2
    # 4.1 -> 1.65 ms, where _register_block ran half vectors along the row
    if (down := next((r for r in reversed(outs) if r is not contig_out and r is not chan and any(r in ld.toposort() for ld in x_loads)
                      and all(r not in ld.toposort() for ld in w_loads)), None)) is None: return None
    pixels, n_px = down, range_size(down) or 0
    # (most accumulators, then most rows: 2 vectors x 8 rows 187 GFLOP/s, 4 x 4 165, same A/B). A row of whole vectors (8 on
    # AVX2) keeps _register_block's tile of MM_MIN_ACC unless this one holds more: Haswell code on the Zen 5, 3x3 32x64x8x8
    # 1.75 -> 1.95 ms with 8 accumulators by rows, 2x2 8x512x9x9 6.4 -> 6.1 ms; AVX-512's 16 rows x 2 vectors on a row of 16:
    # 3x3 8x128x16x16 5.8 -> 3.6 ms
    by_rows = [(j * rows, rows, j) for j in (4, 2, 1) for rows in range(2, n_px + 1) if n_px % rows == 0 and fits(j, rows)]
    if not by_rows or (n_out % lanes == 0 and max(by_rows)[0] <= MM_MIN_ACC): return None
    _, rows, j = max(by_rows)
  img = _image_blocks(k, chan, x_loads, w_loads, nc // (j * lanes), nc * red_len * item)
  try:
    if taps is not None and n_out % rows: k = k.apply(Opt(OptOps.PADTO, _pos(k, pixels), rows))
    k = k.apply(Opt(OptOps.UPCAST, _pos(k, chan), lanes))
    if j > 1: k = k.apply(Opt(OptOps.UPCAST, _pos(k, _same(k, chan)), j))   # j vectors: the expander's lanes are one register
    k = k.apply(Opt(OptOps.UPCAST, _pos(k, _same(k, pixels)), rows))
    if j * rows < MM_MIN_ACC and 2 * j * rows + j * win + 1 <= regs and 2 * lanes * j * rows * win <= MAX_REGISTER_ELEMS and strided < 2:
      # too few accumulators (at 512 input channels only one vector's panel fits): two images or output rows, which the
      # weight vectors are reused across (8x512x7x7, one thread: 15.1 -> 13.2 ms); not at a stride: a kernel row of 7 pixels
      # then reads 15 inputs, not 9, whose broadcasts beside 14 accumulators spill (8x256x14x14 -> 512 3x3/2, one Zen 3
      # thread, A/B in one process: 21.4 -> 13.5 ms)
      for t in [r for r in k.of_type(AxisType.LOOP) if r is not _same(k, chan) and all(r not in ld.toposort() for ld in w_loads)]:
        if (k2 := _try(k, Opt(OptOps.UPCAST, _pos(k, t), 2))) is not k:
          k = k2
          break
    # the channel blocks outermost (unless the tile holds them all): a block's weight panel is packed once, before the loop
    # nested in them, and read by every image, row and pixel block; or the images outside them (_image_blocks), the panel
    # packed per image and channel block
    blocks = (c := _same(k, chan)).arg[1] is AxisType.LOOP
    if blocks and img is not None and len(k.of_type(AxisType.LOOP)) > 2:
      if (first := k.of_type(AxisType.LOOP)[0]) is not (i := _same(k, img)): k = k.apply(Opt(OptOps.SWAP, _pos(k, first), _pos(k, i)))
      if (second := k.of_type(AxisType.LOOP)[1]) is not (c := _same(k, chan)): k = k.apply(Opt(OptOps.SWAP, _pos(k, second), _pos(k, c)))
      pack_at = 2
    else:
      if blocks and (first := k.of_type(AxisType.LOOP)[0]) is not c: k = k.apply(Opt(OptOps.SWAP, _pos(k, first), _pos(k, c)))
      pack_at = int(blocks)
    for w in windows if taps is None else []: k = _try(k, Opt(OptOps.UNROLL, _pos(k, _same(k, w)), 0))
    for w in more if taps is None else []:
      if k.register_elems() * (range_size(w) or 99) <= MAX_REGISTER_ELEMS: k = _try(k, Opt(OptOps.UNROLL, _pos(k, _same(k, w)), 0))
    return k.apply(Opt(OptOps.PACK, _pos(k, k.of_type(AxisType.LOOP)[pack_at])))
  except (KernelOptError, IndexError): return None

def _image_blocks(k: Kernel, chan: UOp, x_loads: list[UOp], w_loads: list[UOp], blocks: int, weight_bytes: int) -> UOp | None:
  """The image loop a conv's channel tile runs outside its `blocks` channel blocks, so the thread blocks are images (None: the
  channel blocks outermost): where the renderer reads large padded inputs in place (Renderer.large_conv_in_place) on a thread
  pool and the input, read through gated loads, is larger than the L2 but one image's is not, each image stays in the L2 for
  all its channel blocks, where channel blocks outermost read the whole input once per block (2-core Zen 4, 32x64x56x56 -> 64
  3x3 in place, per-kernel A/B: 2 threads 35.9 -> 34.2 ms; the figures at CPULLVMRenderer.large_conv_in_place). Only where the
  input re-reads saved outweigh the weights' panels then packed once per image (`weight_bytes` in all): 8x256x14x14 -> 512
  3x3/2 (16 blocks of 200 KB images, 4.7 MB of weights), same host, 2 threads, engine path, A/B in one process: 4.61 ms
  copied, 4.44 in place, 5.32 in image blocks."""
  rnd = k.renderer
  if not rnd.large_conv_in_place or not rnd.threads or not rnd.l2_bytes or not any(len(ld.src[0].src) > 2 for ld in x_loads): return None
  img = next((r for r in k.of_type(AxisType.LOOP) if r is not chan and all(r in ld.toposort() for ld in x_loads) and
              all(r not in ld.toposort() for ld in w_loads)), None)
  if img is None or (n := range_size(img)) is None: return None
  steps = [st[1] for ld in x_loads if (st := strided_offset(ld.src[0].src[1], img)) is not None]
  if len(steps) != len(x_loads): return None
  image = max(steps) * x_loads[0].dtype.itemsize
  return img if image <= rnd.l2_bytes < n * image and (blocks - 1) * image > weight_bytes else None

def _register_block(k: Kernel, outs: list[UOp], loads: list[UOp], contig_out: UOp, lanes: int, pad: bool) -> Kernel:
  """Register blocking: the contiguous output axis in vector registers; `other`, an output axis the vector-loaded input does
  not use (matmul: the rows; conv: the output channels), unrolled so each vector load is reused across it; `third`, a further
  axis some input does not use, when the tile has too few accumulators; the reduce unrolled a little. With `pad`, axes the
  tile does not divide are padded to it (PADTO: the extra rows and columns load zeros and store nothing)."""
  rnd, masked = k.renderer, k.renderer.masked_vectors
  # the loads along the vector axis; when none is contiguous in it (a stride-2 conv reads every second input column), those
  # that use it at all: their gathered vectors are what the tile must reuse across another axis (conv: the output channels)
  vec_loads = [ld for ld in loads if _contiguous_in(k, contig_out, [ld])] or [ld for ld in loads if contig_out in ld.src[0].src[1].toposort()]
  strided = not any(_contiguous_in(k, contig_out, [ld]) for ld in vec_loads)
  # (an axis as short as a kernel window is `other` only where no axis is long enough for a packed panel to be reused by
  # MM_PACK_REUSE row blocks: a weight gradient dW[c, kh, kw, o] with o in vectors takes its rows from c, across which the dY
  # panel is reused, and kw as `third`; the stem's 12 = 3 channels x 4 is not: unpacked, its rows gained nothing, 36 -> 40 ms)
  cands = [r for r in reversed(outs) if r is not contig_out and any(r not in ld.toposort() for ld in vec_loads)]
  other = next((r for r in cands if (range_size(r) or 0) > MM_WINDOW), None) if cands else None
  if other is None or (range_size(other) or 0) < MM_PACK_REUSE * MM_I: other = cands[0] if cands else None
  # (the vector-loaded input uses every output axis, a depthwise conv's x[n, c, oh + kh, ow + kw]: `other` is one only a small
  # input misses, oh for the weights, and nothing big is reused across it)
  small_reuse = other is None
  if other is None: other = next((r for r in reversed(outs) if r is not contig_out and any(r not in ld.toposort() for ld in loads)), None)
  third = next((r for r in reversed(outs) if r is not contig_out and r is not other and any(r not in ld.toposort() for ld in loads)), None)
  reused = any(contig_out not in ld.toposort() for ld in loads)
  reds = [r for r in k.of_type(AxisType.REDUCE) if range_size(r) is not None]
  window = any(_window_sized(r) and _sliding(r, outs, loads) for r in reds)
  item = loads[0].dtype.itemsize if loads else 4
  # a packed panel holds the reduce axes its inputs use: not a mean's pixels over a conv in the same kernel
  panel_reds = [r for r in reds if other is None or any(r in ld.toposort() for ld in _panel_loads(k, other))]
  col_bytes = prod(range_size(r) or 1 for r in panel_reds) * lanes * item
  # (a.T @ b over one long reduce, its row-side input strided along it, is plain too: _packed_both packs its row blocks where
  # the tile's rows divide them, and 2x6 where they don't (rows padded, read in place) still beat 2x4 over packed rows. One Zen 3
  # thread, A/B in one process, medians of 7: GPT-2 block dW (K=256) 2304x768 12.3 -> 10.7 ms (74 -> 85 GFLOP/s), 3072x768 15.7 ->
  # 13.8, 768x3072 16.1 -> 14.1, 768x768 3.8 -> 3.4; attention's dV/dK 1.73 -> 1.19 and 1.39 -> 1.22 ms (padded); ResNet's
  # 1x1 input gradients 6.16 -> 5.95, 5.08 -> 4.92 ms (padded). AVX-512 keeps 4x4 either way)
  plain = other is not None and (range_size(other) or 0) >= MM_PACK_REUSE * max(i for _, i in MM_TILES_PLAIN) and \
    not any(_sliding(r, outs, loads) for r in reds) and \
    (all(contiguous_offset(ld.src[0].src[1], r) is not None for ld in loads if other in ld.toposort() for r in reds if r in ld.toposort())
     or _long_transposed(k, other, contig_out))
  if other is not None and not window and reused and not small_reuse and not rnd.has_local and \
     _window_sized(other) and (one := _one_column_tile(k, contig_out, other, vec_loads, lanes)) is not None:
    return one
  # (whether a one-vector tile's panel, beyond the L2, would be read in place and a two-vector one's packed, their row blocks not
  # split yet: asked only where one vector can pad less than two)
  col_side_bytes = sum(b.dtype.size * b.dtype.base.itemsize for b in {ld.src[0].src[0] for ld in _panel_loads(k, other)}) if other is not None else 0   # type: ignore[attr-defined]
  one_vector = other is not None and plain and (range_size(contig_out) or 0) % (2 * lanes) != 0 and not rnd.has_local and \
    col_side_bytes > rnd.l2_bytes and _panel_in_place(k, other, lanes, MM_TILE_ONE_VECTOR[1]) and not _panel_in_place(k, other, 2 * lanes, MM_TILE_FEWER_COLS[1])
  tile_j, tile_i = mm_tile(rnd, window, col_bytes, narrow=item == 2, plain=plain, n_cols=range_size(contig_out) or 0, lanes=lanes,
                           one_vector=one_vector, taps=_taps_product(outs, reds, loads),
                           half=plain and big_l2(rnd) and any(u.dtype.scalar() in (dtypes.bfloat16, dtypes.float16) for u in k.ast.toposort()))
  if other is not None and not window and not rnd.has_local and tile_j * col_bytes > PACK_MAX_BYTES >= col_bytes and \
     _panel_reuse(k, other) > (range_size(other) or 0):
    # the panel is read again for every step of the reduce axes it does not use (8x512x7x7 conv summed by the pooling): a
    # one-vector tile over a packed panel beats two vectors gathered each step (one AVX-512 thread: 65 -> 17.5 ms)
    tile_j = 1
  if window and reused: tile_j, tile_i = _conv_tile(rnd, range_size(contig_out), lanes)
  # a depthwise conv reading its padded input in place (gates along the vector axis): whole rows in registers
  gated = any(len(ld.src[0].src) > 2 and contig_out in ld.src[0].src[2].toposort() for ld in loads)
  win = prod(range_size(r) or 1 for r in reds if _window_sized(r) and _sliding(r, outs, loads))
  row = _whole_row_tile(rnd, range_size(contig_out), range_size(other) if other is not None else None, lanes, win) \
    if small_reuse and window and reused and gated and not rnd.has_local else None
  # a row narrower than the tile (7 wide) keeps the paths made for it; a masked one padded to a vector does not
  if row is not None and row[0] < tile_j and not _dw_row_masked(rnd, range_size(contig_out) or 0, lanes): row = None
  if row is not None: tile_j, tile_i = row
  third_vecs = 0   # the tile's vectors taken along `third` (below)
  if pad and reused and not window and row is None and other is not None and \
     (narrow := _narrow_tile(rnd, range_size(contig_out), lanes, (tile_j, tile_i))) is not None:
    # mobilenet's 1x1 convs over 14x14 and 7x7 pixels (rows of 196 and 49 on 16 lanes), ResNet's 1x1/2 downsample's rows of 28
    if NARROW_THIRD_VECTORS and narrow[0] == 1 and third is not None and narrow[1] < tile_j * tile_i and \
       (range_size(third) or 0) % tile_j == 0 and (rows := _dividing_rows(range_size(other), tile_i)) * tile_j >= MM_MIN_ACC:
      # one vector holds fewer accumulators than the plain tile (AVX2: 1 x 8 where 2 x 6 holds 12, 9 loads per 8 FMAs): the
      # plain tile's vectors from `third` instead (two images of ResNet-50's 7x7 maps), each broadcast then feeds tile_j FMAs
      narrow, third_vecs = (1, rows), tile_j
    (tile_j, tile_i), k = narrow, _try(k, Opt(OptOps.PADTO, _pos(k, contig_out), lanes * narrow[0]))
    contig_out = _same(k, contig_out)
  elif WHOLE_ROW_THIRD_VECTORS and masked and pad and reused and not window and row is None and other is not None and third is not None and \
       tile_j > 1 and (n_row := range_size(contig_out)) is not None and n_row % lanes == 0 and _pad_ok(n_row, lanes * tile_j) and \
       (range_size(third) or 0) % tile_j == 0 and (rows := _dividing_rows(range_size(other), tile_i)) * tile_j >= MM_MIN_ACC:
    # a row of whole vectors that the padding below would pad to the tile's (784 pixels, 49 vectors of 16: 800) keeps its length:
    # the tile's vectors come from `third`, as the narrow tile's do (WHOLE_ROW_THIRD_VECTORS)
    tile_j, tile_i, third_vecs = 1, rows, tile_j
  want_i = (tile_i,) if row is not None else (tile_i, 4, 3, 2)
  if pad:
    # 1023 columns fit no vector and 1000 no pair of them: round up, the panel copy PACK makes reads the gated loads once
    # a row that holds no whole vector (conv's 56 on 16 lanes) would run on half-width ones, half the FMAs per instruction:
    # padding may then cost up to 1/MM_PAD_FULL more (3x3 conv 32x64x56x56 on AVX-512: about 1.4x the FLOP rate padded to 64)
    # (only where some input is read as whole vectors along it: contiguous, or strided on a renderer that masks the tail's
    # lanes; a gather is lane by lane, padded or not)
    n_out, full = range_size(contig_out), any(_contiguous_in(k, contig_out, [ld]) or (masked and _strided_in(contig_out, ld)) for ld in loads)
    # (a whole-row depthwise tile pads its row as _whole_row_tile allowed, gathered or not: unrolled whole, the pad lanes' gates
    # are constants and their loads fold away; a C renderer's 3x3/2 8x144x56x56 at a loop position 3.2 -> 1.4 ms)
    if (row is not None and n_out is not None and n_out % lanes) or \
       _pad_ok(n_out, lanes * (tile_j if reused else 1), MM_PAD_FULL if full and n_out is not None and n_out % lanes else 8):
      k = _try(k, Opt(OptOps.PADTO, _pos(k, contig_out), lanes * (tile_j if reused else 1)))
    if other is not None and _pad_ok(range_size(other), tile_i): k = _try(k, Opt(OptOps.PADTO, _pos(k, other), tile_i))
    contig_out, other = _same(k, contig_out), (_same(k, other) if other is not None else None)
  nacc, ncols, amt_i = 1, 1, 0
  regs = rnd.simd_regs
  if amt_j := _pick_amt(range_size(contig_out), (lanes, 8, 4, 2)):
    k = _try(k, Opt(OptOps.UPCAST, _pos(k, contig_out), amt_j))
    # a second vector register along the same axis: more independent accumulators (the expander unrolls it); not when one
    # vector took the whole row (8 wide on AVX2): the accumulators then come from `third` below (ResNet's 32x8x8 3x3 conv)
    if reused and amt_j == lanes and tile_j > 1 and _same(k, contig_out).arg[1] is not AxisType.UPCAST and \
       (j2 := _pick_amt(range_size(_same(k, contig_out)), (tile_j, 2))):
      if other is not None and (ai := _pick_amt(range_size(other), want_i)) and j2 * ai + j2 + ai > regs:
        # the rows upcast before the columns: the expander then emits each row's broadcast next to its FMAs with every column
        # vector, one broadcast live at a time; columns first, LLVM keeps all the rows' broadcasts live and spills (AVX2 2x6:
        # 12 accumulators + 2 columns + 6 broadcasts; one Zen 3 thread, 960^3: 48 -> 69 GFLOP/s, 3x4 60 -> 74)
        k = _try(k, Opt(OptOps.UPCAST, _pos(k, other), ai))
        if k.applied[-1].op is OptOps.UPCAST: amt_i, nacc, other = ai, ai, _same(k, other)
      k = _try(k, Opt(OptOps.UPCAST, _pos(k, _same(k, contig_out)), j2))
      nacc, ncols = nacc * j2, j2
    elif other is None and amt_j == lanes and (j4 := _pick_amt(range_size(_same(k, contig_out)), (MM_COL_VECS, 2))):
      # a column reduction (sum over rows): each reduce step reads a row apart, so read whole cache lines of it per step
      k = _try(k, Opt(OptOps.UPCAST, _pos(k, _same(k, contig_out)), j4))
  if other is not None and not amt_i and (amt_i := _pick_amt(range_size(other), want_i)):
    k = _try(k, Opt(OptOps.UPCAST, _pos(k, _same(k, other)), amt_i))
    nacc *= amt_i
  # (beside whole rows only while their window still unrolls whole within the register limit)
  # (a strided conv whose row holds an odd number of vectors took one where its tile has more, the stem's 112 on 16 lanes: as
  # many accumulators as the tile's, CONV_ODD_ROW_ACC; see there)
  acc = tile_j * tile_i if CONV_ODD_ROW_ACC and ncols < tile_j and reused and not small_reuse and row is None and \
    strided and any(_sliding(r, outs, loads) for r in reds) else MM_MIN_ACC
  if third is not None and (nacc < acc or third_vecs) and (amt_t := _pick_amt(range_size(third), (third_vecs,) if third_vecs else (acc // nacc, MM_MIN_ACC // nacc, 2))) and \
     (row is None or lanes * nacc * amt_t * win <= MAX_REGISTER_ELEMS):
    # too few accumulators to hide the FMA latency (conv: the width is not a multiple of two vectors): another output axis
    k = _try(k, Opt(OptOps.UPCAST, _pos(k, _same(k, third)), amt_t))
    if k.applied[-1].op is OptOps.UPCAST:
      nacc *= amt_t
      if third_vecs: ncols *= amt_t   # its vectors are loaded each reduce step, beside the row's: no room to unroll the reduce
  if other is not None and not rnd.has_local and (tiled := _packed_both(k, contig_out, other, amt_i or 1)) is not None:
    return tiled
  if other is not None and MM_SWAP and not small_reuse:
    # the reused axis outermost: the block of the other input its loads touch stays in cache while it is reused (not for a
    # depthwise conv: its column blocks outermost walk the image down strips of every row; 8x32x112x112 3x3, one Zen 3
    # thread: 5.2 -> 12-13 GFLOP/s)
    a, b = _same(k, other), _same(k, contig_out)
    if a.arg[0] < b.arg[0]:
      k = _try(k, Opt(OptOps.SWAP, _pos(k, a), _pos(k, b)))
      if k.applied[-1].op is OptOps.SWAP: other = b   # SWAP exchanges ids: the row loop now has the id the column loop had
  windows = [r for r in k.of_type(AxisType.REDUCE) if _window_sized(r) and _sliding(r, k.of_type(AxisType.LOOP) +
             k.of_type(AxisType.UPCAST), _loads(k))]
  for w in windows:
    # a small window (conv's kernel rows and columns): fully unrolled, so neighbouring taps share loads and no loop is that short
    k = _try(k, Opt(OptOps.UNROLL, _pos(k, _same(k, w)), 0))
  red = next((r for r in k.of_type(AxisType.REDUCE) if range_size(r) is not None), None)
  # the reduce unrolled by MM_K only where the second step's column vectors and broadcast fit the registers beside the
  # accumulators (AVX2's 12-accumulator tiles: they don't, and spill; one Zen 3 thread, 960^3 2x6: 35 -> 60 GFLOP/s); by
  # MM_K_BIG_L2 where the tile's vectors come from `third` (see MM_K_BIG_L2)
  red_size = (range_size(red) or 0) if red is not None else 0
  wide = (MM_K_BIG_L2,) if third_vecs and big_l2(rnd) and nacc + MM_K_BIG_L2 * (ncols + 1) <= regs and \
    k.register_elems() * MM_K_BIG_L2 <= MAX_REGISTER_ELEMS else ()
  if red is not None and red_size >= 16 and (amt_k := _pick_amt(red_size, (*wide, MM_K))) and nacc + MM_K * (ncols + 1) <= regs:
    k = _try(k, Opt(OptOps.UNROLL, _pos(k, red), amt_k))
  # (a panel read in place groups nothing: its rows are read from the L2 either way)
  in_place = other is not None and not rnd.has_local and _panel_in_place(k, _same(k, other), lanes * ncols)
  if other is not None and plain and not in_place and not rnd.has_local and (cols := _column_loop(k, _same(k, other))) is not None and \
     (g := mm_panel_group(rnd, range_size(cols) or 0, col_bytes * ncols, lanes * ncols)) > 1:
    # several column panels packed together and walked inside each row tile: the tile's rows of the other input are read from
    # L3 once per group instead of once per panel (AVX2: 4 panels of 16 columns; measured at MM_GROUP_COLS)
    k = _try(k, Opt(OptOps.TILE, _pos(k, cols), g))
  if other is not None and _panel_reuse(k, _same(k, other)) >= MM_PACK_REUSE and not rnd.has_local and not in_place:
    # the input the row loop doesn't use is read at a stride of a whole row per reduce step (a new page each time for big
    # matrices: L1 set conflicts and TLB misses); a contiguous copy made once per panel is read by every row block
    k = _try(k, Opt(OptOps.PACK, _pos(k, _same(k, other))))
  threads = rnd.threads
  if other is not None and plain and threads and k.applied and k.applied[-1].op is OptOps.PACK and \
     prod(range_size(r) or 1 for r in k.axes if r.arg[1] is not AxisType.OUTER) >= MIN_THREADED_WORK and \
     (cols := _column_loop(k, _same(k, other))) is not None and _thread_loop(k, threads) is cols:
    # the packed column panels on the threads in small blocks (hand_coded's split then finds the kernel split already)
    k = _try(k, Opt(OptOps.THREAD, _pos(k, cols), _panel_blocks(range_size(cols) or 1, threads)))
  return k

PANEL_STREAM_REUSE = 8        # beyond the renderer's panel_budget, a panel read by at most this many row blocks is read in
                              # place too, prefetched (measured with 32 vector registers: Zen 5's 2 x 8 and 1 x 16 tiles)
# the same with 16 registers, whose plain tile holds 6 rows (AVX2's 2 x 6) where 32 hold 8 or 16: the same output channels are cut
# into more, shorter row blocks (64 channels: 11 blocks of 6, where AVX-512 has 8 of 8). The packed copy of a panel from memory
# runs as a burst of misses while no FMA runs; the in-place loads' prefetches of the next panel spread over the first row
# block's FMAs. One Zen 3 thread, thread time, A/B in one process (packed vs in place), medians of 11-15 under load 3-16, in place
# / packed: 1x1 convs 32x256x28x28 -> 64 0.92-0.95 (five runs), 16x256x28x28 -> 64 0.90, 8x256x28x28 -> 64 0.93-0.96,
# 32x64x56x56 -> 64 0.86-0.94, 8x256x28x28 -> 72 (12 blocks) 0.92-0.93; more blocks lose: -> 96 (16 blocks) 1.06-1.10,
# 8x512x28x28 -> 128 (22) 1.02-1.05
PANEL_STREAM_REUSE_FEW_REGS = 12

L1_SETS, L1_WAYS, LINE_BYTES = 64, 8, 64   # x86's L1 data cache: 64 sets of 64-byte lines, 8 ways (Zen 3; Zen 5: 12)

def _panel_in_place(k: Kernel, rows: UOp, cols: int, row_tile: int = 1) -> bool:
  """Whether the inputs a PACK at `rows` would copy are better read where they are: all of them fit the renderer's panel_budget
  (a share of its L2: they stay there for every row block, so the copy only adds its own time) and the lines of a panel (the
  tile's `cols` columns of each reduce step) start on whole lines (else vector loads split across lines, where the packed panel
  is aligned: 1x384x14x14 -> 96, rows of 784 bytes, in Haswell code 111 -> 100 GFLOP/s in place) and spread over the L1 sets:
  no set holds more than the L1's ways or its even share (a matrix with rows 4 KiB apart puts every row in one set).
  A small 1x1 conv, 1x96x24x24 -> 24 (221 KiB, rows of 2304 bytes), one Zen 5 thread, A/B in one process, medians of 11: 167 ->
  199 GFLOP/s. Beyond that budget the first row block reads each panel from the L3 or memory: the copy, prefetching the
  next panel (plugin_cpu/prefetch.py), pays where many row blocks reuse it; where at most PANEL_STREAM_REUSE do (with fewer
  than 32 vector registers PANEL_STREAM_REUSE_FEW_REGS, for a panel within half the ways of each L1 set), the in-place
  loads prefetch the next panel themselves (prefetch.reread_offsets). 1x1 conv 32x256x28x28 -> 64 (8 row blocks of 8 channels,
  from memory), one Zen 5 thread, A/B in one process, medians of 15: packed 171, in place 125, in place with prefetch 205 GFLOP/s;
  8 images (from the L3) 207, 222, 216; 8x144x56x56 -> 24 147, 187, 194; 8x192x28x28 -> 32 185, 232, 226. `row_tile`: the rows
  of a row block where `rows` is not split into blocks yet (a tile being chosen)."""
  # (a renderer-like object of the capabilities alone, as tests make, has no budget: its L2 is unknown)
  budget, panel = k.renderer.panel_budget(), _panel_loads(k, rows)
  if not panel or not budget: return False
  set_lines = 0   # the most lines of the panel in one L1 set
  for ld in panel:
    reds = [r for r in ld.toposort() if r.op is Ops.RANGE and r.arg[1] in (AxisType.REDUCE, AxisType.UNROLL)]
    if not reds or (strides := linear_strides(read_index(ld.src[0]), reds)) is None: return False
    step, n = min(abs(v) for v in strides.values()) * ld.dtype.itemsize, prod(range_size(r) or 1 for r in reds)
    sets = Counter((i * step + b) // LINE_BYTES % L1_SETS for i in range(n) for b in range(0, cols * ld.dtype.itemsize, LINE_BYTES))
    if not step or step % LINE_BYTES or max(sets.values()) > max(L1_WAYS, -(-sum(sets.values()) // L1_SETS)): return False
    set_lines = max(set_lines, max(sets.values()))
  # (the few-register bound only where the panel leaves half of each L1 set's ways to the next panel and the other input: a
  # panel filling them, 8x32x112x112 -> 64 (rows 784 lines apart: 4 sets), read in place 1.08-1.22x the packed time)
  stream_reuse = PANEL_STREAM_REUSE_FEW_REGS if k.renderer.simd_regs < 32 and set_lines <= L1_WAYS // 2 else PANEL_STREAM_REUSE
  return sum(ld.src[0].src[0].dtype.size * ld.dtype.itemsize for ld in panel) <= budget or _panel_reuse(k, rows) // row_tile <= stream_reuse   # type: ignore[attr-defined]

def _one_column_tile(k: Kernel, col: UOp, rows: UOp, col_loads: list[UOp], lanes: int) -> Kernel | None:
  """A product whose rows are an axis as short as a window (the stem's weight gradient dW[n, c', kh', kw', o] from NHWC dY:
  rows kw' of 4, c' of 12, kh' of 4 all shorter than a packed panel's reuse): no row loop reuses a packed panel, so the column
  input is streamed from the outer caches once per pass of the reduction, and each of its vector loads should feed as many
  accumulators as the registers hold. One vector of columns, the rows whole, and another axis it misses split to fill up to
  RED_REUSE_ACC (or the registers) with rows; the column blocks outside the loops it misses, so its block is read by those
  passes in a row; the reduce that slides along the rows (X[kw' + ow]) unrolled by MM_K, where neighbouring taps share
  broadcasts. One Zen 3 thread, A/B in one process, medians of 7: stem dW 8x3x224x224 -> 64 (7x7/2) 50.0 -> 38.8 ms
  (2 vectors x 4 rows: 8 accumulators, each dY vector feeding 4 FMAs; torch's conv2d_weight alone: 35 ms). None when it does
  not fit."""
  regs = k.renderer.simd_regs
  cap = min(RED_REUSE_ACC, regs - 4)   # beside the accumulators: the column vector, a broadcast, its neighbour, one spare
  if (range_size(col) or 0) % lanes or lanes < 2 or (n_rows := range_size(rows) or 0) * 2 > cap: return None
  more = [(n_rows * a, r) for r in k.of_type(AxisType.LOOP) if r is not col and r is not rows and all(r not in ld.toposort() for ld in col_loads)
          for a in [_pick_amt(range_size(r), tuple(a for a in range(cap // n_rows, 1, -1)))] if a]
  if not more: return None
  nacc, third = max(more, key=lambda x: (x[0], -x[1].arg[0]))
  try:
    k = k.apply(Opt(OptOps.UPCAST, _pos(k, col), lanes))
    k = k.apply(Opt(OptOps.UPCAST, _pos(k, rows), 0))
    k = k.apply(Opt(OptOps.UPCAST, _pos(k, third), nacc // n_rows))
    cols = _same(k, col)
    missed = [r for r in k.of_type(AxisType.LOOP) if r.arg[0] < cols.arg[0] and all(r not in ld.toposort() for ld in col_loads)]
    if cols.arg[1] is AxisType.LOOP and missed: k = k.apply(Opt(OptOps.SWAP, _pos(k, cols), _pos(k, min(missed, key=lambda r: r.arg[0]))))
    regs_axes = k.of_type(AxisType.UPCAST)
    slide = next((r for r in k.of_type(AxisType.REDUCE) if (range_size(r) or 0) >= 16 and _sliding(r, regs_axes, _loads(k))), None)
    if slide is not None and (amt := _pick_amt(range_size(slide), (MM_K,))): k = _try(k, Opt(OptOps.UNROLL, _pos(k, slide), amt))
  except KernelOptError: return None
  return k

def _column_loop(k: Kernel, rows: UOp) -> UOp | None:
  """The loop outside `rows` that the panel a PACK at `rows` copies walks (after a SWAP exchanged the ids, not the loop that
  kept the contiguous output axis's id); not one the row-side input uses as well (a batched product's batch: grouping panels
  of different batches reuses no row tile)."""
  packed, reds = _panel_loads(k, rows), k.of_type(AxisType.REDUCE)
  # (the product's row-side input: read inside the reduction; a residual added to the output uses the columns too)
  row_side = [ld for ld in _loads(k) if ld not in packed and any(r in ld.toposort() for r in reds)]
  return next((r for r in k.of_type(AxisType.LOOP) if r.arg[0] < rows.arg[0] and any(r in ld.toposort() for ld in packed) and
               not any(r in ld.toposort() for ld in row_side)), None)

def _panel_loads(k: Kernel, rows: UOp) -> list[UOp]:
  """The loads a PACK at the row loop copies: those that don't use the rows."""
  return [ld for ld in _loads(k) if rows not in ld.toposort()]

def _panel_reuse(k: Kernel, rows: UOp) -> int:
  """How many times a panel packed at the row loop is read: the row blocks, times the reduce axes its inputs (the loads that
  don't use the rows) don't use either: a conv summed by a mean in its kernel (ResNet's last block with the pooling) reads
  the weight panel once per pixel of the mean, over 2 row blocks of 8 images (8x512x7x7, one AVX2 thread: 45 -> 22 ms)."""
  packed = _panel_loads(k, rows)
  outer = [r for r in k.of_type(AxisType.REDUCE) if packed and all(r not in ld.toposort() for ld in packed)]
  return (range_size(rows) or 0) * prod(range_size(r) or 1 for r in outer)

RED_REUSE_ACC = 12            # vector accumulators of a product reduced along memory: each load reused across the others' axes

def _reuse_outputs(k: Kernel, red_loads: list[UOp], most: int = RED_REUSE_ACC) -> Kernel:
  """A product reduced along memory (a weight gradient: dW[o,c,kh,kw] sums dY[n,o,h,w] * X[n,c,h+kh,w+kw] over n, h, w, whose
  output rows are too short for vectors): output axes some input does not use unrolled, innermost first, up to `most`
  partial sums, so each vector load feeds several FMAs (dY's across kw, X's across o) instead of one load per FMA each."""
  nacc, reused = 1, set[UOp]()
  for r in reversed([r for r in k.of_type(AxisType.LOOP) if range_size(r) is not None]):
    # one axis per input it is reused by: a second axis only X misses (kh after kw) would add loads as well as sums
    if not (missed := {ld for ld in red_loads if r not in ld.toposort()}) or missed <= reused: continue
    if amt := _pick_amt(range_size(r), tuple(a for a in (4, 3, 2) if nacc * a <= most)):
      k = _try(k, Opt(OptOps.UPCAST, _pos(k, r), amt))
      if k.applied[-1].op is OptOps.UPCAST: nacc, reused = nacc * amt, reused | missed
  return k

def _group_reduce(k: Kernel) -> Kernel:
  """GPU-style renderers (work-item ids, shared memory): a long reduction with few outputs is shared by a workgroup (GROUP),
  else each output would be one work-item looping over the whole reduction while the rest of the GPU idles. Applied first,
  so a group's work-items read neighbouring elements."""
  outs = k.of_type(AxisType.LOOP)
  if not k.renderer.has_shared or prod(range_size(r) or WG_FEW_OUTPUTS for r in outs) >= WG_FEW_OUTPUTS: return k
  reds = sorted((r for r in k.of_type(AxisType.REDUCE) if (range_size(r) or 0) >= WG_LONG_REDUCE), key=lambda r: -(range_size(r) or 0))
  if reds and (amt := _pick_amt(range_size(reds[0]), (WG_GROUP, WG_GROUP // 4))): k = _try(k, Opt(OptOps.GROUP, _pos(k, reds[0]), amt))
  return k

def _local(k: Kernel) -> Kernel:
  """GPU-style renderers: the innermost output loop split into workgroups (LOCAL) instead of one work-item per workgroup."""
  loops = k.of_type(AxisType.LOOP)
  if loops and (amt := _pick_amt(range_size(loops[-1]), (WG_LOCAL, 16, 8, 4, 2))): k = _try(k, Opt(OptOps.LOCAL, _pos(k, loops[-1]), amt))
  return k

TC = ContextVar("TC", 1)      # 0: never use the renderer's tensor cores (Opt TC); 1: use one whenever a kernel fits it

def _tensor_core(k: Kernel) -> Kernel | None:
  """k on the first of the renderer's tensor cores that computes it (TC=0 turns them off), else None."""
  if not TC: return None
  for i in range(len(k.renderer.tensor_cores)):
    try: return k.apply(Opt(OptOps.TC, i))
    except KernelOptError: pass
  return None

def _merge_loops(k: Kernel) -> Kernel:
  """Neighbouring output loops that every address walks as one row-major extent become one loop (a 1x1 conv's 28x28 pixels,
  a permute's h and w): the vectors and thread blocks then split the whole extent, not its short last dimension. Not rows
  shorter than a vector that a kernel window slides down (a conv whose window is one column wide, x[(h + kh)*W + w]: the
  row-tap phase of a 3x3/2 input gradient, see _channel_block): merged, its taps lie a row apart along one long row, which
  takes vectors of pixels beside broadcast weights read from the unpacked weight (7x7 rows, one AVX2 thread: 5.4 ms where the
  column-tap phase's channel tile takes 2.8)."""
  stores = [u for u in k.ast.toposort() if u.op is Ops.STORE]
  lanes = simd_lanes(k.renderer, stores[0].src[1].dtype.itemsize) if len(stores) == 1 and k.renderer.supports_float4 else 1
  i = 0
  while i + 1 < len(k.axes):
    if k.axes[i].arg[1] is AxisType.LOOP and k.axes[i + 1].arg[1] is AxisType.LOOP and \
       not ((range_size(k.axes[i + 1]) or lanes) < lanes and
            any(_window_sized(r) and _sliding(r, [k.axes[i]], _loads(k)) for r in k.of_type(AxisType.REDUCE))):
      try:
        k = k.apply(Opt(OptOps.MERGE, i, i + 1))
        continue
      except KernelOptError: pass
    i += 1
  return k

def _costly_input(k: Kernel, red: UOp) -> bool:
  """Whether a reduction over `red` reads an expensive value per element (a transcendental: COSTLY_OPS)."""
  return any(red in u.src[1:] and any(x.op in COSTLY_OPS for x in u.src[0].toposort()) for u in k.ast.toposort() if u.op is Ops.REDUCE)

def _reduces_by(k: Kernel, red: UOp, op: Ops) -> bool:
  """Whether a reduction over `red` combines by `op`."""
  return any(red in u.src[1:] and reduce_op(u.arg) is op for u in k.ast.toposort() if u.op is Ops.REDUCE)

def _sums_products(k: Kernel, red: UOp) -> bool:
  """Whether a reduction over `red` is a float sum of products (a variance's squares: one FMA per element where fused)."""
  return any(red in u.src[1:] and reduce_op(u.arg) is Ops.ADD and u.src[0].op is Ops.MUL and dtypes.is_float(u.dtype)
             for u in k.ast.toposort() if u.op is Ops.REDUCE)

def _row_pass(k: Kernel, reds: list[UOp], contig_out: UOp, loads: list[UOp], lanes: int) -> Kernel | None:
  """Row reductions fused with the elementwise pass over the same row (realize_points.row_fusable: softmax, layernorm): no
  reduction uses the output loop, so each runs once per row before it. Each contiguous reduce axis gets vector partial
  results (as a reduction along memory) and the output loop vectors; None when the kernel is not of that form."""
  rs = [u for u in k.ast.toposort() if u.op is Ops.REDUCE]
  if not rs or any(contig_out in u.toposort() for u in rs): return None
  if _row_masked(k.renderer, range_size(contig_out) or 0, lanes) and \
     all(range_size(red) == range_size(contig_out) and _contiguous_in(k, red, loads) for red in reds):
    # rows of no whole number of vectors (softmax's 1000 on 16 lanes): the output loop and each reduction over the row padded
    # to whole vectors, the tail's lanes masked (a reduction's padded lanes take its identity), where lanes dividing the row
    # are half vectors that take twice the instructions (the exp above all). All or none: core.codegen.stash keeps the exp of
    # the sum for the output loop only where both loops have the same extent
    padded = k
    for r in [contig_out, *reds]: padded = _try(padded, Opt(OptOps.PADTO, _pos(padded, _same(padded, r)), lanes))
    if len(padded.applied) == len(k.applied) + 1 + len(reds):
      k, contig_out, reds = padded, _same(padded, contig_out), [_same(padded, red) for red in reds]
      loads = _loads(k)
  for red in reds:
    if ROW_FMA_VECTORS and not k.renderer.has_local and _contiguous_in(k, red, loads) and _sums_products(k, red) and \
       (amt := _pick_amt(range_size(red), (ROW_FMA_VECTORS * lanes, 4 * lanes, 2 * lanes))):
      # a sum of products: its partial results as separate vectors (one wide accumulator), one product each a step. Copies
      # summed into one update are one chain of FMAs through the accumulator (lowerer.fuse_mulacc: 2 copies wait 2 FMA
      # latencies a step). One Zen 5 thread, layernorm 64x1024 (rows in L2), 2 copies of 2 vectors -> 8 vectors: AVX2 code
      # 158 -> 113 ns a row, AVX-512 102 -> 89
      k = _try(k, Opt(OptOps.UNROLL, _pos(k, red), amt))
      continue
    if _contiguous_in(k, red, loads) and (amt := _pick_amt(range_size(red), (*_red_vectors(range_size(red), lanes)[-2:], 4, 2))):
      k = _try(k, Opt(OptOps.UNROLL, _pos(k, red), amt))
      # partial results in ROW_RED_VECTORS vectors side by side (copies, not wider lanes): one vector's chain of dependent
      # max or add steps waits on each step's latency (softmax's max over rows of 1000 on 8 lanes: 125 steps of ~5 cycles)
      # (not where the input costs more per element than the chain's step, an exp: the stash then needs equal loops, see
      # core.codegen.stash; measured on CPUs only: GPUs keep one)
      # A max step keeps NaNs (Ops.MAX): vmaxps then vfixupimmps on AVX-512, compares and a blend elsewhere, about twice an
      # add's latency, so a row max takes twice the vectors a step (one Zen 5 thread, softmax 4096x1000: 9 vectors a step, not 3,
      # 0.835 -> 0.800 ms); a layernorm's sums keep theirs (8 a step: 0.47 -> 0.52 ms, the loop from memory no faster)
      row_max = _reduces_by(k, _same(k, red), Ops.MAX)
      copies = (ROW_MAX_VECTORS if row_max else ROW_RED_VECTORS) * lanes // amt if not k.renderer.has_local else 1
      wants = (9, 8, 7, 6, 4, 5, 3, 2) if row_max else (4, 5, 3, 2)
      if copies >= 2 and k.applied[-1].op is OptOps.UNROLL and not _costly_input(k, _same(k, red)) and \
         (a2 := _pick_amt(range_size(_same(k, red)), tuple(c for c in wants if c <= copies + 1))):
        k = _try(k, Opt(OptOps.UNROLL, _pos(k, _same(k, red)), a2))
  if amt := _pick_amt(range_size(contig_out), (2 * lanes, lanes, lanes // 2, 4, 2)):
    k = _try(k, Opt(OptOps.UPCAST, _pos(k, contig_out), amt))
  return k

def _undivide(k: Kernel, contig_out: UOp, loads: list[UOp], lanes: int) -> Kernel | None:
  """Output axes some load reads through x//s (a stride-s pool's gradient: dY[(w + kw + 1)//2 - 1], see
  symbolic.index_given_gate) split by s with the inner part unrolled, and the small windows in those quotients unrolled
  whole: each quotient is then the outer part plus a constant, so the outer part of the contiguous axis takes the vector
  lanes (lanes across the division would gather one scalar load each). None where a division would remain. One Zen 3
  thread, A/B in one process: max-pool 3x3/2 backward 8x64x112x112 27.9 -> 3.7 ms."""
  divs = [n for ld in loads for n in ld.src[0].src[1].toposort() if n.op is Ops.IDIV and n.src[1].op is Ops.CONST]
  split = {r: n.src[1].arg for n in divs for r in k.of_type(AxisType.LOOP) if r in n.src[0].toposort()}
  if contig_out not in split or not all(isinstance(s, int) and 2 <= s <= MAX_SHUFFLED_STRIDE and (range_size(r) or 1) % s == 0
                                        for r, s in split.items()): return None
  windows = [r for r in k.of_type(AxisType.REDUCE) if _window_sized(r) and any(r in n.src[0].toposort() for n in divs)]
  try:
    for r, s in split.items(): k = k.apply(Opt(OptOps.UPCAST, _pos(k, _same(k, r)), s))
    for w in windows: k = k.apply(Opt(OptOps.UNROLL, _pos(k, _same(k, w)), 0))
    outer = _same(k, contig_out)
    if (amt := _pick_amt(range_size(outer), (lanes, 8, 4, 2))) and lanes > 1: k = k.apply(Opt(OptOps.UPCAST, _pos(k, outer), amt))
  except KernelOptError: return None
  consts = {r: UOp.const(dtypes.index, 0) for r in k.of_type(AxisType.UPCAST, AxisType.UNROLL)}
  left = [graph_rewrite(ld.src[0].src[1].substitute(consts), symbolic) for ld in _loads(k)]
  return None if any(n.op in (Ops.IDIV, Ops.MOD) for i in left for n in i.toposort()) else k

def _reduced_loops(k: Kernel) -> set[UOp]:
  """The ranges some reduction's value uses (the loops it is computed inside of, and its own)."""
  return {r for u in k.ast.toposort() if u.op is Ops.REDUCE for r in u.src[0].toposort() if r.op is Ops.RANGE}

def _reductions_outside(k: Kernel) -> Kernel:
  """Output loops that no reduction of the kernel uses moved inside those that one does: a reduction is computed once per
  iteration of the loops its value uses, so a fused batchnorm backward (dX[n, c, h, w] from sums over n, h, w per channel)
  with n outside c summed its channel 8 times over. One Zen 3 thread, ResNet-18 step's 8x256x14x14 kernels, A/B in one
  process, medians of 7: 5.17 -> 0.89 ms, 12.1 -> 2.0 ms."""
  for _ in range(len(k.of_type(AxisType.LOOP))):
    loops = sorted(k.of_type(AxisType.LOOP), key=lambda r: r.arg[0])   # outermost first: a loop's id orders it
    used = _reduced_loops(k)
    free = next((i for i, r in enumerate(loops) if r not in used and (range_size(r) or 0) > 1 and any(x in used for x in loops[i + 1:])), None)
    if free is None: return k
    swapped = _try(k, Opt(OptOps.SWAP, _pos(k, loops[free]), _pos(k, max((x for x in loops[free + 1:] if x in used), key=lambda r: r.arg[0]))))
    if swapped is k: return k   # the swap did not fit
    k = swapped
  return k

def _unrolls_part(k: Kernel, split: bool, n_loads: int, tiles: int) -> bool:
  """Whether a transpose in strips runs a block's part of its strip (`tiles` tiles) unrolled (STRIP_PART_UNROLLED, see
  hand_coded): streamed register tiles of a kernel that reads nothing but its transposed input, where they fit the vector
  registers or, `split` (AVX2's), the part holds at most SPLIT_PART_TILES."""
  return STRIP_PART_UNROLLED and (not split or tiles <= SPLIT_PART_TILES) and stores_streamed(k) and n_loads == 1

# An elementwise kernel with few arithmetic ops (EW_ONE_VECTOR_ALUS or fewer) in AVX-512 code on a big_l2 core (the Intel server
# core) takes one vector a loop step, not two. That 2-vCPU Xeon guest, 2 threads, process CPU time, A/B in one process, medians
# [quartiles] of per-sample two/one time ratios: a*b+1 over 16M floats 1.035 [1.008-1.055] and 1.035 (order swapped) at load
# 8-9, 1.018 [1.007-1.033] and 1.016 at load 2-3, one thread 1.022 and 1.015; ResNet-18 b8 inference's 8 such kernels (pad
# copies, residual adds), summed, 0.995-1.012, a training step's 63 0.994 (even); the bench rows' 20 1.040. gpt2_block's GELU
# (30 ops) ran 0.953 [0.935-0.984] so: more ops keep two. Zen 4/5 (1 MiB L2) and AVX2 code keep two (measured there)
EW_ONE_VECTOR_SIMD = 64       # vector bytes of the code that takes it (AVX-512: measured)
EW_ONE_VECTOR_ALUS = 16       # the most arithmetic ops of such a kernel (gpt2_block's attention mask, 16: even)
# A kernel that streams its buffers (copy.stores_streamed: memory-bound), where it steps more than one vector, steps
# EW_STEP_BYTES (two lines an array, more misses in flight), up to EW_STEP_VECTORS vectors: AVX2 code four ymm, not two, as
# AVX-512 code on a Zen steps two zmm (the same share of the vector registers: 4 of 16, 2 of 32; a Zen 3 keeps 2 load ports
# and 16 ymm, as here). AVX2 code (znver3) on the 2-vCPU Xeon guest, a*b+1 over 16M floats, the kernel alone, A/B in one
# process, load 5-7, medians [quartiles] of per-sample speed ratios four/two: 2 threads, wall at real-time priority, 1.069
# [1.040-1.106], 1.060 [1.031-1.092], 1.048 [1.031-1.073] and, order swapped, 1.041, 1.043, 1.002; one thread, CPU time,
# 1.052 [1.038-1.071]. A training step's 3 such kernels (ResNet-18 b8: relu/batchnorm backward over 8x64x112x112) even
# (1.003, swapped 0.988). ResNet's pad copies (cached buffers) ran 0.92-0.97x with four: they keep two
EW_STEP_BYTES = 128
EW_STEP_VECTORS = 4

def _one_vector_steps(renderer: Renderer, alus: int) -> bool:
  """Whether an elementwise kernel of `alus` arithmetic ops steps one vector a loop iteration, not two (EW_ONE_VECTOR_SIMD)."""
  return big_l2(renderer) and renderer.simd_width >= EW_ONE_VECTOR_SIMD and alus <= EW_ONE_VECTOR_ALUS

def _close_rows_chunks(k: Kernel, across: UOp, contig_out: UOp, tile_cols: int, itemsize: int) -> Kernel:
  """A transposing copy of close input rows (NHWC -> NCHW: a pixel's 64 channels, 256 bytes) whose tiles along the output row
  run innermost, a pass over the rows for each tile across them (16 channels: one line of four per pixel a pass, the rest of an
  image's lines left for the next passes to find in L2): the output row's tiles in chunks of CLOSE_CHUNK_STEPS or more, of at
  most CLOSE_CHUNK_BYTES of input, the tiles across the rows between a chunk and its steps, so the passes over a chunk's lines,
  read in order, find them in L1. Renderers that split the tile's rows into vector loads (split_tile_rows) only."""
  a, c = _same(k, across), _same(k, contig_out)
  loops, nc = k.of_type(AxisType.LOOP), range_size(c) or 0
  if not (CLOSE_CHUNK_BYTES and k.renderer.split_tile_rows and a in loops and c is loops[-1] and (strides := input_row_strides(k))): return k
  most = CLOSE_CHUNK_BYTES // (tile_cols * max(strides) * itemsize)   # tile steps whose input fits a chunk
  if not (n := next((n for n in range(min(most, nc - 1), CLOSE_CHUNK_STEPS - 1, -1) if nc % n == 0), 0)): return k
  if (k2 := _try(k, Opt(OptOps.TILE, _pos(k, c), n))) is k: return k
  return _sink_loop(k2, _same(k2, a))

def hand_coded(k: Kernel) -> Kernel:
  rnd = k.renderer
  if (tc := _tensor_core(k)) is not None: return tc
  if not rnd.has_local: k = _merge_loops(k)
  if rnd.has_local: k = _group_reduce(k)
  stores = [u for u in k.ast.toposort() if u.op is Ops.STORE]
  if len(stores) != 1 or stores[0].src[0].op is not Ops.INDEX: return k
  st = stores[0]
  vec_ok = rnd.supports_float4 and st.src[1].dtype.scalar() in VECTOR_MEM_DTYPES
  lanes = simd_lanes(rnd, st.src[1].dtype.itemsize) if vec_ok else 1
  outs = [r for r in k.of_type(AxisType.LOOP) if range_size(r) is not None]
  reds = [r for r in k.of_type(AxisType.REDUCE) if range_size(r) is not None]
  loads = _loads(k)
  store_idx = st.src[0].src[1]
  contig_out = next((r for r in reversed(outs) if contiguous_offset(store_idx, r) is not None), None)
  # a reduction whose loads run along a reduce axis long enough for whole vectors, and not along the output axis (row sums,
  # matrix-vector): the lanes go on the reduce axis; lanes across outputs would gather one element from each of `lanes` rows
  # (only loads inside the reduction count: softmax's sum of exp(x - max) also reads max[i], contiguous along the rows but
  # loaded once per row, and lanes across rows would gather x)
  red_loads = [ld for ld in loads if any(r in ld.toposort() for r in reds)]
  # (an output axis too short for any vector, a weight gradient's kernel column of 3, counts as not contiguous when every load
  # in the reduction reads rows along one reduce axis: `short_red`, register reuse across outputs then, with or without vectors)
  short_red = contig_out is not None and (range_size(contig_out) or 0) < 4 and any(
    all(contiguous_offset(ld.src[0].src[1], r) is not None or _strided_in(r, ld) for ld in red_loads) for r in reds)
  along_red = contig_out is not None and (short_red or not _contiguous_in(k, contig_out, red_loads)) and \
    any(_contiguous_in(k, r, red_loads) and _pick_amt(range_size(r), _red_vectors(range_size(r), lanes)[-1:]) for r in reds)
  # lanes along the output axis would gather from a load whose index uses it through div/mod (pooling and reshape gradients
  # in NCHW): one index expression per lane per unrolled copy to simplify, a batchnorm backward kernel took 20 s to compile
  gathers = contig_out is not None and any(_divmod_in(ld.src[0].src[1], contig_out) for ld in loads)
  streaming = False   # a reduction along memory: split into thread blocks, each reads several of its rows at once
  transposed = False  # a transposing copy in register tiles: its thread blocks' tiles run down a column of tiles
  across: UOp | None = None   # the output axis the transposed input is contiguous along
  across_step = 0             # the output's stride along `across` in bytes (an output row's, of a 2-D transpose)
  tile_rows = lanes           # the register tile's output rows (its upcast of `across`)
  tile_cols = 0               # and its input rows (its upcast of `contig_out`)
  if vec_ok or rnd.threads:
    if reds and contig_out is not None and (row := _row_pass(k, reds, contig_out, loads, lanes)) is not None: k = row
    elif reds and gathers and contig_out is not None and (undiv := _undivide(k, contig_out, loads, lanes)) is not None: k = undiv
    elif reds and contig_out is not None and not short_red and \
       (not (along_red or gathers) or _packed_product(k, outs, reds, loads, contig_out, lanes, st.src[1].dtype.itemsize)):
      blocked = _channel_block(k, outs, loads, contig_out, lanes) if vec_ok else None
      if blocked is None: blocked = _register_block(k, outs, loads, contig_out, lanes, pad=not rnd.has_local)
      # padding pays only through the packed panel or masked vector loads: else every vector load of the padded axis is a gated gather
      if any(o.op is OptOps.PADTO for o in blocked.applied) and not any(o.op is OptOps.PACK for o in blocked.applied) and \
         not rnd.masked_vectors:
        blocked = _register_block(k, outs, loads, contig_out, lanes, pad=False)
      k = blocked
    elif reds:
      # a reduction along memory: vector partial sums over the contiguous reduce axis, folded after the loop
      red = next((r for r in reversed(reds) if _contiguous_in(k, r, loads)), None)
      # a product _packed_product turns down on a CPU (too few rows to reuse a panel, a batch-8 a @ W.T, or a panel too big to
      # pack) takes one vector a step and the register reuse below, each load feeding several outputs' sums (GPU renderers
      # never pack: their products keep the workgroup path)
      few_rows = not rnd.has_local and along_red and not short_red and contig_out is not None and _crossed_inputs(outs, loads)
      vecs = _red_vectors(range_size(red), lanes) if red is not None else ()
      if red is not None and (amt := _pick_amt(range_size(red), (*(vecs[-1:] if few_rows else vecs), 4, 2))):
        k = _try(k, Opt(OptOps.UNROLL, _pos(k, red), amt))
        streaming = True
        if (short_red or few_rows) and k.applied[-1].op is OptOps.UNROLL:
          # sums of products: loads reused across outputs, not more rows (a few-row product's vector accumulators: up to half
          # the vector registers, the rest for its loads)
          if few_rows and contig_out is not None: k = _pad_few_rows(k, red_loads, contig_out)
          k, streaming = _reuse_outputs(k, red_loads, rnd.simd_regs // 2 if few_rows else RED_REUSE_ACC), False
          # (a few-row product's columns outermost: the thread blocks split W, each thread reading its own half once, where
          # blocks of rows read all of it each)
          if few_rows and contig_out is not None and (c := _same(k, contig_out)).arg[1] is AxisType.LOOP and (first := k.of_type(AxisType.LOOP)[0]) is not c:
            k = _try(k, Opt(OptOps.SWAP, _pos(k, first), _pos(k, c)))
        # a vector narrower than the registers is one short add chain: a few of them side by side (copies, not wider lanes)
        elif amt < lanes and k.applied[-1].op is OptOps.UNROLL and (a2 := _pick_amt(range_size(_same(k, red)), (4, 2, 5, 3))):
          k = _try(k, Opt(OptOps.UNROLL, _pos(k, _same(k, red)), a2))
      elif short_red:
        # rows too short for a vector (7x7 images): scalar sums with loads reused, the row unrolled whole so neighbouring taps
        # share loads (X[w + kw] over w and kw) and no loop is that short
        k = _reuse_outputs(k, red_loads)
        if red is not None and _window_sized(_same(k, red), MM_WINDOW * 2): k = _try(k, Opt(OptOps.UNROLL, _pos(k, _same(k, red)), 0))
    elif contig_out is not None:
      # a transpose (a load runs along another output axis, `across`) with long output rows: a lanes x lanes register tile, stored
      # as vectors along the output; its loads touch `lanes` input rows, a few bytes each, where lanes along the output alone
      # would read one float of each of many rows a row apart (the same few cache sets over and over); else vectors along it
      strided = [ld for ld in loads if contig_out in ld.src[0].src[1].toposort() and not _contiguous_in(k, contig_out, [ld])]
      across = next((r for r in outs if r is not contig_out and _contiguous_in(k, r, strided) and _pick_amt(range_size(r), (lanes,))), None)
      if across is not None and (step := strided_offset(store_idx, across)) is not None: across_step = step[1] * st.src[1].dtype.itemsize
      # The tile's output rows are TRANSPOSE_ROW_BYTES long (two vectors on AVX2, one on AVX-512): each row's line is written
      # whole at once, where half lines fill in a tile column later (a streaming store of half a line goes to memory as a
      # partial write). One Zen 3 thread, 4096^2, A/B in one process: 8x8 26.3 ms, 16x8 13.6 (plain stores: 16.2 / 13.7)
      # So are the rows it reads (WHOLE_LINE_TILES: 16 x 16 floats, each input row two registers on AVX2, four on 16-byte
      # vectors, shuffled in squares of one register): a tile of 16 rows x 8 floats read each input line over two tiles, its
      # 16 lines in one L1 set (rows 16 KiB apart) evicted in between. AVX2 code on one Zen 5 thread (DEV=CPU:LLVM:haswell),
      # thread CPU time, A/B in one process, medians of 11: 4096^2 23.3 -> 33.4 GB/s, 2048^2 29.4 -> 39.6, NHWC -> NCHW
      # 32x56x56x64 27.4 -> 31.2, 64x512x512 (2, 0, 1) 28.3 -> 40.8 (AVX-512 on the same host: 35 at 4096^2)
      row_len = line = max(lanes, TRANSPOSE_ROW_BYTES // st.src[1].dtype.itemsize) if vec_ok else lanes
      # Where the stores are plain (stores_cached) and the next tiles store the rest of its output lines while they are in L1
      # (copy.halves_meet), a tile's output row (its input rows) stops at half the registers (CACHED_TILE_REGS): the input rows
      # of all the squares that make up one output row stay live until it is stored, one register each, so AVX2's 16 x 16 tile
      # (16 rows in 16 ymm) spilled 36 registers per 32 stores; 8 rows x 16 floats spill none (AVX-512's 16 rows in 32 zmm
      # keep their tile). One Zen 3 thread, thread CPU time, A/B in one process, GB/s: 1024^2 11 -> 14, 768x3072 11 -> 16,
      # 768x2304 10 -> 15. Streamed stores keep whole output lines (a half line streamed is a partial write: 4096^2 12 -> 5),
      # and so do kernels with a load along the output row, which would read half lines too (1024^2 a * a.T: 0.83 -> 1.22 ms)
      if CACHED_TILE_REGS and vec_ok and row_len > rnd.simd_regs // 2 and across is not None and across_step and \
         not _contiguous_in(k, contig_out, loads) and stores_cached(k) and \
         halves_meet(k, contig_out, across, across_step, line, st.src[1].dtype.itemsize, MM_ROW_TILE):
        row_len = max(lanes, rnd.simd_regs // 2)
      # CPU renderers take the tile at any size: its shuffles beat a gather of each element alone also where every line stays
      # in L1 (one Zen 3 thread, 256^2 5.6 -> 28 GB/s, 12x256x64 (0, 2, 1) 9.7 -> 30); GPUs only for long rows
      if vec_ok and across is not None and \
         (not rnd.has_local or max(range_size(contig_out) or 0, range_size(across) or 0) >= TRANSPOSE_MIN_ROW) and \
         (amt := _pick_amt(range_size(contig_out), (row_len, lanes, *_narrow_sides(lanes, st.src[1].dtype.itemsize)))):
        tile_rows = (_pick_amt(range_size(across), (line, lanes)) if WHOLE_LINE_TILES else 0) or lanes
        k = _try(k, Opt(OptOps.UPCAST, _pos(k, contig_out), amt), Opt(OptOps.UPCAST, _pos(k, across), tile_rows))
        transposed, tile_cols = k.applied[-1].op is OptOps.UPCAST, amt
      else:
        narrow = 0
        if vec_ok and rnd.masked_vectors and not strided and \
           (w := next((w for w in (lanes, lanes // 2) if (w == lanes or 8 <= w > (range_size(contig_out) or w)) and
                       _pad_ok(range_size(contig_out), w, MASKED_PAD_SHARE)), 0)):
          # a row that holds no whole vector (a padded copy's 58 or 26 columns): padded to one, the tail's lanes masked, where it
          # would otherwise take 2-lane vectors (a masked vector costs about what a full one does, so up to a third more lanes
          # still take fewer instructions); without masked loads and stores each padded lane would be a gated scalar access.
          # A row shorter than half a vector of at least 8 lanes (AVX-512: ResNet's 7x7 pad copy) is one masked half vector:
          # its 49 scalar copies a channel took LLVM 51 ms to compile (loop access analysis) and ran 2.9x the time. Longer rows
          # keep their pieces (bench --quick's 18-float rows as 3 masked half vectors ran 1.56x the time of 9 2-lane ones)
          k = _try(k, Opt(OptOps.PADTO, _pos(k, contig_out), w))
          contig_out, narrow = _same(k, contig_out), w if w < lanes else 0
        # two vectors per iteration keep two loads in flight, which pays in memory-bound kernels; a kernel with much arithmetic
        # per element (random bits: 20 threefry rounds) gains nothing and would compile twice the code; nor does a big_l2 core's
        # AVX-512 code (_one_vector_steps); a streamed kernel's step covers two lines (EW_STEP_BYTES)
        alus = _alu_count(k)
        one = alus > ALU_HEAVY or _one_vector_steps(rnd, alus)
        wide = min(EW_STEP_VECTORS * lanes, max(2 * lanes, EW_STEP_BYTES // st.src[1].dtype.itemsize)) \
          if vec_ok and stores_streamed(k) else 2 * lanes
        if amt := _pick_amt(range_size(contig_out), (narrow,) if narrow else (lanes, 4, 2) if one else (wide, 2 * lanes, lanes, 4, 2)):
          k = _try(k, Opt(OptOps.UPCAST, _pos(k, contig_out), amt))
  if rnd.has_local: return _local(k)
  k = _reductions_outside(k)
  threads = rnd.threads
  # A transpose of rows far apart whose register tile holds more than the vector registers (AVX2: 16 input rows of two ymm, 32 > 16)
  # and whose input rows are at least STRIP_MIN_ROW long: strips of STRIP_TILES tiles along the output row (64 input rows), each
  # swept along the whole input row, so each input row is read in order and each output row written in runs of STRIP_TILES
  # lines, where the tiles along `across` innermost (below) read 256 bytes of 16 rows and wrote a line of each of 64 rows at a
  # time. Thread blocks split each strip into neighbouring parts that run side by side (2 threads: 2 tiles each). One Zen 3
  # thread, thread time, A/B in one process: 4096^2 16.0 -> 18.2 GB/s; 2 threads, wall: 29.7 -> 33.4 (docs/internals.md has
  # the rest). A tile that fits the registers (AVX-512's 16 rows of one zmm) takes strips where both its output and its input
  # rows lie about a multiple of the L1 way apart (copy.tile_lines_share_sets), else keeps the order below. One Zen 4 thread
  # (AVX-512), thread time, A/B in one process, GB/s, input shapes: 4096^2 18.9 -> 24.1, 2048^2 19.5 -> 24.3, 3072^2 18.6 -> 24.0,
  # 8192x1024 18.3 -> 20.7, 1024x8192 18.6 -> 23.8; 2 threads, wall at real-time priority: 41.8 -> 53.3, 52.7 -> 55.4, 48.1 ->
  # 58.5, 40.3 -> 48.4, 46.9 -> 59.6. Where one side's lines spread over the sets, strips lost: 4096x4160 one thread 20.3 -> 17.2
  # (2 threads 41.8 -> 36.0), 4160x4096 32.2 -> 25.3 (2 threads 40.4 -> 43.3); Zen 5 not measured. A renderer that loads the
  # tile's rows whole (no split_tile_rows: the C renderer, one Zen 3 thread 10.0 -> 7.0 in strips) keeps the order below
  strip = 0
  # (the tile outgrows the vector registers: AVX2's 16 rows of two ymm)
  split = transposed and tile_cols * tile_rows * st.src[1].dtype.itemsize > rnd.simd_regs * rnd.simd_width
  if transposed and across is not None and contig_out is not None and STRIP_TILES and rows_far_apart(k) and rnd.split_tile_rows and \
     (split or
      tile_lines_share_sets(k, across_step, tile_rows, tile_cols, st.src[1].dtype.itemsize)) and \
     tiles_along_rows(across_step, tile_rows, st.src[1].dtype.itemsize, MM_ROW_TILE, cached=stores_cached(k)) > 1 and \
     (range_size(across) or 0) * st.src[1].dtype.itemsize >= STRIP_MIN_ROW and \
     (nc := range_size(_same(k, contig_out)) or 0) > STRIP_TILES and nc % STRIP_TILES == 0:
    strip = STRIP_TILES
  work = prod(range_size(r) or 1 for r in k.axes)
  # Unrolled below (_unrolls_part), a strip that one thread runs whole over buffers far beyond the last-level cache
  # (STRIP_ALONE_SPAN x stream_min_bytes: 112 MiB over a 32 MiB L3) holds STRIP_ALONE_TILES tiles (32 input rows, as each of 2
  # threads' parts of STRIP_TILES), not 64: each step's 64 lines of rows far apart come from memory. The 2-core Zen 5, native,
  # one thread (no pool, thread time), our kernels with STRIP_TILES and with this in one process, interleaved, medians of 31
  # pair ratios per run, load 6-13, input shapes: 128 MiB 4096^2 1.16-1.18 (35-37 -> 41-43 GB/s; copy 52-55), 8192x2048
  # 1.16-1.18, 16384x1024 1.10-1.13, 1024x16384 1.09-1.10, 2048x8192 1.05-1.06, a.T + 1 4096^2 1.29-1.30; 256 MiB 8192x4096
  # 1.13-1.18, 4096x8192 0.95-1.04 (4 runs); 72 MiB 3072^2 1.04-1.22. Smaller buffers lost, part of them in the L3: 64 MiB
  # 8192x1024 0.85-0.95, 1024x8192 0.83-1.01, 4096x2048 0.89-0.93; 32 MiB 2048^2 0.64-0.86, a.T + 1 0.77-0.80
  if strip and STRIP_ALONE_TILES and not (threads > 1 and work >= MIN_THREADED_WORK) and \
     _unrolls_part(k, split, len(loads), STRIP_ALONE_TILES) and nc % STRIP_ALONE_TILES == 0 and \
     params_nbytes(k.ast.toposort()) >= STRIP_ALONE_SPAN * rnd.stream_min_bytes:
    strip = min(strip, STRIP_ALONE_TILES)
  parts = False   # thread blocks that are parts of the strips above
  if threads > 0 and work >= MIN_THREADED_WORK:
    if (loop := _thread_loop(k, threads)) is not None:
      blocks = _block_count(range_size(loop) or 1, threads)
      if reds and _crossed_inputs(outs, loads) and not any(o.op is OptOps.PACK for o in k.applied):
        blocks = _compute_blocks(range_size(loop) or 1, threads, work)
      # a transposing copy of close input rows (NHWC -> NCHW: a pixel's 64 channels, 256 bytes) whose split would take blocks of a
      # loop outside its tiles across those rows (the images): one block per thread of those tiles instead, the images inside
      # each block, so the threads read parts of the same rows at once, where blocks of images have each thread read a quarter of
      # each of its rows per pass. 2 threads, 32x56x56x64, process CPU time, A/B in one process, medians of 31 on the loaded
      # 2-core Zen 5: 2.21 -> 1.36 and 2.41 -> 1.66 ms (a 64 MiB write between calls: 4.11 -> 2.07, 2.45 -> 1.62)
      if transposed and across is not None and not rows_far_apart(k) and (a := _same(k, across)) is not loop \
         and a.arg[1] is AxisType.LOOP and (range_size(a) or 0) % threads == 0: loop, blocks = a, threads
      # a transpose of rows far apart whose split would take blocks of its tiles across the input's rows (a.T: the output rows):
      # blocks of the output's columns instead, so each thread reads input rows of its own (whole pages, one after another) and
      # writes runs of a block's columns, where both threads read every input row at once. 2 threads, 4096^2, process CPU time,
      # A/B in one process, medians of 21, load ~8: 5.22 -> 4.61 ms (in strips, one block per thread's part of a strip: above)
      elif transposed and across is not None and contig_out is not None and rows_far_apart(k) and _same(k, across) is loop and \
         (c := _same(k, contig_out)).arg[1] is AxisType.LOOP and (range_size(c) or 0) % threads == 0:
        loop, blocks = c, (range_size(c) or 1) // max(1, strip // threads) if strip else _block_count(range_size(c) or 1, threads)
        parts = bool(strip)
      k = _try(k, Opt(OptOps.THREAD, _pos(k, loop), blocks))
      # A streamed one's strip parts run side by side (the threads' j-th blocks make up one strip, INTERLEAVE), where the pool
      # gives each thread a run of consecutive blocks (its home share: thread 0 read the first half of the input's rows, thread 1
      # the second, each writing its half of every output row alone). The 2-core Zen 5, wall at real-time priority, A/B in one
      # process, medians of 41, GB/s, AVX2 code (znver3) / AVX-512, input shapes, our copy at 62-85 (slow-bandwidth spell):
      # 4096^2 54.1 -> 58.3 / 48.9 -> 53.2, 2048^2 55.5 -> 84.7 / 53.8 -> 84.2, 8192x1024 61.9 -> 67.6 / 60.3 -> 67.4, 1024x8192
      # 52.2 -> 62.9 / 55.6 -> 66.0; 4096x4160, 4160x4096 (AVX2 in strips) even. Where the two vCPUs had memory links of their own
      # (copy at 110-160) AVX2 code ran 0.94-0.99x, AVX-512 0.93-1.17x. Not cached ones: 768x3072 (AVX-512) 0.78-0.80x
      if parts and STRIP_PARTS_DEALT and stores_streamed(k) and k.applied[-1].op is OptOps.THREAD and (g := k.of_type(AxisType.GLOBAL)) \
         and (range_size(g[0]) or 0) > threads:
        k = _try(k, Opt(OptOps.INTERLEAVE, _pos(k, g[0]), threads))
  if transposed and across is not None and rows_far_apart(k) and (a := _same(k, across)).arg[1] is AxisType.LOOP:
    # the tiles along `across` innermost (at most MM_ROW_TILE of them): the next tile reads the rest of the input lines the
    # last one touched (2048^2 transpose: 17.8 -> 4.8 ms with the register tiles, -> 3.0 ms with this; torch 7.1)
    # (fewer where the tiles' output lines share L1 sets, none where those lines are also cached: copy.tiles_along_rows)
    tiles = tiles_along_rows(across_step, tile_rows, st.src[1].dtype.itemsize, MM_ROW_TILE, cached=stores_cached(k))
    if strip and contig_out is not None and (c := _same(k, contig_out)).arg[1] is AxisType.LOOP:
      # the strips above: a block's part of one strip already (threads), else STRIP_TILES tiles cut from the loop
      if (range_size(c) or 0) <= strip or (k := _try(k, Opt(OptOps.TILE, _pos(k, c), strip))).applied[-1].op is OptOps.TILE: k = _sink_loop(k, a)
      # Streamed tiles that fit the registers (AVX-512's: a zmm per row) of a kernel that reads nothing else run the block's
      # part of the strip unrolled, not as a loop of tiles: a step's loads of every tile then issue ahead of the previous tile's
      # streaming stores (in the loop, each tile's 16 loads waited behind the last one's 16 stores), and with no loop of rows far
      # apart the sweep prefetch goes (lost beside it on 2 threads). The 2-core Zen 5, native, A/B in one process, pair ratios:
      # one thread (thread time, 4 tiles) 4096^2 1.19-1.23, 8192x1024 1.05-1.07, 1024x8192 1.13-1.14, 8192x2048 1.17-1.23,
      # 3072^2 1.12; 2 threads (2 tiles) in docs/internals.md. a * a.T, whose rows' loads the sweep prefetch helped, lost so on
      # 2 threads (0.95); AVX2's split 16x16 tile (32 ymm loads a tile) in a part of 4 (0.68-0.80 on one thread), not of 2:
      # 2 Zen 5 threads, znver3 code, 4096^2 1.07-1.15 (our copy at 95-105 GB/s), 1.00-1.04 (at 46-60; docs/internals.md)
      if (t := k.of_type(AxisType.LOOP)[-1]) is not _same(k, a) and 1 < (n := range_size(t) or 0) <= strip and \
         _unrolls_part(k, split, len(loads), n):
        k = _try(k, Opt(OptOps.UPCAST, _pos(k, t), n))
    # (a streamed tile whose blocks hold whole short output rows keeps the row's tiles innermost: copy.rows_innermost)
    elif contig_out is not None and \
        rows_innermost(k, _same(k, contig_out), range_size(contig_out) or 0, tile_cols, tile_rows, st.src[1].dtype.itemsize): pass
    elif tiles > 1 and (na := range_size(a) or 0) > tiles and na % tiles == 0: k = _try(k, Opt(OptOps.TILE, _pos(k, a), tiles))
    elif tiles > 1 and (inner := max(k.of_type(AxisType.LOOP), key=lambda r: r.arg[0])) is not a: k = _try(k, Opt(OptOps.SWAP, _pos(k, a), _pos(k, inner)))
  elif transposed and across is not None and contig_out is not None and not rows_far_apart(k):
    k = _close_rows_chunks(k, across, contig_out, tile_cols, st.src[1].dtype.itemsize)
  if streaming and work >= MIN_THREADED_WORK and (rows := k.of_type(AxisType.LOOP)):
    nr = range_size(rows[0]) or 0
    # each thread reads RED_STREAMS rows a quarter of its block apart at once: more memory streams in flight than one row after
    # another (sum of 16M: 26-28 -> 32 GB/s; neighbouring rows instead: no gain). A single thread too (no thread blocks: a
    # quarter of the loop apart): one Zen 5 thread, sum of 16M, 32.8 -> 35.5 GB/s (torch 37.7; two rows 36.2). A thread alone
    # (no pool: CPU_THREADS=1, one core) reads two (RED_STREAMS_ALONE) where its rows share no load. Kernels alone on the 2-core
    # Zen 4, wall at real-time priority, A/B in one process interleaved per call, medians of 25, GB/s four -> two rows, back to
    # back / after a 128 MiB read: sum of 16M (its 4096 x 4096 partials) 31.0 -> 34.6 / 29.5 -> 33.3 and 32.3 -> 35.9 / 30.5
    # -> 33.9 (torch 33.3 / 31.4), 8192x2048 sum(1) 33.7 -> 37.2 / 30.9 -> 34.3, 4096^2 max(1) 32.2 -> 33.2 / 31.4 -> 33.1,
    # mean of 16M 30.5 -> 33.4 / 30.1 -> 32.6 (two rows of 128 floats a step 33.3 / 32.7, four 30.4 / 29.9: the rows, not the
    # bytes a step). Not on a pool, where two rows per thread were even (sum of 16M, 2 threads, medians of 41-61: 76.0 -> 72.8
    # / 55.1 -> 56.1, 65.7 -> 67.4 / 54.8 -> 56.1), nor where the rows share a load (a matrix-vector product's vector, one load
    # for every row: 4096^2 @ 4096, 2 threads 75.0 -> 65.0 / 59.8 -> 52.2, one thread 39.8 -> 35.1 / 37.6 -> 33.1 and 29.7 ->
    # 28.8 / 27.2 -> 26.3), nor on AVX2 targets
    # (RED_ALONE_SIMD): their code on the same Zen 4 thread was even (sum of 16M 36.0 -> 36.2 / 35.0 -> 34.2, 4096^2 max(1)
    # 40.2 -> 39.6 / 37.6 -> 36.7); they keep four until a Zen 3 thread says otherwise. Kernels too small to thread read from
    # the caches and keep one row at a time
    shared = any(rows[0] not in ld.src[0].src[1].toposort() for ld in _loads(k))
    streams = RED_STREAMS_ALONE if not threads and not shared and rnd.simd_width >= RED_ALONE_SIMD else RED_STREAMS
    if nr % streams == 0 and nr >= 8 * streams:
      k = _try(k, Opt(OptOps.TILE, _pos(k, rows[0]), nr // streams))
      k = _try(k, Opt(OptOps.UPCAST, _pos(k, _same(k, rows[0])), streams))
  return k
