"""A transpose in strips (heuristic.STRIP_TILES: the LLVM renderer's AVX2 tiles, and its AVX-512 tiles whose input and output rows lie
a multiple of the L1 way apart; input rows of a page or more) sweeps along its input rows
a line of each of the strip's rows a step; its loads also prefetch the same rows' line SWEEP_AHEAD steps on, once per line
(plugin_cpu/prefetch.sweep_offsets), into the L2 on AVX-512 targets and on AVX2 ones where the sweep is all the kernel reads; an
AVX-512 transposing copy whose stores stream runs its block's tiles unrolled (heuristic.STRIP_PART_UNROLLED), and AVX2's in parts of
at most heuristic.SPLIT_PART_TILES: no sweep. So
does a streamed NCHW -> NHWC on both renderers, whose tiles of a pixel's channels run innermost (opt.copy.rows_innermost). Other
transposes and permutes (tiles along the input row, cached ones, short rows, NHWC -> NCHW, the C renderer's a.T) render as
without the rule. Sources at AVX2 and AVX-512 widths (rendered, not run); results
against numpy from strip kernels run on this host."""
from __future__ import annotations
import re
import numpy as np
import pytest
from cpu_kernels import arch_renderer, host_like_renderer, run_rendered
from core import Tensor
from core.schedule.kernelize import create_schedule
from core.codegen.opt import Kernel
from core.codegen.opt.heuristic import hand_coded, STRIP_TILES, STRIP_ALONE_TILES, STRIP_ALONE_SPAN, SPLIT_PART_TILES
from core.codegen.program import get_program, program_source
import plugin_cpu.prefetch as prefetch
from plugin_cpu.compiler import host_flags

# the prefetched address's distance from the loaded one, in elements, as each renderer writes it
PREFETCH = {"LLVM": r"= getelementptr float, ptr %\w+, i64 (\d+)\n  call void @llvm.prefetch.p0", "C": r"__builtin_prefetch\(.*?\)\+(\d+), 0, 3\)"}

def _source(ren: str, simd_bytes: int, shape: tuple[int, ...], perm: tuple[int, ...], threads: int, stream_min_bytes: int | None = None) -> str:
  (item,), _, _ = create_schedule([Tensor(np.zeros(shape, np.float32)).permute(*perm).contiguous().uop])
  rnd = host_like_renderer(ren, simd_bytes, threads)   # a renderer of its own each time: programs are cached by renderer
  if stream_min_bytes is not None: rnd.stream_min_bytes = stream_min_bytes
  return program_source(get_program(hand_coded(Kernel(item.ast, rnd)).ast, rnd, optimize=False))

@pytest.mark.parametrize("simd_bytes", [32, 64])
@pytest.mark.parametrize("shape", [(4096, 4096), (8192, 1024), (2048, 2048)])
@pytest.mark.parametrize("threads", [0, 2])
def test_strip_transpose_prefetches_each_rows_line_steps_ahead(shape, threads, simd_bytes):
  src = _source("LLVM", simd_bytes, shape, (1, 0), threads)
  offs = re.findall(PREFETCH["LLVM"], src)
  # a step of the sweep reads 16 floats (a line) of each row; the tile's 16 rows, two ymm or one zmm each, prefetch once per row
  # (and the kernel is rendered twice: its aligned and unaligned functions); streamed strips run unrolled: no sweep
  unrolled = _unrolled(simd_bytes, shape, threads, host_like_renderer("LLVM", simd_bytes).stream_min_bytes)
  assert offs == ([] if unrolled else [str(16 * prefetch.SWEEP_AHEAD)] * 16 * src.count("define ")), offs

SWEEP_KERNELS = {"4096^2": (lambda x: x.T.contiguous(), (4096, 4096)), "8192x1024": (lambda x: x.T.contiguous(), (8192, 1024)),
                 "2048^2": (lambda x: x.T.contiguous(), (2048, 2048)), "a.T + 1": (lambda x: x.T + 1, (2048, 2048)),
                 "a * a.T": (lambda x: x * x.T, (2048, 2048))}

@pytest.mark.parametrize("arch", ["haswell", "znver3", "x86-64-v4"])
@pytest.mark.parametrize("kernel", SWEEP_KERNELS)
@pytest.mark.parametrize("threads", [0, 2])
def test_strip_transpose_prefetches_into_the_l2(kernel, threads, arch):
  # the sweep's lines go to the L2 (prefetcht2, locality 1) on AVX-512 targets (prefetch.SWEEP_L2_SIMD), and on AVX2 ones where
  # the sweep is all the kernel reads (SWEEP_ALONE_L2_SIMD); a * a.T's sweep beside its rows' loads keeps the L1 on AVX2
  fn, shape = SWEEP_KERNELS[kernel]
  (item,), _, _ = create_schedule([fn(Tensor(np.zeros(shape, np.float32))).uop])
  rnd = arch_renderer("LLVM", arch)
  rnd.threads = threads
  src = program_source(get_program(hand_coded(Kernel(item.ast, rnd)).ast, rnd, optimize=False))
  hints = re.findall(r"call void @llvm.prefetch.p0\(ptr %\w+, i32 0, i32 (\d), i32 1\)", src)
  l1 = kernel == "a * a.T" and arch != "x86-64-v4"
  if kernel != "a * a.T" and _unrolled(rnd.simd_width, shape, threads, rnd.stream_min_bytes):
    assert hints == [], hints   # streamed strips of a kernel that reads only the transposed input: unrolled, no sweep
  else: assert hints and set(hints) == {str(prefetch.L1_LOCALITY if l1 else prefetch.L2_LOCALITY)}, hints

