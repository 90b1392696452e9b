"""Copy kernels that transpose (a.T.contiguous(), NCHW <-> NHWC): the loop order around their register tiles."""
from __future__ import annotations
from core.ir.ops import Ops, AxisType, UOp, params_nbytes
from core.codegen.opt.kernel import Kernel, range_size
from core.codegen.opt.expander import contiguous_offset, strided_offset

# input rows at least this many elements apart (a tile reads one per lane of the stored vector) are each a page or more apart: the
# tile's lines are gone before a tile column further out would read the rest of them, so the tiles run along the input's rows
# (across) innermost. Rows closer than that (NHWC -> NCHW: 64 channels, 256 bytes) stay in the cache anyway, and that order would
# only make the output rows' tiles jump between many rows (one Zen 3 thread, A/B in one process, 32x56x56x64: 4.2-4.4 ms with
# the tiles along the channels innermost, 3.5-3.8 without; 32x64x56x56 the other way, rows 3136 apart: 2.4 with, 3.8-4.6 without)
FAR_ROWS = 512
# The tiles along the input's rows above, as many as MM_ROW_TILE: a tile column's output lines go out as one burst down that many
# tiles' output rows. Where an output row's stride is a multiple of the L1 way (a VIPT L1's way is at most a 4 KiB page, on x86-64
# and ARM alike), the lines of a tile's output rows, one per row at the same column, fall in fewer L1 sets than rows (4096^2: all
# in one): then fewer tiles, about CONFLICT_ROWS output rows a burst, where a tile reads whole input lines (16 floats: AVX-512).
# One Zen 5 thread, thread CPU time, A/B in one process, medians of 11-15, GB/s read + written, 16 then 4 tiles: 4096^2 22-25 ->
# 27-32, 2048^2 25-27 -> 37-43, 2048x8192 23 -> 27, 8192x2048 25 -> 31, 4096x4160 19 -> 35, 4352^2 (rows 17 KiB apart: 4 sets)
# 26 -> 30; 4160x4096 (rows 16640 bytes apart: 16 sets) keeps 16: 36-40, 4 tiles 33. A tile of half lines (8 floats: AVX2 code,
# same host) reads each input line over two tiles and does best with 16 or more: 4096^2 with 4, 8, 16, 32 tiles 9, 16, 21, 22 GB/s
# (such tiles remain where 16 output rows do not divide the input's rows: heuristic.WHOLE_LINE_TILES)
L1_WAY_BYTES = 4096
CONFLICT_ROWS = 64
# Those tiles pay where the output goes to memory by streaming stores, which no cache keeps. A kernel the renderer stores plainly
# (its buffers together under the renderer's `stream_min_bytes`: they fit the last-level cache) writes each output line into L1:
# a tile column's 16 x tiles lines in one set evict each other, and its input lines stay in the L2 or L3 anyway, so it runs no
# tiles along the input's rows. One Zen 5 thread, thread CPU time, A/B in one process, medians of 9-11, 4 tiles -> none:
# (input shapes) 512^2 27.6 -> 73 GB/s, 512x528 23 -> 81, 1024^2 18.5 -> 38, 1024x2048 19 -> 40, 3072x768 (output rows 12 KiB
# apart) 20 -> 43; 2 threads (wall) 512^2 28.5 -> 43, 1024^2 19 -> 31.5, 1024x2048 19.4 -> 34, 3072x768 19.8 -> 36. Streamed
# (4096^2) none would read a line of each row a pass: 35 -> 19 GB/s. Only where the lines fall in at most CACHED_MAX_SETS sets:
# output rows 3 KiB apart (4 sets: inputs 768x2304 and 768x3072) ran faster on one thread without tiles (0.261 -> 0.205,
# 0.427 -> 0.393 ms) but slower on two (wall 0.251 -> 0.294, 0.337 -> 0.379)
CACHED_MAX_SETS = 2
# A streamed tile whose thread blocks hold whole output rows of at most ROW_MAX_BYTES (the tiles along that row) keeps those tiles
# innermost instead: a step then streams `lanes` whole output rows (NCHW -> NHWC: 16 pixels x 64 channels, one run of 4 KiB)
# and reads a line of each input row, whole (a whole-line tile leaves nothing of a line for the next tile along the input's rows:
# that order was measured with half-line tiles). The tiles along the input's rows streamed one line of each of 16 output rows a
# step, a row apart. Zen 5, 2 threads (wall, real-time priority), A/B in one process beside our copy kernel, medians of 13-21,
# GB/s, AVX-512 / AVX2 code (DEV=CPU:LLVM:znver3), NCHW -> NHWC input shapes: 32x64x56x56 69.1 -> 79.6 / 68.8 -> 82.1 (copy
# 81), 64x64x56x56 58.5 -> 65.0 / 59.8 -> 63.7 (copy 67), 64x128x28x28 41.7 -> 82.2 / 47.7 -> 81.6, 16x256x28x28 73.4 -> 98.6
# / 82.0 -> 95.7, 16x512x28x28 40.7 -> 81.1 / 43.3 -> 83.1, 8x1024x28x28 (4 KiB rows) 35.6 -> 81.5 / 42.5 -> 82.1,
# 2x64x224x224 113.7 -> 127.9 / 112.5 -> 138.0 (copy 150); even: 64x32x56x56, 8x64x112x112, 1x64x512x512. One thread (thread
# time) 32x64x56x56 47.9 -> 62.0 / 47.2 -> 58.1; a.T (AVX-512, not in strips) 256x65552 26.2 -> 32.8, 1024x4160 46.0 -> 48.4.
# Blocks of part of a row (a.T on 2 threads: blocks of the output's columns) keep the order above: 4096x4160 59.7 -> 56.8,
# 256x65552 49.6 -> 46.7 with that part innermost (1024x4160 74.0 -> 82.3: not taken). Plain stores keep it too: cached,
# 32x32x56x56 lost (117.6 -> 85.2 AVX-512), 32x128x28x28 too (95.5 -> 92.6 / 93.3 -> 88.5)
ROW_MAX_BYTES = 4096

