"""A conv whose window runs down the rows only (one column wide: the row-tap phase of a 3x3/2 input gradient, taps (0, 2) x (1))
on rows shorter than a vector keeps its rows apart (heuristic._merge_loops) and takes the channel tile (vectors along the output
channels, the kernel rows unrolled), where merged rows of 7 took vectors of pixels beside weights broadcast from the unpacked
weight. Rendered for explicit targets (Haswell and x86-64-v4, LLVM and C); the input gradient of a 3x3/2 conv onto 14x14 (phases
of 7x7 outputs) run where this CPU runs the code, against numpy in float64."""
from __future__ import annotations
import platform
import numpy as np
import pytest
from core import Tensor
from core.schedule.kernelize import create_schedule
from core.codegen.opt import Kernel, OptOps
from core.codegen.opt.heuristic import hand_coded
from plugin_cpu.compiler import host_flags
from cpu_kernels import arch_renderer, run_item

LANES = {"haswell": 8, "x86-64-v4": 16}

def _renderer(ren: str, arch: str): return arch_renderer(ren, arch)

@pytest.mark.parametrize("ren", ["LLVM", "C"])
@pytest.mark.parametrize("arch", ["haswell", "x86-64-v4"])
@pytest.mark.parametrize("width", [7, 5])
def test_a_window_down_short_rows_takes_the_channel_tile(ren, arch, width):
  x, w = Tensor.zeros(2, 16, width + 1, width).realize(), Tensor.zeros(32, 16, 2, 1).realize()
  ast = create_schedule([x.conv2d(w).uop])[0][-1].ast
  applied = hand_coded(Kernel(ast, _renderer(ren, arch))).applied
  assert not any(o.op is OptOps.MERGE for o in applied), applied
  # the output channels take the lanes, the row's pixels the rows of the tile (merged: 8 or 16 pixels a vector, 49 padded to 56)
  ups = [o.amt for o in applied if o.op is OptOps.UPCAST]
  assert ups[0] == LANES[arch] and width in ups, applied

@pytest.mark.parametrize("arch", ["haswell", "x86-64-v4"])
def test_rows_of_a_vector_or_more_still_merge(arch):
  # rows of 16 (a vector on either target) and a 1x1 conv's 7x7 pixels: one long row, as before
  x, w = Tensor.zeros(2, 16, 17, 16).realize(), Tensor.zeros(32, 16, 2, 1).realize()
  ast = create_schedule([x.conv2d(w).uop])[0][-1].ast
  assert any(o.op is OptOps.MERGE for o in hand_coded(Kernel(ast, _renderer("LLVM", arch))).applied)
  x, w = Tensor.zeros(2, 16, 7, 7).realize(), Tensor.zeros(32, 16, 1, 1).realize()
  ast = create_schedule([x.conv2d(w).uop])[0][-1].ast
  assert any(o.op is OptOps.MERGE for o in hand_coded(Kernel(ast, _renderer("LLVM", arch))).applied)

@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="runs x86 code")
@pytest.mark.parametrize("arch", ["haswell", "x86-64-v4"])
def test_input_gradient_onto_14_gives_numpys_results(arch):
  if not ({"avx2", "fma"} if arch == "haswell" else {"avx512f", "avx512bw", "avx512dq", "avx512vl"}) <= host_flags():
    pytest.skip(f"this CPU does not run {arch} code")
  from plugin_cpu.compiler import LLVMCompiler
  rng = np.random.default_rng(14)
  x, w = rng.standard_normal((2, 16, 14, 14), dtype=np.float32), rng.standard_normal((32, 16, 3, 3), dtype=np.float32)
  g = rng.standard_normal((2, 32, 7, 7), dtype=np.float32)
  xt = Tensor(x, requires_grad=True).realize()
  xt.conv2d(Tensor(w).realize(), stride=2, padding=1).backward(Tensor(g).realize())
  assert xt.grad is not None
  rnd, compiler = _renderer("LLVM", arch), LLVMCompiler(cpu=arch)
  for it in create_schedule([xt.grad.uop])[0]: bufs, _ = run_item(it, rnd, compiler, hand_coded(Kernel(it.ast, rnd)).ast)
  got = bufs[0].numpy().reshape(x.shape)
  # dX[n, c, i, j] = sum over o, kh, kw of g[n, o, p, q] * w[o, c, kh, kw] where 2p - 1 + kh = i and 2q - 1 + kw = j
  want = np.zeros((2, 16, 16, 16))
  for kh in range(3):
    for kw in range(3):
      want[:, :, kh:kh + 13:2, kw:kw + 13:2] += np.einsum("nopq,oc->ncpq", g.astype(np.float64), w[:, :, kh, kw].astype(np.float64))
  np.testing.assert_allclose(got, want[:, :, 1:15, 1:15], rtol=1e-4, atol=1e-4)
