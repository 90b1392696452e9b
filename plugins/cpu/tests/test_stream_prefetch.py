"""A reduction whose global loads all stream a buffer beyond the last-level cache along its reduce loop, a line or more a load
(a.sum() of 16M floats, a dot product), prefetches STREAM_AHEAD_LINES lines ahead of each line it loads into the L2, on AVX-512
targets but a Zen 5 (a STREAM_SKIP_FLAGS feature without a STREAM_KEEP_FLAGS one), where it cost: a Zen 4, an Intel AVX-512
server core (both). AVX2's and the C renderer's kernels, smaller buffers, reductions with other loads and Zen 5-like targets
render as without the rule. Sources rendered for explicit vector widths (the size bound set by the test); results against
numpy from kernels run on this host."""
from __future__ import annotations
import re
import numpy as np
import pytest
from cpu_kernels import host_like_renderer
from core import Device, Tensor
from core.schedule.kernelize import create_schedule
from core.codegen.opt import Kernel
from core.codegen.opt.heuristic import hand_coded
from core.codegen.program import get_program, program_source
import plugin_cpu.prefetch as prefetch
from plugin_cpu.renderer import CPULLVMRenderer

BOUND = 4 << 20   # STREAM_MIN_BYTES in these tests: the host's last-level cache plays no part in what they expect
PREFETCH = r"= getelementptr float, ptr %\w+, i64 (\d+)\n  call void @llvm.prefetch.p0\(ptr %\w+, i32 0, i32 (\d), i32 1\)"

KERNELS = {"sum": (lambda a, b: a.sum(), (1 << 21,)), "dot": (lambda a, b: (a * b).sum(), (1 << 21,)),
           "mean": (lambda a, b: a.mean(), (1 << 21,))}

CPUS = {"zen4": frozenset(), "zen5": prefetch.STREAM_SKIP_FLAGS, "intel": prefetch.STREAM_SKIP_FLAGS | prefetch.STREAM_KEEP_FLAGS}

def _sources(ren: str, simd_bytes: int, fn, shape: tuple[int, ...], threads: int, cpu: str = "zen4") -> list[str]:
  """Each kernel of fn's schedule over zeros of `shape` (8 MiB: over BOUND), rendered for a CPU with `cpu`'s features of
  STREAM_SKIP_FLAGS and STREAM_KEEP_FLAGS (a Zen 4: neither; a Zen 5: a skip flag; an Intel AVX-512 server core: both), whichever this host is."""
  items, _, _ = create_schedule([fn(Tensor(np.zeros(shape, np.float32)), Tensor(np.zeros(shape, np.float32))).uop])
  out = []
  for item in items:
    rnd = host_like_renderer(ren, simd_bytes, threads)   # a renderer of its own each time: programs are cached by renderer
    rnd.flags = rnd.flags - prefetch.STREAM_SKIP_FLAGS - prefetch.STREAM_KEEP_FLAGS | CPUS[cpu]
    out.append(program_source(get_program(hand_coded(Kernel(item.ast, rnd)).ast, rnd, optimize=False)))
  return out

@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("threads", [0, 2])
def test_streaming_reduction_prefetches_lines_ahead_into_the_l2(kernel, threads, monkeypatch):
  monkeypatch.setattr(prefetch, "STREAM_MIN_BYTES", BOUND)
  fn, shape = KERNELS[kernel]
  first, *rest = _sources("LLVM", 64, fn, shape, threads)
  found = re.findall(PREFETCH, first)
  # one prefetch per line (16 floats) of each load, 8 lines (128 floats) on, into the L2 (locality 1); the small second stage
  # of a split sum (its partial sums) reads too little for the rule
  assert found and {h for _, h in found} == {str(prefetch.L2_LOCALITY)}, found
  assert {int(o) % 16 for o, _ in found} == {0} and min(int(o) for o, _ in found) == prefetch.STREAM_AHEAD_LINES * 16, found
  assert all("llvm.prefetch" not in src for src in rest)