def rows_far_apart(k: Kernel, vec: UOp | None = None) -> bool:
  """The transposing tile's input rows, one per lane of the stored vector (along `vec`, or the UPCAST axis the output is
  contiguous along), are at least FAR_ROWS elements apart."""
  strides = input_row_strides(k, vec)
  return not strides or max(strides) >= FAR_ROWS

def input_row_strides(k: Kernel, vec: UOp | None = None) -> list[int] | None:
  """The element step of each strided load along `vec` (or the UPCAST axis the output is contiguous along): the tile's input rows
  lie that far apart; None where there is no such axis."""
  st = next(u for u in k.ast.toposort() if u.op is Ops.STORE)
  if vec is None: vec = next((r for r in k.of_type(AxisType.UPCAST) if contiguous_offset(st.src[0].src[1], r) is not None), None)
  if vec is None: return None
  return [s[1] for u in k.ast.toposort() if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX
          and (s := strided_offset(u.src[0].src[1], vec)) is not None and s[1] != 1]

def l1_sets(row_bytes: int, rows: int, line: int = 64) -> int:
  """The L1 sets that the lines of `rows` rows `row_bytes` apart, one per row at the same column, fall in (a VIPT L1's way is
  at most L1_WAY_BYTES)."""
  return len({(r * row_bytes // line) % (L1_WAY_BYTES // line) for r in range(rows)})

def tile_lines_share_sets(k: Kernel, out_row_bytes: int, out_rows: int, in_rows: int, item: int) -> bool:
  """Both sides of the register tile (`out_rows` output rows `out_row_bytes` apart, `in_rows` input rows of `item`-byte elements)
  have their lines in fewer L1 sets than rows: the output's rows and every strided load's input rows lie about a multiple of the
  L1 way apart (4096^2, 2048x8192; not 4096x4160 or 4160x4096)."""
  strides = input_row_strides(k) or []
  return l1_sets(out_row_bytes, out_rows) < out_rows and bool(strides) and all(l1_sets(s * item, in_rows) < in_rows for s in strides)

def stores_cached(k: Kernel) -> bool:
  """The renderer stores this kernel's output plainly, into caches that hold its buffers: they total under its `stream_min_bytes`
  (0: not known, as where it never streams)."""
  bound = k.renderer.stream_min_bytes
  return bound > 0 and params_nbytes(k.ast.toposort()) < bound

def stores_streamed(k: Kernel) -> bool:
  """The renderer streams this kernel's stores (non-temporal: its buffers total its `stream_min_bytes` or more, where known)."""
  return k.renderer.stream_min_bytes > 0 and not stores_cached(k)

def rows_innermost(k: Kernel, row: UOp | None, row_len: int, tile_cols: int, tile_rows: int, item: int, line: int = 64) -> bool:
  """A streamed tile (stores_streamed) of whole input lines (`tile_rows` x `item` bytes) whose loop of tiles along the output row
  (`row`, each `tile_cols` elements) is the innermost loop and spans the whole row (`row_len` elements), at most ROW_MAX_BYTES:
  it stays innermost."""
  loops = k.of_type(AxisType.LOOP)
  return row is not None and bool(loops) and loops[-1] is row and tile_rows * item >= line and \
    (range_size(row) or 0) * tile_cols == row_len and row_len * item <= ROW_MAX_BYTES and stores_streamed(k)

def tiles_along_rows(row_bytes: int, lanes: int, lane_bytes: int, most: int, line: int = 64, cached: bool = False) -> int:
  """Tiles of `lanes` output rows, `row_bytes` apart, each reading `lanes` x `lane_bytes` of an input row, to run innermost along the
  transposed input's rows: `most`, or where a tile reads whole input lines and the lines of its rows at one column share L1 sets
  (fewer sets than rows) CONFLICT_ROWS // lanes, or 1 (none) where its stores are `cached` (stores_cached) and those lines
  fall in at most CACHED_MAX_SETS sets."""
  if lanes * lane_bytes < line or (sets := l1_sets(row_bytes, lanes, line)) >= lanes: return most
  return 1 if cached and sets <= CACHED_MAX_SETS else max(1, min(most, CONFLICT_ROWS // lanes))

def halves_meet(k: Kernel, out_axis: UOp, across: UOp, row_bytes: int, rows: int, lane_bytes: int, most: int) -> bool:
  """A cached tile that stores part of each output line (its `rows` output rows, `row_bytes` apart, read along `across` as
  `rows` x `lane_bytes` from each input row; its input rows along `out_axis`) has the rest stored soon after, while the lines
  are in L1: its input rows are close (no tiles along them: the next tile along the output row stores the rest), or
  tiles_along_rows takes one tile there, or a TILE of a few (CONFLICT_ROWS // rows output rows a burst), not a SWAP that runs
  all of them innermost (NCHW -> NHWC 2x128x28x28, one Zen 3 thread: 34 -> 22 GB/s with half-line tiles)."""
  if not rows_far_apart(k, out_axis): return True
  tiles, n = tiles_along_rows(row_bytes, rows, lane_bytes, most, cached=True), (range_size(across) or 0) // rows
  return tiles == 1 or (tiles <= CONFLICT_ROWS // rows and n > tiles and n % tiles == 0)
