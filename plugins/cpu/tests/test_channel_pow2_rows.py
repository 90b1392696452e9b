"""A 3x3 conv whose output rows hold part vectors and whose channel tiles of a pixel block that is not a power of two hold fewer
than MM_MIN_ACC accumulators (AVX2's 16 registers, rows of 28 on 8 lanes: 1 vector x 7 pixels) takes 2 vectors of output channels
x a block of 4 pixels (heuristic.CHANNEL_POW2_ROWS): 8 accumulators. Rendered for explicit targets: Haswell (LLVM and C) takes
it, x86-64-v4 (32 registers) renders as without the rule; Haswell's code run where this CPU runs it, against numpy."""
from __future__ import annotations
import platform
import numpy as np
import pytest
from core import Tensor
from core.schedule.kernelize import create_schedule
from core.codegen.opt import Kernel, OptOps
from core.codegen.opt.heuristic import hand_coded
from core.codegen.program import get_program, program_source
from plugin_cpu.compiler import host_flags
from cpu_kernels import arch_renderer, run_item
import core.codegen.opt.heuristic as heuristic

def _renderer(ren: str, arch: str): return arch_renderer(ren, arch)

def _items(x: np.ndarray, w: np.ndarray, stride: int = 1, grad: bool = False) -> list:
  """The schedule of the conv (padding 1), or with `grad` of its input gradient for an output gradient of ones' shape."""
  xt = Tensor(x, requires_grad=grad).realize()
  y = xt.conv2d(Tensor(w).realize(), stride=stride, padding=1)
  if not grad: return create_schedule([y.uop])[0]
  y.backward(Tensor(np.ones(y.shape, np.float32)).realize())
  assert xt.grad is not None
  return create_schedule([xt.grad.uop])[0]

def _upcasts(ren: str, arch: str, ast) -> list[int]:
  return [o.amt for o in hand_coded(Kernel(ast, _renderer(ren, arch))).applied if o.op is OptOps.UPCAST]

def _source(ren: str, arch: str, ast) -> str:
  rnd = _renderer(ren, arch)   # a renderer of its own each time: programs are cached by renderer
  return program_source(get_program(hand_coded(Kernel(ast, rnd)).ast, rnd, optimize=False))

SHAPES = [(2, 64, 28, 64), (1, 32, 28, 16)]

@pytest.mark.parametrize("ren", ["LLVM", "C"])
@pytest.mark.parametrize("shape", SHAPES, ids=["64->64", "32->16"])
def test_avx2_rows_of_28_take_two_channel_vectors_by_four_pixels(ren, shape):
  n, c, hw, o = shape
  ast = _items(np.zeros((n, c, hw, hw), np.float32), np.zeros((o, c, 3, 3), np.float32))[-1].ast
  # the output channels in 8 lanes and 2 vectors, then 4 pixels of the row (was 1 vector x 7 pixels: 7 accumulators)
  assert _upcasts(ren, "haswell", ast) == [8, 2, 4]

@pytest.mark.parametrize("hw", [28, 56, 14])
def test_avx512_renders_as_without_the_rule(hw, monkeypatch):
  ast = _items(np.zeros((2, 64, hw, hw), np.float32), np.zeros((64, 64, 3, 3), np.float32))[-1].ast
  new = _source("LLVM", "x86-64-v4", ast)
  monkeypatch.setattr(heuristic, "CHANNEL_POW2_ROWS", False)
  assert _source("LLVM", "x86-64-v4", ast) == new

@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64") or not {"avx2", "fma"} <= host_flags(),
                    reason="runs code built for an AVX2 CPU (Haswell)")
@pytest.mark.parametrize("shape, stride, grad", [((2, 64, 28, 64), 1, False), ((1, 16, 28, 32), 1, True), ((2, 16, 56, 32), 2, True)],
                         ids=["conv 28", "input gradient 28", "input gradient 56/2"])
def test_haswell_code_gives_numpys_results(shape, stride, grad):
  from plugin_cpu.compiler import LLVMCompiler
  n, c, hw, o = shape
  rng = np.random.default_rng(28)
  x, w = rng.standard_normal((n, c, hw, hw), dtype=np.float32), rng.standard_normal((o, c, 3, 3), dtype=np.float32)
  rnd, compiler = _renderer("LLVM", "haswell"), LLVMCompiler(cpu="haswell")
  items, tiles = _items(x, w, stride, grad), []
  for it in items:
    k = hand_coded(Kernel(it.ast, rnd))
    tiles.append([op.amt for op in k.applied if op.op is OptOps.UPCAST])
    bufs, _ = run_item(it, rnd, compiler, k.ast)
  assert [8, 2, 4] in tiles and [8, 7] not in tiles, tiles   # the rule's tile, no 1 vector x 7 pixels left
  got = bufs[0].numpy().reshape(x.shape)
  xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
  win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))[:, :, ::stride, ::stride]
  if not grad:
    want = np.einsum("nchwij,ocij->nohw", win, w.astype(np.float64))
  else:
    # the gradient of sum(conv(x)) for x: each input summed over the windows that read it, times the weights' channel sums
    ones = np.ones((n, o) + win.shape[2:4])
    dxp = np.zeros_like(xp)
    for i in range(3):
      for j in range(3):
        dxp[:, :, i:i + stride * ones.shape[2]:stride, j:j + stride * ones.shape[3]:stride] += \
          np.einsum("nohw,oc->nchw", ones, w[:, :, i, j].astype(np.float64))
    want = dxp[:, :, 1:hw + 1, 1:hw + 1]
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
