"""A conv's register tile (a vector of channels per output column, NCHW: each channel's columns are neighbours) is stored row by
row in AVX-512 code: the column vectors transposed in registers and each channel's row written as one vector under a constant
mask (plugin_cpu.tile_rows), where it was a scalar store per lane. The rows' addresses step from one index (renderer.lane_indices).
Results match numpy's."""
import re
import numpy as np
import pytest
from cpu_kernels import AVX512, host_like_renderer, run_item
from core import Tensor
from core.ir.ops import Ops
from core.schedule.kernelize import create_schedule
from plugin_cpu.renderer import host_flags

def _conv_item(x: np.ndarray, w: np.ndarray):
  (item,) = [it for it in create_schedule([Tensor(x).conv2d(Tensor(w), padding=1).relu().uop])[0] if it.ast.op is Ops.SINK]
  return item

def _avx512_source(x: np.ndarray, w: np.ndarray) -> str:
  """The conv's source for an AVX-512 target, on any host (the rule keys on avx512f, not the host)."""
  from core.codegen.program import get_program, program_source
  rnd = host_like_renderer("LLVM", 64, threads=0)
  rnd.target(AVX512)
  return program_source(get_program(_conv_item(x, w).ast, rnd))

def _ref(x: np.ndarray, w: np.ndarray) -> np.ndarray:
  n, c, h, wd = x.shape
  p = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
  out = sum(np.einsum("nchw,oc->nohw", p[:, :, i:i + h, j:j + wd], w[:, :, i, j]) for i in range(3) for j in range(3))
  return np.maximum(out, 0)

def test_a_conv_tile_is_stored_as_masked_rows_from_one_index():
  src = _avx512_source(np.zeros((1, 16, 7, 7), np.float32), np.zeros((16, 16, 3, 3), np.float32))
  # a tile of 16 channels by 7 columns: a masked row store per channel (7 of 8 lanes on), no store per lane
  assert "store float" not in src, src
  rows = re.findall(r"call void @llvm.masked.store.v8f32.p0\(<8 x float> %\w+, ptr (%\w+), i32 4, <8 x i1> <([^>]*)>\)", src)
  assert len(rows) == 16 and all(m.count("true") == 7 for _, m in rows), src
  # each row's address is the buffer at one index plus a constant (the channel's plane: 49 floats)
  offs = sorted(int(o) for p, o in re.findall(r"(%\w+) = getelementptr float, ptr %t\d+, i64 (\d+)", src) if p in {r[0] for r in rows})
  assert offs == [49 * k for k in range(1, 16)], offs

@pytest.mark.parametrize("shape", [(1, 16, 7, 7), (2, 32, 14, 14)])
def test_conv_tiles_give_numpys_values(shape):
  r = np.random.default_rng(7)
  x, w = r.standard_normal(shape).astype(np.float32), r.standard_normal((shape[1], shape[1], 3, 3)).astype(np.float32)
  simd = 64 if "avx512f" in host_flags() else 32
  bufs, src = run_item(_conv_item(x, w), host_like_renderer("LLVM", simd, threads=0))
  if simd == 64: assert "store float" not in src and "@llvm.masked.store.v8f32" in src
  np.testing.assert_allclose(bufs[0].numpy().reshape(shape), _ref(x, w), rtol=1e-4, atol=1e-4)

def test_a_tile_of_more_vectors_than_half_the_registers_keeps_its_lane_stores():
  # 16 channels by 21 columns: 21 vectors to transpose beside 32 registers (a 28-vector tile spilled its accumulators)
  src = _avx512_source(np.zeros((1, 16, 21, 21), np.float32), np.zeros((16, 16, 3, 3), np.float32))
  assert "store float" in src   # its lane stores
  assert "@llvm.masked.store.v8f32" not in src

def test_a_tiles_two_squares_are_transposed_in_whole_registers(monkeypatch):
  # 16 channels by 7 (8) pixels: two 8 x 8 squares side by side in each 16-lane column, swapped in zmm registers together
  # (transpose_rows side_by_side): 8 x 3 swaps of two 16-lane registers where the squares one at a time took twice as many
  # of two 8-lane halves (22 and 44 here; the weight panel's
  # transposes, the same either way, are counted in both)
  import plugin_cpu.tile_rows as TR
  shapes = (np.zeros((1, 16, 7, 7), np.float32), np.zeros((16, 16, 3, 3), np.float32))
  def swaps(n: int) -> int:
    return len(re.findall(rf"shufflevector <{n} x float> %\w+, <{n} x float> %\w+, <{n} x i32>", _avx512_source(*shapes)))
  on = swaps(16), swaps(8)
  monkeypatch.setattr(TR, "SIDE_BY_SIDE", False)
  more16, fewer8 = on[0] - swaps(16), swaps(8) - on[1]
  assert 20 <= more16 <= 24 and fewer8 == 2 * more16, (more16, fewer8)

@pytest.mark.parametrize("shape", [(1, 32, 7, 7), (2, 16, 14, 14)])
def test_side_by_side_tiles_give_numpys_values(monkeypatch, shape):
  import plugin_cpu.tile_rows as TR
  r = np.random.default_rng(11)
  x, w = r.standard_normal(shape).astype(np.float32), r.standard_normal((shape[1], shape[1], 3, 3)).astype(np.float32)
  simd = 64 if "avx512f" in host_flags() else 32
  for on in (True, False):
    monkeypatch.setattr(TR, "SIDE_BY_SIDE", on)
    bufs, _ = run_item(_conv_item(x, w), host_like_renderer("LLVM", simd, threads=0))
    np.testing.assert_allclose(bufs[0].numpy().reshape(shape), _ref(x, w), rtol=1e-4, atol=1e-4)
