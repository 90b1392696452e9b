"""A transposing copy whose register tile holds more than the vector registers (AVX2: 16 input rows of two ymm), or whose
input and output rows both lie about a multiple of the L1 way apart (AVX-512's tile of one zmm per row), whose input rows are at
least heuristic.STRIP_MIN_ROW long, on a renderer that loads such a tile a register of rows at a time, runs in strips of
STRIP_TILES tiles along the output row, each swept along the whole input row (the strip's tiles innermost, the tiles along the
input row around them); on 2 threads each thread block is a neighbouring part of a strip (STRIP_TILES // 2 tiles), and a strip
of AVX-512's streamed tiles, unrolled, that one thread runs is STRIP_ALONE_TILES tiles. AVX-512's
tiles whose input or output rows spread over the L1 sets, short input rows and renderers that load a tile's rows whole (no
split_tile_rows: the C renderer) keep the tiles along the input row innermost. Results against numpy."""
from __future__ import annotations
import numpy as np
import pytest
from core.codegen.opt import Kernel
from core.codegen.opt import heuristic
from core.codegen.opt.heuristic import hand_coded, STRIP_TILES, STRIP_ALONE_TILES, SPLIT_PART_TILES
from core.codegen.opt.expander import strided_offset
from core.codegen.opt.copy import stores_streamed
from core.ir.ops import Ops, AxisType
from core.codegen.opt.kernel import range_size
from opt_helpers import kernel_of, run_ast, host_renderer

rng = np.random.default_rng(23)

def _transpose(a): return a.T.contiguous() if hasattr(a, "uop") else a.T

def _steps(k: Kernel, axes: list) -> list[int]:
  """The output's element step along each of `axes`."""
  st = next(u for u in k.ast.toposort() if u.op is Ops.STORE)
  return [s[1] for r in axes if (s := strided_offset(st.src[0].src[1], r)) is not None]

def _hand_coded(shape: tuple[int, int], simd_bytes: int, threads: int, strips: int = STRIP_TILES, split: bool = True):
  item, want = kernel_of(_transpose, shape, rng=rng)
  rnd = host_renderer(simd_bytes)
  if split and not rnd.split_tile_rows: pytest.skip("a renderer that loads a tile's rows a register at a time (the LLVM one)")
  rnd.threads, rnd.split_tile_rows = threads, split
  old, heuristic.STRIP_TILES = heuristic.STRIP_TILES, strips
  try: k = hand_coded(Kernel(item.ast, rnd))
  finally: heuristic.STRIP_TILES = old
  got, _ = run_ast(item, k.ast, rnd)
  np.testing.assert_array_equal(got.reshape(want.shape), want)
  return k

def _fits(k: Kernel) -> bool:
  """Whether the 16 x 16 float tile fits k's renderer's vector registers."""
  return 16 * 16 * 4 <= k.renderer.simd_regs * k.renderer.simd_width

@pytest.mark.parametrize("simd_bytes", [32, 64])
@pytest.mark.parametrize("shape", [(2048, 2048), (1024, 2048), (2048, 1024)])
@pytest.mark.parametrize("threads", [0, 2])
def test_long_rows_run_in_strips_along_the_output_row(shape, threads, simd_bytes):
  # AVX2's tile spills its registers; AVX-512's fits them, but these rows (4 or 8 KiB apart) put all of a tile's input lines and
  # all of its output lines in one L1 set each
  k = _hand_coded(shape, simd_bytes, threads)
  loops, part = k.of_type(AxisType.LOOP), STRIP_TILES if threads == 0 else STRIP_TILES // 2
  if _fits(k) and stores_streamed(k):
    # AVX-512's streamed tiles: the block's part of the strip unrolled (an upcast a tile's step along the output row), inside the loop of
    # tiles along the input row; one thread's strip STRIP_ALONE_TILES tiles where the buffers span STRIP_ALONE_SPAN streaming bounds
    if threads == 0 and 2 * 4 * shape[0] * shape[1] >= heuristic.STRIP_ALONE_SPAN * k.renderer.stream_min_bytes: part = STRIP_ALONE_TILES
    assert [range_size(r) for r in k.of_type(AxisType.UPCAST) if _steps(k, [r]) == [16]] == [part], k.applied
    loops = loops + [None]
  else:
    # innermost: the strip's tiles (a step of a tile within an output row of shape[0] floats)
    assert _steps(k, loops[-1:]) == [16] and range_size(loops[-1]) == part, k.applied
  # around it: the tiles along the input row
  assert _steps(k, loops[-2:-1]) == [16 * shape[0]] and range_size(loops[-2]) == shape[1] // 16, k.applied
  if threads:
    # one block per thread's part of a strip: the blocks split the output row
    (g,) = k.of_type(AxisType.GLOBAL)
    assert range_size(g) == shape[0] // 16 // (STRIP_TILES // 2) and _steps(k, [g]) == [16 * STRIP_TILES // 2], k.applied

