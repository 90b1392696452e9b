"""Transposing copies (a.T.contiguous(), NCHW <-> NHWC) load whole input lines (16 floats: one register on AVX-512, two on AVX2)
along the input's rows and transpose them in registers (shufflevector in LLVM IR, vector literals of lanes in C), where each
output lane was a scalar load; for both renderers at AVX2 and AVX-512 widths (the source is rendered, not run, for the wider one),
and numpy's results under each renderer."""
from __future__ import annotations
import copy, re
import numpy as np
import pytest
from cpu_kernels import run_on_renderer
from core import Tensor
from core.schedule.kernelize import create_schedule
from core.codegen.program import get_program, program_source
from plugin_cpu.c_renderer import CPUCRenderer
from plugin_cpu.renderer import CPULLVMRenderer

CASES = [((1024, 2048), (1, 0)), ((2, 64, 56, 56), (0, 2, 3, 1)), ((2, 56, 56, 64), (0, 3, 1, 2))]

def _source(shape, perm, simd_bytes: int, ren: str, dt=np.float32) -> str:
  rnd = copy.copy(CPULLVMRenderer() if ren == "LLVM" else CPUCRenderer())
  rnd.simd_width, rnd.simd_regs, rnd.threads = simd_bytes, 16 if simd_bytes == 32 else 32, 2
  rnd.stream_min_bytes = 0   # not this host's L3 bound: cached AVX2 tiles read 8 rows (test_transpose_registers), these 16
  items, _, _ = create_schedule([Tensor(np.zeros(shape, dt)).permute(*perm).contiguous().uop])
  assert len(items) == 1
  return program_source(get_program(items[0].ast, rnd))

# (a vector load of a register's lanes, a scalar load, a shuffle) as each renderer writes them
# (the C renderer's load that also prefetches, NHWC -> NCHW's: prefetch.tile_sweep_offsets, is a comma expression)
VLOAD = {"LLVM": r"= load <{n} x (float|i32)>, ptr", "C": r"(float|int)x{n} val\d+ = \((__builtin_prefetch\([^;]*?\), \()?\*\(\((float|int)x{n}\*\)"}
SLOAD = {"LLVM": r"= load (float|i32), ptr %v\d+", "C": r"(float|int) val\d+ = "}
SHUFFLE = {"LLVM": r"= shufflevector ", "C": r"(float|int)x\d+ vec\d+ = \(\((float|int)x\d+\)\{(val|alu)\d+\[\d+\],(val|alu)\d+\[\d+\]"}

@pytest.mark.parametrize("ren", ["LLVM", "C"])
@pytest.mark.parametrize("simd_bytes", [32, 64], ids=["AVX2", "AVX-512"])
@pytest.mark.parametrize("shape, perm", CASES, ids=["transpose", "nchw_nhwc", "nhwc_nchw"])
@pytest.mark.parametrize("dt", [np.float32, np.int32])
def test_transposing_copies_load_rows_and_shuffle(shape, perm, simd_bytes, ren, dt):
  src = _source(shape, perm, simd_bytes, ren, dt)
  # the tile's input rows: a whole line of 16 each (16 rows x 16 on AVX2 too, where rows of 8 read each line over two tiles),
  # no element loaded alone; the LLVM renderer loads an AVX2 row a register at a time (Renderer.split_tile_rows: two of 8)
  loads, lanes = (32, 8) if ren == "LLVM" and simd_bytes == 32 else (16, 16)
  assert len(re.findall(VLOAD[ren].format(n=lanes), src)) == loads, src
  assert not re.search(SLOAD[ren], src), src
  assert re.search(SHUFFLE[ren], src), src

# x86 instructions that move one element into or out of a vector register (a gather's lanes), and those that shuffle registers
SCALAR_MOVES = ("vinsertps", "vextractps", "vpinsrd", "vpextrd", "vmovss", "vmovd", "vpbroadcastd", "vbroadcastss", "vgatherdps")
SHUFFLES = ("vshuf", "vunpck", "vperm", "vinsertf", "vextractf", "vblend", "valign")

@pytest.mark.parametrize("simd_bytes, cpu", [(32, "haswell"), (64, "skylake-avx512")], ids=["AVX2", "AVX-512"])
def test_transpose_tile_lowers_to_register_shuffles(simd_bytes, cpu):
  # LLVM's code for the tile's shufflevectors, built for an explicit CPU: whole registers shuffled, no element moved alone, at
  # most 4 shuffles per stored register (log2 16 stages: 16 output lines per tile, one register each on AVX-512, two on AVX2)
  from core.device.compiler import LLVMTarget, llvm_compile_here
  asm = llvm_compile_here(LLVMTarget("x86_64-unknown-linux-gnu", cpu, "", 2, "pic", "default"), _source((1024, 2048), (1, 0), simd_bytes, "LLVM"), assembly=True).decode()
  ops = re.findall(r"^\s+(v\w+)", asm, re.M)
  assert not [o for o in ops if o in SCALAR_MOVES], asm
  assert 0 < sum(o.startswith(SHUFFLES) for o in ops) <= 4 * 16 * 64 // simd_bytes, asm

@pytest.mark.parametrize("ren", ["LLVM", "C"])
def test_transposing_copies_give_numpys_results(ren):
  # in a process of its own: DEV=CPU:<ren> picks the renderer (shapes a whole tile divides, and odd ones; float, int and half)
  run_on_renderer(ren, (
    "r = np.random.default_rng(3)\n"
    "for shape, perm in [((1024, 528), (1, 0)), ((1000, 520), (1, 0)), ((513, 1031), (1, 0)), ((2, 64, 56, 56), (0, 2, 3, 1)),\n"
    "                    ((2, 56, 56, 64), (0, 3, 1, 2)), ((1, 24, 600, 40), (0, 2, 3, 1)), ((3, 37, 29, 24), (0, 3, 1, 2))]:\n"
    "  for dt in (np.float32, np.int32, np.float16):\n"
    "    x = (r.standard_normal(shape) * 1000).astype(dt)\n"
    "    np.testing.assert_array_equal(Tensor(x).permute(*perm).contiguous().numpy(), x.transpose(perm))\n"
    "print('ok')\n"), timeout=600)