RENDERERS = {"LLVM AVX2": ("LLVM", 32), "LLVM AVX-512": ("LLVM", 64), "C AVX2": ("C", 32), "C AVX-512": ("C", 64)}
TRANSPOSES = {"4096^2": ((4096, 4096), (1, 0)), "1024^2": ((1024, 1024), (1, 0)), "512^2": ((512, 512), (1, 0)), "64x96": ((64, 96), (1, 0)),
              "rows of 2 KiB": ((32768, 512), (1, 0)), "NCHW->NHWC": ((32, 64, 56, 56), (0, 2, 3, 1)), "NHWC->NCHW": ((32, 56, 56, 64), (0, 3, 1, 2))}

def _streamed(ren: str, simd_bytes: int, shape: tuple[int, ...], perm: tuple[int, ...]) -> bool:
  """This host's renderer streams the stores of the permute of `shape` (its buffers past its bound)."""
  bound = host_like_renderer(ren, simd_bytes).stream_min_bytes
  return 0 < bound <= 2 * 4 * int(np.prod(shape))

def _unrolled(simd_bytes: int, shape: tuple[int, ...], threads: int, bound: int) -> bool:
  """hand_coded runs the LLVM renderer's strip transpose of `shape` with its block's part of the strip unrolled (no loop of rows
  far apart, so no sweep): its stores stream (`bound`), and AVX-512's tiles, or AVX2's split ones in parts of at most
  SPLIT_PART_TILES (each of 2 threads' part of STRIP_TILES, or one thread's strip of STRIP_ALONE_TILES over STRIP_ALONE_SPAN
  bounds)."""
  nbytes = 2 * 4 * int(np.prod(shape))
  if not 0 < bound <= nbytes: return False
  part = STRIP_TILES // threads if threads > 1 else STRIP_ALONE_TILES if nbytes >= STRIP_ALONE_SPAN * bound else STRIP_TILES
  return simd_bytes == 64 or part <= SPLIT_PART_TILES

@pytest.mark.parametrize("ren, simd_bytes", list(RENDERERS.values()), ids=list(RENDERERS))
@pytest.mark.parametrize("threads", [0, 2])
def test_streamed_nchw_to_nhwc_prefetches_each_channel_rows_line_steps_ahead(ren, simd_bytes, threads):
  # its stores streamed (a bound under its 51 MB, whatever this host's L3), the tiles of a pixel's 64 channels run innermost: a
  # step reads a line of each of 64 channel rows, 12.5 KiB apart, along them; the tile's 16 loads each prefetch their row's line
  # SWEEP_AHEAD steps (16 floats each) on, in each function the LLVM renderer renders (its aligned and unaligned ones)
  src = _source(ren, simd_bytes, (32, 64, 56, 56), (0, 2, 3, 1), threads, stream_min_bytes=1 << 20)
  offs = re.findall(PREFETCH[ren], src)
  assert offs == [str(16 * prefetch.SWEEP_AHEAD)] * 16 * (src.count("define ") if ren == "LLVM" else 1), offs

# every pair but the LLVM renderer's 4096^2, which is in strips (test_strip_transpose_prefetches_each_rows_line_steps_ahead), and
# NCHW -> NHWC where its stores stream (test_streamed_nchw_to_nhwc_prefetches_each_channel_rows_line_steps_ahead)
@pytest.mark.parametrize("ren, simd_bytes, shape, perm", [pytest.param(*r, *t, id=f"{t_id}-{r_id}") for t_id, t in TRANSPOSES.items()
                                                          for r_id, r in RENDERERS.items() if (r[0], t_id) != ("LLVM", "4096^2") and
                                                          (t_id != "NCHW->NHWC" or not _streamed(*r, *t))])
@pytest.mark.parametrize("threads", [0, 2])
def test_other_transposes_render_as_without_the_rule(ren, simd_bytes, shape, perm, threads, monkeypatch):
  with_rule = _source(ren, simd_bytes, shape, perm, threads)
  monkeypatch.setattr(prefetch, "SWEEP_PREFETCH", False)
  assert _source(ren, simd_bytes, shape, perm, threads) == with_rule

@pytest.mark.parametrize("simd_bytes, flag", [(32, "avx2"), (64, "avx512f")])
@pytest.mark.parametrize("shape", [(2048, 2048), (1024, 4096)])
@pytest.mark.parametrize("threads", [0, 2])
def test_prefetching_strip_transposes_give_numpys_results(shape, threads, simd_bytes, flag):
  if flag not in host_flags(): pytest.skip(f"runs {simd_bytes}-byte vector code: a host with {flag}")
  x = np.random.default_rng(23).standard_normal(shape).astype(np.float32)
  got, src = run_rendered(rnd := host_like_renderer("LLVM", simd_bytes, threads), lambda a: a.T.contiguous(), x)
  assert ("llvm.prefetch.p0(ptr" in src) != _unrolled(simd_bytes, shape, threads, rnd.stream_min_bytes)
  np.testing.assert_array_equal(got.reshape(shape[::-1]), x.T)