@pytest.mark.parametrize("ren, simd_bytes, kernel, shape", [
  ("LLVM", 32, "sum", None), ("LLVM", 32, "dot", None), ("C", 32, "sum", None), ("C", 64, "sum", None), ("C", 64, "dot", None),
  ("LLVM", 64, "sum", (1 << 19,)), ("LLVM", 64, "dot", (1 << 18,)),   # 2 and 1 MiB: under BOUND
  ("LLVM", 64, "softmax", (1024, 2048)), ("LLVM", 64, "sum + 1", None)])  # other loads beside the stream
@pytest.mark.parametrize("threads", [0, 2])
def test_other_kernels_render_as_without_the_rule(ren, simd_bytes, kernel, shape, threads, monkeypatch):
  monkeypatch.setattr(prefetch, "STREAM_MIN_BYTES", BOUND)
  fns = {**{k: f for k, (f, _) in KERNELS.items()}, "softmax": lambda a, b: a.softmax(-1), "sum + 1": lambda a, b: (a + b[::-1]).sum()}
  fn, shape = fns[kernel], shape or (KERNELS[kernel][1] if kernel in KERNELS else (1 << 21,))
  with_rule = _sources(ren, simd_bytes, fn, shape, threads)
  monkeypatch.setattr(prefetch, "STREAM_L2_SIMD", 1 << 30)
  assert _sources(ren, simd_bytes, fn, shape, threads) == with_rule

@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("threads", [0, 2])
def test_a_zen5_like_target_renders_as_without_the_rule(kernel, threads, monkeypatch):
  # its features name it (STREAM_SKIP_FLAGS): there the prefetch cost the streaming reductions (prefetch.py), so none is rendered
  monkeypatch.setattr(prefetch, "STREAM_MIN_BYTES", BOUND)
  fn, shape = KERNELS[kernel]
  skipped = _sources("LLVM", 64, fn, shape, threads, cpu="zen5")
  assert all("llvm.prefetch" not in src for src in skipped)
  assert skipped != _sources("LLVM", 64, fn, shape, threads)   # the same kernels on a Zen 4-like target do prefetch
  monkeypatch.setattr(prefetch, "STREAM_L2_SIMD", 1 << 30)
  assert _sources("LLVM", 64, fn, shape, threads) == skipped

@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("threads", [0, 2])
def test_an_intel_avx512_server_core_keeps_the_rule(kernel, threads, monkeypatch):
  # AVX-VNNI beside AMX (Sapphire Rapids on): not a Zen 5, and the prefetch paid there (prefetch.py); rendered as a Zen 4's
  monkeypatch.setattr(prefetch, "STREAM_MIN_BYTES", BOUND)
  fn, shape = KERNELS[kernel]
  intel = _sources("LLVM", 64, fn, shape, threads, cpu="intel")
  assert "llvm.prefetch" in intel[0] and intel == _sources("LLVM", 64, fn, shape, threads)

@pytest.mark.parametrize("kernel", ["sum", "dot"])
def test_prefetching_streaming_reductions_give_numpys_results(kernel, monkeypatch):
  # on the default device (AVX-512 LLVM code), shapes no other test compiles: the rule must have fired on the stream's kernel
  ren = Device[Device.DEFAULT].renderer
  if not isinstance(ren, CPULLVMRenderer) or ren.simd_width < prefetch.STREAM_L2_SIMD:
    pytest.skip(f"runs 64-byte vector code: the default device renders {ren.simd_width}-byte vectors with {type(ren).__name__}")
  monkeypatch.setattr(prefetch, "STREAM_MIN_BYTES", BOUND)
  monkeypatch.setattr(prefetch, "STREAM_SKIP_FLAGS", frozenset())   # the rule on whatever AVX-512 CPU this is
  fired: list[int] = []
  def recorded(uops, deps):
    fired.append(len(out := stream_offsets(uops, deps)))
    return out
  stream_offsets = prefetch.stream_offsets
  monkeypatch.setattr(prefetch, "stream_offsets", recorded)
  rng = np.random.default_rng(5)
  n = (1 << 21) + (5 << 12)
  x, y = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
  got = Tensor(x).sum().item() if kernel == "sum" else (Tensor(x) * Tensor(y)).sum().item()
  want = x.astype(np.float64).sum() if kernel == "sum" else (x.astype(np.float64) * y).sum()
  assert any(fired), fired
  np.testing.assert_allclose(got, want, rtol=1e-5)
