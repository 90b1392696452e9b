"""A large 3x3 conv on AVX2 targets (CPULLVMRenderer.conv_edge_split) reads its zero-padded input in place, its first and last
output rows and column tiles split from the interior (core.codegen.opt.edges), whose loads carry no gates."""
from __future__ import annotations
import numpy as np
import pytest
from cpu_kernels import run_item
from core import Tensor
from core.device.registry import Device
import core.tensor.conv as conv
from core.codegen.opt import Kernel
from core.codegen.opt.edges import split_edges
from core.codegen.opt.heuristic import hand_coded
from core.codegen.program import get_program, program_uops
from core.ir.ops import Ops, UOp
from core.schedule.kernelize import create_schedule
from plugin_cpu.c_renderer import CPUCRenderer
from plugin_cpu.renderer import CPULLVMRenderer

rng = np.random.default_rng(37)

def _ref(x: np.ndarray, w: np.ndarray, pad: int) -> np.ndarray:
  xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
  win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))
  return np.einsum("nchwij,ocij->nohw", win, w.astype(np.float64))

def _item(x: np.ndarray, w: np.ndarray, pad: int):
  items, _, _ = create_schedule([Tensor(x).realize().conv2d(Tensor(w).realize(), padding=pad).uop])
  assert len(items) == 1, [it.ast.arg for it in items]
  return items[0]

def _gated_loads(uops: list[UOp]) -> dict[tuple[int, ...], tuple[int, int]]:
  """(gated, all) input loads per loop nest, keyed by the nest's trip counts, outermost first."""
  out: dict[tuple[int, ...], tuple[int, int]] = {}
  nest: list[UOp] = []
  for u in uops:
    if u.op is Ops.RANGE: nest.append(u)
    elif u.op is Ops.END: nest.pop()
    elif u.op is Ops.LOAD and u.src[0].op is Ops.INDEX:
      g, a = out.get(key := tuple(r.src[0].arg for r in nest), (0, 0))
      out[key] = (g + (len(u.src[0].src) > 2 and u.src[0].src[2].op is not Ops.CONST), a + 1)
  return out

@pytest.mark.parametrize("arch, on", [("haswell", True), ("znver3", True), ("x86-64-v4", False)])
def test_conv_edge_split_by_target(arch, on):
  assert CPULLVMRenderer(arch=arch).conv_edge_split is on
  assert CPULLVMRenderer(arch=arch).narrowed(32).conv_edge_split is True
  assert CPUCRenderer().conv_edge_split is False

@pytest.fixture
def edge_split(monkeypatch):
  # the default device's renderer reads large convs as an AVX2 host's does (conv_edge_split, not large_conv_in_place), with no
  # conv plan replayed from a test that built the same conv otherwise
  dev = Device[Device.DEFAULT].renderer
  monkeypatch.setattr(dev, "large_conv_in_place", False)
  monkeypatch.setattr(dev, "conv_edge_split", True, raising=False)
  monkeypatch.setattr(conv, "replayed", lambda key, inputs, build: build())

@pytest.mark.parametrize("stride, pad, kernels", [(1, 1, 1), (2, 1, 3), (1, 2, 3)])
def test_edge_split_reads_in_place_at_stride_1_pad_1(edge_split, stride, pad, kernels):
  # a large conv (64 x 92 x 92, 2.2 MB) read in place: stride 1 padded by 1, whose interior is ungated once its edges are split
  # off; a strided or wider-padded one keeps the padded copy (two kernels) and reads it ungated
  y = Tensor(np.ones((1, 64, 92, 92), np.float32)).realize().conv2d(Tensor.ones(64, 64, 3, 3), stride=stride, padding=pad)
  items, _, _ = create_schedule([y.uop])
  assert len(items) == kernels, [it.ast.arg for it in items]