@pytest.mark.parametrize("shape, simd_bytes, split", [((1040, 2048), 64, True), ((2048, 1040), 64, True), ((4096, 512), 32, True),
                                                     ((2048, 2048), 32, False)])
@pytest.mark.parametrize("threads", [0, 2])
def test_spread_avx512_tiles_short_rows_and_whole_row_loads_keep_the_tiles_along_the_input_row(shape, simd_bytes, split, threads):
  # AVX-512's 16 x 16 tile fits its 32 zmm: output rows 4160 bytes apart (input 1040 x 2048) or input rows 4160 bytes apart
  # (2048 x 1040) spread one side's lines over the L1 sets, where strips ran slower (one Zen 4 thread, 4096x4160 20.3 -> 17.2
  # GB/s); input rows of 512 floats (2 KiB) ran slower in strips on 2 threads; the C renderer (no split_tile_rows: a tile's
  # rows loaded whole) ran slower in strips on one thread
  assert _hand_coded(shape, simd_bytes, threads, split=split).applied == \
    _hand_coded(shape, simd_bytes, threads, strips=0, split=split).applied

def _dealt(shape: tuple[int, int], simd_bytes: int, threads: int, bound: int) -> Kernel:
  """hand_coded's transpose on `threads` threads with stores streamed from `bound` bytes (1: streamed, 1 << 40: cached), checked
  against numpy."""
  item, want = kernel_of(_transpose, shape, rng=rng)
  rnd = host_renderer(simd_bytes)
  if not rnd.split_tile_rows: pytest.skip("a renderer that loads a tile's rows a register at a time (the LLVM one)")
  rnd.threads, rnd.stream_min_bytes = threads, bound
  k = hand_coded(Kernel(item.ast, rnd))
  got, _ = run_ast(item, k.ast, rnd)
  np.testing.assert_array_equal(got.reshape(want.shape), want)
  return k

