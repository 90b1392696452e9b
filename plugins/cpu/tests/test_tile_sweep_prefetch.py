"""A permute whose transposing tile steps by more than a cache line along its innermost loop (NHWC -> NCHW: each step reads a
line of each of its pixels, 256 bytes apart) prefetches the same lines TILE_SWEEP_AHEAD steps on (TILE_SWEEP_NEAR on a Zen 5) into the L2
(plugin_cpu/prefetch.tile_sweep_offsets). Plain copies and elementwise kernels, NCHW -> NHWC, scalar permutes and tiles whose loop
is too short (a 64x96 transpose) render as without the rule. Sources for explicit targets (rendered, not run); results against
numpy from kernels run on this host. The tiles here run their whole loop, as without heuristic._close_rows_chunks, whose chunks
(4-8 tile steps, 16 KiB of input) take no sweep: the rule stays for the tiles they leave alone (128 channels on
AVX-512, 49 steps of a 28x28 image)."""
from __future__ import annotations
import re
import numpy as np
import pytest
from cpu_kernels import arch_renderer, host_like_renderer, run_rendered
from core import Tensor
from core.schedule.kernelize import create_schedule
from core.codegen.opt import Kernel
from core.codegen.opt import heuristic
from core.codegen.opt.heuristic import hand_coded
from core.codegen.program import get_program, program_source
import plugin_cpu.prefetch as prefetch
from plugin_cpu.c_renderer import CPUCRenderer
from plugin_cpu.compiler import host_flags
from plugin_cpu.renderer import CPULLVMRenderer

@pytest.fixture(autouse=True)
def _whole_loops(monkeypatch):
  monkeypatch.setattr(heuristic, "CLOSE_CHUNK_BYTES", 0)

def _source(rnd, fn, shape: tuple[int, ...], threads: int) -> str:
  (item,), _, _ = create_schedule([fn(Tensor(np.zeros(shape, np.float32))).uop])
  rnd.threads = threads
  return program_source(get_program(hand_coded(Kernel(item.ast, rnd)).ast, rnd, optimize=False))

def nhwc_nchw(x: Tensor) -> Tensor: return x.permute(0, 3, 1, 2).contiguous()

@pytest.mark.parametrize("arch", ["haswell", "znver3", "x86-64-v4"])
@pytest.mark.parametrize("threads", [0, 2])
def test_nhwc_to_nchw_prefetches_its_lines_steps_ahead_into_the_l2(arch, threads):
  src = _source(arch_renderer("LLVM", arch), nhwc_nchw, (32, 56, 56, 64), threads)
  steps = re.findall(r"= getelementptr float, ptr %\w+, i64 (\d+)\n  call void @llvm.prefetch.p0\(ptr %\w+, i32 0, i32 (\d), i32 1\)", src)
  # a step of the loop is whole pixels of 64 channels: every prefetch lies TILE_SWEEP_AHEAD steps on, into the L2 (locality 1)
  assert steps and {int(o) % (prefetch.TILE_SWEEP_AHEAD * 64) for o, _ in steps} == {0}, steps
  assert {h for _, h in steps} == {str(prefetch.L2_LOCALITY)}, steps

@pytest.mark.parametrize("threads", [0, 2])
def test_a_zen5_prefetches_its_tiles_fewer_steps_ahead(threads):
  # AVX-512 code on a CPU with STREAM_SKIP_FLAGS' features (a Zen 5): the same lines, TILE_SWEEP_NEAR steps on, not
  # TILE_SWEEP_AHEAD; without them (a Zen 4) as before
  def offsets(zen5: bool) -> list[int]:
    rnd = host_like_renderer("LLVM", 64, threads)
    rnd.flags = rnd.flags | prefetch.STREAM_SKIP_FLAGS if zen5 else rnd.flags - prefetch.STREAM_SKIP_FLAGS
    src = _source(rnd, nhwc_nchw, (32, 56, 56, 64), threads)
    return sorted(int(o) for o, _ in re.findall(r"= getelementptr float, ptr %\w+, i64 (\d+)\n  call void @llvm.prefetch.p0\(ptr %\w+, i32 0, i32 (\d)", src))
  near, far = offsets(True), offsets(False)
  assert near and near != far and [o * prefetch.TILE_SWEEP_AHEAD for o in near] == [o * prefetch.TILE_SWEEP_NEAR for o in far], (near, far)

def test_the_c_renderer_prefetches_nhwc_to_nchw_too():
  src = _source(CPUCRenderer().narrowed(32), nhwc_nchw, (32, 56, 56, 64), 2)
  assert re.findall(r"__builtin_prefetch\(.*?, 0, (\d)\)", src) and set(re.findall(r"__builtin_prefetch\(.*?, 0, (\d)\)", src)) == {"1"}

UNCHANGED = {"64x96 transpose": (lambda x: x.T.contiguous(), (64, 96)), "x + 1": (lambda x: (x + 1).contiguous(), (32, 56, 56, 64)),
             "relu": (lambda x: x.relu(), (32, 64, 56, 56)), "x + x": (lambda x: x + x, (4096, 4096)),
             "NCHW->NHWC": (lambda x: x.permute(0, 2, 3, 1).contiguous(), (32, 64, 56, 56)),
             "NHWC->NCHW 7x7": (nhwc_nchw, (32, 7, 7, 512)), "NHWC->NCHW 17x19x40": (nhwc_nchw, (3, 17, 19, 40))}

@pytest.mark.parametrize("rnd", [lambda: arch_renderer("LLVM", "haswell"), lambda: arch_renderer("LLVM", "x86-64-v4"), lambda: CPULLVMRenderer(),
                                 lambda: CPUCRenderer().narrowed(32), lambda: CPUCRenderer()], ids=["haswell", "x86-64-v4", "native", "C32", "C"])
@pytest.mark.parametrize("kernel", UNCHANGED)
@pytest.mark.parametrize("threads", [0, 2])
def test_other_kernels_render_as_without_the_rule(kernel, rnd, threads, monkeypatch):
  fn, shape = UNCHANGED[kernel]
  with_rule = _source(rnd(), fn, shape, threads)
  monkeypatch.setattr(prefetch, "TILE_SWEEP_AHEAD", 0)
  assert _source(rnd(), fn, shape, threads) == with_rule

# odd shapes whose tiles take the rule at these vector widths (checked: the source prefetches)
@pytest.mark.parametrize("simd_bytes, flag, shape", [(32, "avx2", (2, 40, 41, 80)), (32, "avx2", (2, 56, 56, 24)), (32, "avx2", (3, 28, 28, 32)),
                                                     (64, "avx512f", (3, 28, 28, 32))])
@pytest.mark.parametrize("threads", [0, 2])
def test_prefetching_permutes_give_numpys_results(shape, threads, simd_bytes, flag):
  if flag not in host_flags(): pytest.skip(f"runs {simd_bytes}-byte vector code: a host with {flag}")
  x = np.random.default_rng(23).standard_normal(shape).astype(np.float32)
  got, src = run_rendered(host_like_renderer("LLVM", simd_bytes, threads), nhwc_nchw, x)
  assert "llvm.prefetch.p0(ptr" in src
  np.testing.assert_array_equal(got.reshape(shape[0], shape[3], shape[1], shape[2]), x.transpose(0, 3, 1, 2))
