"""A 3x3 conv whose output rows hold an odd number of whole vectors (AVX2's 56 = 7 x 8) takes the channel tile with 16 vector
registers (heuristic.CHANNEL_ODD_ROWS): 2 vectors along the output channels x a block of 4 pixels broadcast from the input, where
the row tile held one vector along the row (4 channels x 2 rows: a weight broadcast per 2 FMAs). Sources at AVX2 and AVX-512
widths (rendered, not run); results against numpy from the kernels this host runs. Only the host LLVM renderer takes it
(Renderer.odd_row_channel_tile): the C renderer's source ran slower."""
from __future__ import annotations
import numpy as np
import pytest
from cpu_kernels import host_like_renderer
from core import Tensor
from core.schedule.kernelize import create_schedule
from core.codegen.opt import Kernel, OptOps
from core.codegen.opt.heuristic import hand_coded
from core.codegen.program import get_program, program_source
import core.codegen.opt.heuristic as heuristic

def _ast(n: int, c: int, hw: int, o: int, stride: int = 1):
  x, w = Tensor(np.zeros((n, c, hw, hw), np.float32)), Tensor(np.zeros((o, c, 3, 3), np.float32))
  return create_schedule([x.conv2d(w, stride=stride, padding=1).uop])[0][-1].ast

def _opts(ren: str, simd_bytes: int, ast) -> list:
  return list(hand_coded(Kernel(ast, host_like_renderer(ren, simd_bytes))).applied)

def _source(ren: str, simd_bytes: int, ast) -> str:
  rnd = host_like_renderer(ren, simd_bytes)   # a renderer of its own each time: programs are cached by renderer
  return program_source(get_program(hand_coded(Kernel(ast, rnd)).ast, rnd, optimize=False))

@pytest.mark.parametrize("shape", [(2, 64, 56, 64), (1, 32, 24, 16), (2, 16, 40, 32)], ids=["56", "24", "40"])
def test_avx2_odd_whole_vector_rows_take_two_channel_vectors_by_four_pixels(shape, monkeypatch):
  # (the window unrolled: with it left as loops the tile is wider, tests/codegen/opt/test_conv_tap_loops.py)
  monkeypatch.setattr(heuristic, "CHANNEL_TAP_LOOPS", False)
  applied = _opts("LLVM", 32, _ast(*shape))
  # the output channels in 8 lanes and 2 vectors, then 4 pixels of the row: 8 accumulators, the weights packed
  assert [o.amt for o in applied if o.op is OptOps.UPCAST] == [8, 2, 4], applied
  assert any(o.op is OptOps.PACK for o in applied), applied

@pytest.mark.parametrize("shape", [(2, 64, 56, 64), (2, 16, 40, 32)], ids=["56", "40"])
def test_the_c_renderer_keeps_the_row_tile(shape, monkeypatch):
  ast = _ast(*shape)
  new = _source("C", 32, ast)
  monkeypatch.setattr(heuristic, "CHANNEL_ODD_ROWS", False)
  assert _source("C", 32, ast) == new

# AVX-512 (32 registers): 56 is no whole number of its vectors, 48 three; AVX2: 48 is an even number of vectors, and 8 output
# channels hold no 2 vectors
OTHERS = [(64, (2, 64, 56, 64)), (64, (2, 64, 48, 64)), (32, (2, 64, 48, 64)), (32, (2, 16, 56, 8))]

@pytest.mark.parametrize("simd_bytes,shape", OTHERS, ids=["AVX-512 56", "AVX-512 48", "AVX2 48", "AVX2 8 channels"])
def test_other_rows_and_renderers_render_as_without_the_rule(simd_bytes, shape, monkeypatch):
  ast = _ast(*shape)
  new = _source("LLVM", simd_bytes, ast)
  monkeypatch.setattr(heuristic, "CHANNEL_ODD_ROWS", False)
  assert _source("LLVM", simd_bytes, ast) == new

@pytest.mark.parametrize("ren", ["LLVM"])
def test_strided_and_depthwise_convs_keep_their_tiles(ren, monkeypatch):
  x = Tensor(np.zeros((2, 32, 56, 56), np.float32))
  asts = [_ast(2, 32, 112, 64, stride=2),
          create_schedule([x.conv2d(Tensor(np.zeros((32, 1, 3, 3), np.float32)), padding=1, groups=32).uop])[0][-1].ast]
  new = [_source(ren, 32, a) for a in asts]
  monkeypatch.setattr(heuristic, "CHANNEL_ODD_ROWS", False)
  assert [_source(ren, 32, a) for a in asts] == new

def _reference(x: np.ndarray, w: np.ndarray) -> np.ndarray:
  xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
  hw = x.shape[2]
  cols = np.stack([xp[:, :, i:i + hw, j:j + hw] for i in range(3) for j in range(3)], axis=2)
  return np.einsum("nckhw,ock->nohw", cols, w.reshape(w.shape[0], x.shape[1], 9).astype(np.float64))

@pytest.mark.parametrize("shape", [(2, 64, 56, 64), (3, 16, 24, 32), (1, 8, 40, 16)], ids=["56", "24", "40"])
def test_odd_row_convs_give_numpys_results(shape):
  n, c, hw, o = shape
  rng = np.random.default_rng(7)
  x = rng.standard_normal((n, c, hw, hw), dtype=np.float32)
  w = rng.standard_normal((o, c, 3, 3), dtype=np.float32)
  s, b = rng.standard_normal(o, dtype=np.float32), rng.standard_normal(o, dtype=np.float32)
  ref = _reference(x, w)
  got = Tensor(x).conv2d(Tensor(w), padding=1).numpy()
  np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())
  # with a fused per-channel affine and relu (ResNet's conv-bn-relu kernel)
  fused = (Tensor(x).conv2d(Tensor(w), padding=1) * Tensor(s).reshape(1, o, 1, 1) + Tensor(b).reshape(1, o, 1, 1)).relu().numpy()
  np.testing.assert_allclose(fused, np.maximum(ref * s.reshape(1, o, 1, 1) + b.reshape(1, o, 1, 1), 0), rtol=1e-4,
                             atol=1e-4 * np.abs(ref).max())
