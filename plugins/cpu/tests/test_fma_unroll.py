"""On a target with 16 vector registers (AVX2) the LLVM renderer marks a register tile's reduce loop
llvm.loop.unroll.count (renderer.fma_unroll_loops): 2 x 6's 12 FMAs a step, LLVM's own unroll by 2 left the loop control on the
FMA ports of an Intel core; the loop around it is kept rolled (unroll.disable). 32-register targets (AVX-512) and loops that are no tile (a variance's d*d + acc) are not marked.
Results against numpy."""
import re
import numpy as np
import pytest
from cpu_kernels import host_like_renderer, run_item, sink_item
from core import Tensor
from plugin_cpu import renderer as R

def _source(out: Tensor, rnd) -> str:
  from core.codegen.program import get_program, program_source
  return program_source(get_program(sink_item(out).ast, rnd))

def _counts(src: str) -> list[tuple[int, int]]:
  """(steps, unroll count) of each loop whose back edge carries unroll.count metadata."""
  counts = dict(re.findall(r'^!(\d+) = !\{!"llvm.loop.unroll.count", i32 (\d+)\}', src, re.M))
  loops = dict(re.findall(r"^!(\d+) = distinct !\{!\d+, !(\d+)\}", src, re.M))
  out = []
  for loop, md in re.findall(r"br label %(loop\d+)\.head, !llvm.loop !(\d+)\n", src):
    if loops.get(md) in counts:
      out.append((int(re.search(rf"^{loop}\.head:\n.*\n\s+%t\d+ = icmp slt i32 %ridx\d+, (\d+)", src, re.M).group(1)), int(counts[loops[md]])))
  return out

# 96x256 @ 256x64: 2 x 6, 12 FMAs a reduce step; 100x512 @ 512x40 (5 vectors a row): 1 x 6 with the reduce unrolled by 2 (the
# heuristic's MM_K), 12 FMAs a step of 256 (the padded rows' tile too where 6 does not divide m). Either: 8 steps an iteration
def _rolled(src: str) -> int:
  """The loops whose back edge carries unroll.disable metadata."""
  loops = dict(re.findall(r"^!(\d+) = distinct !\{!\d+, !(\d+)\}", src, re.M))
  return sum(loops.get(md) == "0" for md in re.findall(r"br label %loop\d+\.head, !llvm.loop !(\d+)\n", src))

@pytest.mark.parametrize("m,k,n,steps", [(96, 256, 64, 256), (100, 512, 40, 256)])
def test_a_16_register_tiles_reduce_loop_is_unrolled_to_96_fmas(m, k, n, steps, monkeypatch):
  r = np.random.default_rng(3)
  a, b = r.standard_normal((m, k)).astype(np.float32), r.standard_normal((k, n)).astype(np.float32)
  bufs, src = run_item(sink_item(Tensor(a) @ Tensor(b)), host_like_renderer("LLVM", 32, threads=0))
  assert _counts(src) and all(c == (steps, 8) for c in _counts(src)), src
  np.testing.assert_allclose(bufs[0].numpy().reshape(m, n), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
  monkeypatch.setattr(R, "FMA_UNROLL_FMAS", 0)
  off = run_item(sink_item(Tensor(a) @ Tensor(b)), host_like_renderer("LLVM", 32, threads=0))[1]
  # each marked loop's enclosing loop (the panels of a group, the row tiles) kept rolled beside the pack's copy loops
  assert _counts(off) == [] and _rolled(src) == _rolled(off) + len(_counts(src)), src

def test_32_register_tiles_and_a_variance_are_not_marked():
  r = np.random.default_rng(4)
  a, b = r.standard_normal((96, 256)).astype(np.float32), r.standard_normal((256, 64)).astype(np.float32)
  # (sources only: AVX-512 code runs on AVX-512 hosts alone; the same product marked on the 16-register target)
  assert _counts(_source(Tensor(a) @ Tensor(b), host_like_renderer("LLVM", 32, threads=0)))
  assert _counts(_source(Tensor(a) @ Tensor(b), host_like_renderer("LLVM", 64, threads=0))) == []
  x = r.standard_normal((64, 1024)).astype(np.float32)
  xt = Tensor(x)
  bufs, src = run_item(sink_item(((xt - xt.mean(axis=1, keepdim=True)) ** 2).sum(axis=1)), host_like_renderer("LLVM", 32, threads=0))
  assert _counts(src) == [], src
  ref = ((x.astype(np.float64) - x.mean(axis=1, keepdims=True)) ** 2).sum(axis=1)
  np.testing.assert_allclose(bufs[0].numpy(), ref, rtol=1e-4)