@pytest.mark.parametrize("simd_bytes", [32, 64])
@pytest.mark.parametrize("threads", [2, 4])
def test_streamed_strip_parts_run_side_by_side_on_the_threads(simd_bytes, threads):
  # the pool runs each thread's run of consecutive blocks (its home share): the blocks are dealt out so that the threads' j-th
  # blocks are the parts of one strip (2048^2 on the 2-core Zen 5, 2 threads: 55 -> 85 GB/s), not thread 0 on the first half
  from core.codegen.opt.kernel import OptOps
  from core.ir.symbolic import simplify
  from core.ir.ops import UOp
  from core.ir.dtype import dtypes
  k = _dealt((2048, 2048), simd_bytes, threads, 1)
  assert [o.amt for o in k.applied if o.op is OptOps.INTERLEAVE] == [threads], k.applied
  (g,) = k.of_type(AxisType.GLOBAL)
  n, part = range_size(g) or 0, 16 * STRIP_TILES // threads
  st = next(u for u in k.ast.toposort() if u.op is Ops.STORE)
  zero = {r: UOp.const(r.dtype, 0) for r in k.axes if r is not g}
  def column(b: int) -> int:   # the first output column block b stores
    return simplify(st.src[0].src[1].substitute({**zero, g: UOp.const(dtypes.int32 if g.dtype == dtypes.int32 else g.dtype, b)})).arg
  # thread t's j-th block (block t * n/threads + j) stores part t of strip j
  assert [[column(t * (n // threads) + j) for t in range(threads)] for j in range(3)] == \
         [[(j * threads + t) * part for t in range(threads)] for j in range(3)]

@pytest.mark.parametrize("simd_bytes", [32, 64])
def test_cached_strips_keep_each_threads_blocks_in_a_run(simd_bytes):
  # stores in caches that hold the buffers (under stream_min_bytes): blocks in runs (AVX-512 768x3072 ran 0.78-0.80x dealt)
  from core.codegen.opt.kernel import OptOps
  k = _dealt((2048, 2048), simd_bytes, 2, 1 << 40)
  assert not any(o.op is OptOps.INTERLEAVE for o in k.applied), k.applied

@pytest.mark.parametrize("simd_bytes", [32, 64])
@pytest.mark.parametrize("threads", [0, 2])
def test_register_tiles_unroll_the_blocks_part_of_the_strip(simd_bytes, threads):
  # streamed tiles that fit the registers (AVX-512's) run a block's part of the strip unrolled, each tile's loads ahead of the
  # last one's streaming stores (one Zen 5 thread, 4096^2: 1.19-1.23x); AVX2's split tiles too where the part holds at most
  # SPLIT_PART_TILES (2 threads' parts of 2, one thread's strip of STRIP_ALONE_TILES: 2 Zen 5 threads 1.07-1.15x in the fast
  # bandwidth spell); cached stores keep the loop of tiles
  from core.codegen.opt.kernel import OptOps
  def part_upcasts(on: bool, bound: int = 1) -> list:
    old, heuristic.STRIP_PART_UNROLLED = heuristic.STRIP_PART_UNROLLED, on
    try: k = _dealt((2048, 2048), simd_bytes, threads, bound)
    finally: heuristic.STRIP_PART_UNROLLED = old
    return [o.amt for o in k.applied[k.applied.index(next(o for o in k.applied if o.op is OptOps.THREAD)) + 1:]
            if o.op is OptOps.UPCAST] if threads else [range_size(r) for r in k.of_type(AxisType.UPCAST) if _steps(k, [r]) == [16]]
  part = STRIP_ALONE_TILES if threads == 0 else STRIP_TILES // 2
  assert part_upcasts(True) == ([part] if simd_bytes == 64 or part <= SPLIT_PART_TILES else [])
  assert part_upcasts(False) == [] and part_upcasts(True, 1 << 40) == []

@pytest.mark.parametrize("simd_bytes", [32, 64])
@pytest.mark.parametrize("threads", [0, 1, 2])
@pytest.mark.parametrize("bound", [1, 9 << 20])
def test_one_threads_unrolled_strip_holds_strip_alone_tiles(simd_bytes, threads, bound, monkeypatch):
  # AVX-512's streamed tiles, unrolled, in a strip that one thread runs whole over buffers of STRIP_ALONE_SPAN streaming bounds
  # (stream_min_bytes) or more: STRIP_ALONE_TILES tiles (32 input rows a step, not 64: one Zen 5 thread, 4096^2 1.16-1.18x);
  # buffers under that (2048^2's 32 MiB against 4 x 9 MiB) and each of 2 threads' parts (2 tiles of a 4-tile strip either way)
  # keep STRIP_TILES. AVX2's split tiles take it too, and are unrolled in parts of at most SPLIT_PART_TILES (a strip of 4 stays
  # a loop of tiles: one Zen 5 thread 0.68-0.80x unrolled). Values against numpy
  def strip() -> tuple[list[int], int]:
    k = _dealt((2048, 2048), simd_bytes, threads, bound)
    # (the unrolled part's upcast, and the output columns one strip or part covers: of the thread blocks, else the strip loop)
    ups = [range_size(r) or 0 for r in k.of_type(AxisType.UPCAST) if _steps(k, [r]) == [16]]
    blocks = k.of_type(AxisType.GLOBAL) or [r for r in k.of_type(AxisType.LOOP) if _steps(k, [r]) and _steps(k, [r])[0] % 16 == 0 and _steps(k, [r])[0] < 2048]
    return ups, 2048 // (range_size(blocks[0]) or 1)
  new = strip()
  monkeypatch.setattr(heuristic, "STRIP_ALONE_TILES", 0)
  old = strip()
  part, old_part = STRIP_TILES // threads if threads > 1 else STRIP_ALONE_TILES, STRIP_TILES // max(1, threads)
  def unrolled(n: int) -> list[int]: return [n] if simd_bytes == 64 or n <= SPLIT_PART_TILES else []
  if bound == 1: assert new == (unrolled(part), 16 * part) and old == (unrolled(old_part), 16 * old_part), (new, old)
  else: assert new == old and new[0] == unrolled(old_part), (new, old)