@pytest.mark.parametrize("arch", ["haswell", "znver3"])
@pytest.mark.parametrize("threads", [0, 2])
@pytest.mark.parametrize("n, c, h, wd, o, pad", [
  (1, 8, 5, 7, 16, 1),     # odd rows and columns
  (3, 8, 5, 7, 16, 2),     # padding 2: the second row and column in from each edge stay gated in the interior
  (1, 16, 1, 7, 16, 1),    # one output row: no loop to split along the rows
  (3, 16, 9, 1, 16, 1),    # one output column
  (2, 16, 4, 2, 32, 1),    # two rows and columns: first and last, no interior
  (2, 16, 12, 12, 16, 1),
])
def test_split_edges_values(arch, threads, n, c, h, wd, o, pad):
  # the conv reads its padded input through gates (small: in place on every target); split at its edges as an AVX2 target renders
  # it, its values against numpy's float64
  x, w = rng.standard_normal((n, c, h, wd)).astype(np.float32), rng.standard_normal((o, c, 3, 3)).astype(np.float32)
  item = _item(x, w, pad)
  rnd = CPULLVMRenderer(arch=arch)
  rnd.threads = threads
  ast = hand_coded(Kernel(item.ast, rnd)).ast
  bufs, _ = run_item(item, rnd, ast=split_edges(ast))
  want = _ref(x, w, pad)
  np.testing.assert_allclose(bufs[0].numpy().reshape(want.shape), want, rtol=1e-4, atol=1e-4)

@pytest.mark.parametrize("threads", [0, 2])
def test_large_conv_splits_its_edges(edge_split, threads):
  # 2 images of 64 channels of 40x40 (819 KB, over core.tensor.conv.PAD_IN_PLACE_BYTES): with the device's renderer declaring
  # conv_edge_split the graph reads the padded input in place (one kernel, no padded copy), and znver3's kernel loads through
  # gates only in its first and last output rows (4 of each row's 44 loads) and its mid rows' first and last column tiles
  # (none: their taps in the padding are zeros); the interior (38 rows x 8 tiles of 4 columns) loads plainly
  x, w = rng.standard_normal((2, 64, 40, 40)).astype(np.float32), rng.standard_normal((64, 64, 3, 3)).astype(np.float32)
  item = _item(x, w, 1)
  rnd = CPULLVMRenderer(arch="znver3")
  rnd.threads = threads
  gated = _gated_loads(list(program_uops(get_program(item.ast, rnd))))
  assert sum(g for g, _ in gated.values()) == 8, gated
  interior = [v for k, v in gated.items() if k[-3:] == (38, 8, 64)]
  assert interior and all(g == 0 for g, _ in interior), gated
  bufs, _ = run_item(item, rnd)
  want = _ref(x, w, 1)
  np.testing.assert_allclose(bufs[0].numpy().reshape(want.shape), want, rtol=1e-4, atol=1e-3)

@pytest.mark.parametrize("arch", ["haswell", "znver3"])
@pytest.mark.parametrize("op", ["depthwise", "avg_pool"])
def test_unrolled_window_over_a_large_input_is_not_split(arch, op):
  # a depthwise 3x3 conv and a 3x3 pool at stride 1 pad 1 also reduce gated loads of one input over EDGE_SPLIT_MIN_BYTES, but
  # their taps are unrolled (no reduction loop): split, their kernels failed to linearize ("loops ... are not properly nested")
  x = rng.standard_normal((2, 64, 57, 57)).astype(np.float32)
  xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
  win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))
  if op == "depthwise":
    w = rng.standard_normal((64, 1, 3, 3)).astype(np.float32)
    y, want = Tensor(x).realize().conv2d(Tensor(w).realize(), padding=1, groups=64), np.einsum("nchwij,cij->nchw", win, w[:, 0].astype(np.float64))
  else: y, want = Tensor(x).realize().avg_pool2d(3, stride=1, padding=1), win.mean(axis=(4, 5))
  items, _, _ = create_schedule([y.uop])
  assert len(items) == 1, [it.ast.arg for it in items]
  rnd = CPULLVMRenderer(arch=arch)
  assert rnd.conv_edge_split
  bufs, _ = run_item(items[0], rnd)
  np.testing.assert_allclose(bufs[0].numpy().reshape(want.shape), want, rtol=1e-4, atol=1e-5)
