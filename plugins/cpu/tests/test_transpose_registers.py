"""A cached transposing copy (its buffers under the renderer's `stream_min_bytes`: plain stores) whose next tiles finish its output
lines reads as many input rows as half the vector registers (heuristic.CACHED_TILE_REGS): on AVX2 8 rows x 16 floats, whose
squares spill no register, where 16 rows (one ymm each per square, all live until their output row is stored) spilled 36 per
tile. AVX-512 (32 zmm), streamed kernels, NCHW -> NHWC's short output rows and kernels with a load along the output row keep
16 x 16. Small transposes take the tile too. Opts and the code LLVM and clang make of it for an explicit AVX2 CPU (haswell);
results against numpy under both renderers."""
from __future__ import annotations
import copy, platform, re, shutil
import numpy as np
import pytest
from core.testing.helpers import missing_tool
from cpu_kernels import run_on_renderer
from core import Tensor
from core.codegen.opt import Kernel, OptOps
from core.codegen.opt.heuristic import hand_coded
from core.schedule.kernelize import create_schedule
from core.codegen.program import get_program, program_source
from plugin_cpu.c_renderer import CPUCRenderer
from plugin_cpu.renderer import CPULLVMRenderer

CACHED, STREAMED = 28 << 20, 1   # stream_min_bytes: the buffers fit (plain stores), or every kernel streams

def _renderer(ren: str, simd_bytes: int, bound: int):
  rnd = copy.copy(CPULLVMRenderer() if ren == "LLVM" else CPUCRenderer())
  rnd.simd_width, rnd.simd_regs, rnd.threads, rnd.stream_min_bytes = simd_bytes, 16 if simd_bytes == 32 else 32, 2, bound
  return rnd

def _kernel(fn, shapes, ren: str = "LLVM", simd_bytes: int = 32, bound: int = CACHED) -> tuple[Kernel, object]:
  items, _, _ = create_schedule([fn(*[Tensor(np.zeros(s, np.float32)) for s in shapes]).uop])
  assert len(items) == 1
  rnd = _renderer(ren, simd_bytes, bound)
  return hand_coded(Kernel(items[0].ast, rnd)), rnd

def _upcasts(k: Kernel) -> list[int]: return [o.amt for o in k.applied if o.op is OptOps.UPCAST]
def _t(a): return a.T.contiguous()

@pytest.mark.parametrize("fn, shapes", [
  (_t, [(1024, 1024)]), (_t, [(3072, 768)]), (_t, [(768, 3072)]), (_t, [(512, 528)]), (_t, [(256, 256)]), (_t, [(64, 96)]),
  (lambda a: a.permute(0, 3, 1, 2).contiguous(), [(2, 56, 56, 64)]), (lambda a: a.permute(0, 2, 1).contiguous(), [(12, 256, 64)]),
  (lambda a: a.T + 1, [(1024, 1024)])], ids=["1024^2", "3072x768", "768x3072", "512x528", "256^2", "64x96", "nhwc_nchw", "head", "aT+1"])
def test_cached_avx2_transpose_reads_8_rows_of_a_line(fn, shapes):
  k, _ = _kernel(fn, shapes)
  assert _upcasts(k) == [8, 16], k.applied

@pytest.mark.parametrize("fn, shapes, simd_bytes, bound", [
  (_t, [(1024, 1024)], 64, CACHED),                                              # AVX-512: 16 rows in 32 zmm
  (_t, [(1024, 1024)], 32, STREAMED),                                            # streamed: whole output lines
  (_t, [(256, 256)], 64, CACHED),
  (lambda a: a.permute(0, 2, 3, 1).contiguous(), [(2, 128, 28, 28)], 32, CACHED),  # tiles along far rows innermost (a SWAP)
  (lambda a: a * a.T, [(1024, 1024)], 32, CACHED)],                               # a load along the output row
  ids=["AVX-512", "streamed", "AVX-512-small", "nchw_nhwc-swap", "a*a.T"])
def test_other_transposes_keep_16_rows(fn, shapes, simd_bytes, bound):
  k, _ = _kernel(fn, shapes, simd_bytes=simd_bytes, bound=bound)
  # (then, streamed, the unrolled part of the strip: heuristic.STRIP_PART_UNROLLED, SPLIT_PART_TILES)
  assert _upcasts(k)[:2] == [16, 16], k.applied

def test_small_transposes_take_the_register_tile():
  # below 512 both ways (the old TRANSPOSE_MIN_ROW bound for CPUs): a tile of shuffles, not a gather of one element per lane
  for shape in [(128, 128), (64, 96), (96, 64), (32, 32)]:
    assert len(_upcasts(_kernel(_t, [shape])[0])) == 2, shape
  assert len(_upcasts(_kernel(lambda a: a.permute(0, 2, 3, 1).contiguous(), [(2, 64, 16, 16)])[0])) == 2

def _spills(asm: str) -> int:
  """Vector registers stored to or loaded from the stack."""
  return len(re.findall(r"%[xy]mm\d+,\s*-?(?:0x[0-9a-f]+)?\(%rsp\)", asm)) + len(re.findall(r"\(%rsp\),\s*%[xy]mm\d+", asm))

@pytest.mark.parametrize("ren", ["LLVM", "C"])
@pytest.mark.parametrize("shape", [(1024, 1024), (768, 3072)])
def test_cached_avx2_transpose_spills_no_register(ren, shape):
  if platform.machine() != "x86_64": pytest.skip("x86-64 code")
  from plugin_cpu.compiler import CCompiler, LLVMCompiler
  # the C source through clang, whatever $CC says: gcc 12's allocator spills the shuffles of either tile (94 registers per 8-row
  # tile, 36 per 16-row one), and runs them at about the same speed (one Zen 3 thread, 1024^2: 10.4 vs 8.8 GB/s, 768x3072: 7.6
  # vs 8.4), so it is no measure of the tile's register count
  if ren == "C" and (clang := shutil.which("clang")) is None:
    missing_tool("clang is not installed: apt install clang (.ci/run installs it)")
  k, rnd = _kernel(_t, [shape], ren)
  comp = LLVMCompiler(cpu="haswell") if ren == "LLVM" else CCompiler(cc=clang, march="haswell")
  asm = comp.disassemble(comp.compile(program_source(get_program(k.ast, rnd, optimize=False))))
  stores = re.findall(r"\tvmov(?:nt|u|a)ps\s+%ymm\d+,\s*-?(?:0x[0-9a-f]+)?\(%r(?!sp)", asm)
  # at most one register on the stack (2 threads' blocks of 1024^2: LLVM and clang each keep one ymm there); the 16-row tile
  # stored 36 and loaded them back per tile
  assert len(stores) >= 16 and _spills(asm) <= 3, asm

def test_renderer_register_counts_set_the_tile():
  # the same kernel for 16 and 32 registers of 32 bytes: half of each
  item = create_schedule([_t(Tensor(np.zeros((1024, 1024), np.float32))).uop])[0][0]
  for regs, want in ((16, [8, 16]), (32, [16, 16])):
    rnd = _renderer("LLVM", 32, CACHED)
    rnd.simd_regs = regs
    assert _upcasts(hand_coded(Kernel(item.ast, rnd))) == want, regs

@pytest.mark.parametrize("ren", ["LLVM", "C"])
def test_transposes_small_and_cached_give_numpys_results(ren):
  # in a process of its own: DEV=CPU:<ren> picks the renderer; odd shapes (no whole tile), small and cached ones, one thread and two
  run_on_renderer(ren, (
    "r = np.random.default_rng(7)\n"
    "for shape, perm in [((1024, 1024), (1, 0)), ((768, 3072), (1, 0)), ((3072, 768), (1, 0)), ((256, 256), (1, 0)), ((64, 96), (1, 0)),\n"
    "                    ((96, 64), (1, 0)), ((33, 65), (1, 0)), ((136, 520), (1, 0)), ((520, 136), (1, 0)), ((12, 256, 64), (0, 2, 1)),\n"
    "                    ((2, 56, 56, 64), (0, 3, 1, 2)), ((2, 64, 16, 16), (0, 2, 3, 1)), ((3, 24, 40, 17), (0, 3, 1, 2)), ((5, 7, 9), (2, 0, 1))]:\n"
    "  for dt in (np.float32, np.int32, np.float16) if shape in ((1024, 1024), (64, 96), (33, 65)) else (np.float32,):\n"
    "    a = (r.standard_normal(shape) * 100).astype(dt)\n"
    "    np.testing.assert_array_equal(Tensor(a).permute(*perm).contiguous().numpy(), a.transpose(perm))\n"
    "a = r.standard_normal((256, 256)).astype(np.float32)\n"
    "np.testing.assert_array_equal((Tensor(a) + Tensor(a).T).numpy(), a + a.T)\n"
    "np.testing.assert_array_equal((Tensor(a) * Tensor(a).T).numpy(), a * a.T)\n"
    "print('ok')\n"))
