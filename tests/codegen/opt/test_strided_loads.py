"""Strided vector loads (a stride-2 conv reads every second input column): the expander reads whole vectors over the lanes'
span and shuffles, and the heuristic unrolls a strided conv's small window. Masked vector loads and stores (renderers with
masked_vectors): a padded copy's rows padded to whole vectors, the edges' lanes gated one by one. Results against numpy on
AVX2-like (8 float32 lanes) and AVX-512-like (16 lanes) renderers, for the shapes these paths take: odd sizes, padding,
stride 2 and 3, groups, depthwise, batch 1."""
from __future__ import annotations
import numpy as np
import pytest
from core import Tensor
from core.ir.ops import Ops, AxisType
from core.schedule.kernelize import create_schedule
from core.codegen.opt import Kernel
from core.codegen.opt.expander import strided_lanes, MAX_SHUFFLED_STRIDE
from core.codegen.opt.heuristic import hand_coded
from core.codegen.program import program_uops
from opt_helpers import run_ast, host_renderer

rng = np.random.default_rng(7)

@pytest.mark.parametrize("stride", range(2, MAX_SHUFFLED_STRIDE + 1))
@pytest.mark.parametrize("width", [2, 4, 8, 16])
def test_strided_lanes_cover_exactly_the_span(stride, width):
  starts, lanes = strided_lanes(stride, width)
  span = stride * (width - 1) + 1
  # every vector read lies inside the span the lanes cover (none reads past the last lane or before the first)
  assert all(0 <= s <= span - width for s in starts) and starts[-1] == span - width
  assert len(starts) <= stride
  assert [starts[j] + e for j, e in lanes] == [stride * i for i in range(width)]
  assert all(0 <= e < width for _, e in lanes)

def _conv_ref(x: np.ndarray, w: np.ndarray, stride: int, groups: int) -> np.ndarray:
  n, c, h, wd = x.shape
  o, cg, kh, kw = w.shape
  win = np.lib.stride_tricks.sliding_window_view(x, (kh, kw), axis=(2, 3))[:, :, ::stride, ::stride]
  win = win.reshape(n, groups, cg, *win.shape[2:])
  out = np.einsum("ngchwij,gocij->ngohw", win.astype(np.float64), w.reshape(groups, o // groups, cg, kh, kw).astype(np.float64))
  return out.reshape(n, o, *out.shape[-2:])

CASES = [  # (batch, channels in, size, channels out, kernel, stride, groups)
  (1, 16, 58, 8, 3, 1, 1),        # stride 1, rows of 56: a 4x4 tile of 64 lanes with 32 registers, 2x4 with 16
  (2, 8, 30, 4, 3, 1, 1),         # rows of 28: two vectors either way (4 channels fill no channel tile: test_conv_channel_rows)
  (1, 3, 17, 8, 3, 2, 1),         # odd size, batch 1
  (2, 16, 29, 16, 3, 2, 16),      # depthwise stride 2 (MobileNet), odd padded width
  (1, 8, 40, 8, 3, 2, 8),         # depthwise, an output row of 19
  (2, 3, 37, 16, 7, 2, 1),        # the stem: 7x7 stride 2
  (1, 12, 22, 12, 3, 3, 4),       # stride 3, groups
  (1, 4, 70, 4, 3, 2, 4),         # output rows of 34: two whole vectors and a rest
  (1, 8, 57, 8, 3, 2, 8),         # depthwise, rows of 28: padded to whole vectors where the renderer masks the tail
  (2, 3, 61, 8, 7, 2, 1),         # the stem with rows of 28
]

@pytest.mark.parametrize("simd_bytes", [32, 64])
@pytest.mark.parametrize("n, c, hw, o, k, stride, groups", CASES)
def test_strided_conv_matches_numpy(simd_bytes, n, c, hw, o, k, stride, groups):
  x = rng.standard_normal((n, c, hw, hw)).astype(np.float32)
  w = rng.standard_normal((o, c // groups, k, k)).astype(np.float32)
  items, _, _ = create_schedule([Tensor(x).realize().conv2d(Tensor(w).realize(), stride=stride, groups=groups).uop])
  assert len(items) == 1
  k_ = hand_coded(Kernel(items[0].ast, host_renderer(simd_bytes)))
  got, spec = run_ast(items[0], k_.ast, k_.renderer)
  want = _conv_ref(x, w, stride, groups)
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-4)
  # the tile's vector accumulators leave registers for its input vectors (16 on AVX2, 32 on AVX-512)
  accs = np.prod([r.src[0].arg for r in k_.axes if r.arg[1] is AxisType.UPCAST]) // (simd_bytes // 4)
  assert accs <= k_.renderer.simd_regs // 2, (accs, k_.applied)
  # an output row with a vector's worth of lanes (even width) reads the input as whole vectors, not lane by lane
  if want.shape[-1] % 2 == 0:
    x_loads = [u for u in program_uops(spec) if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX and u.src[0].src[0].op is Ops.PARAM and
               u.src[0].src[0].arg == 1]
    assert x_loads and all(u.dtype.count > 1 for u in x_loads), [u.dtype for u in x_loads]
  if any(o.op.name == "PADTO" and o.amt >= 8 for o in k_.applied) and k_.renderer.masked_vectors:
    assert _gated_per_lane(spec, Ops.LOAD)   # a row padded to whole vectors: the padded lanes' elements are masked off, not read

@pytest.mark.parametrize("n, c, hw, o, k, stride, groups, pad", [
  (1, 3, 17, 8, 3, 2, 1, 1), (2, 16, 28, 16, 3, 2, 16, 1), (1, 3, 30, 8, 7, 2, 1, 3), (1, 6, 15, 6, 3, 2, 3, 1),
])
def test_padded_strided_conv_through_tensor(n, c, hw, o, k, stride, groups, pad):
  # the whole path on the default device (its own renderer and host features): the padded copy, then the strided conv
  x = rng.standard_normal((n, c, hw, hw)).astype(np.float32)
  w = rng.standard_normal((o, c // groups, k, k)).astype(np.float32)
  got = Tensor(x).conv2d(Tensor(w), stride=stride, padding=pad, groups=groups).numpy()
  want = _conv_ref(np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad))), w, stride, groups)
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)

def _gated_per_lane(spec, op) -> bool:
  return any(u.op is op and u.src[0].op is Ops.INDEX and len(u.src[0].src) > 2 and u.src[0].src[2].dtype.count > 1 for u in program_uops(spec))

@pytest.mark.parametrize("simd_bytes", [32, 64])
@pytest.mark.parametrize("shape, pads", [((2, 3, 27, 27), (1, 1)), ((1, 5, 21, 37), (3, 3)), ((1, 2, 9, 59), (0, 2)),
                                         ((1, 4, 24, 24), (1, 1)), ((1, 2, 12, 12), (1, 1))])
def test_padded_copy_with_masked_vectors(simd_bytes, shape, pads):
  # the conv's padded input copy: rows of 29, 43, 63, 26 or 14 padded to whole vectors; lanes past the row and the padding's
  # read nothing
  x = rng.standard_normal(shape).astype(np.float32)
  items, _, _ = create_schedule([Tensor(x).realize().pad((None, None, pads, pads)).contiguous().uop])
  assert len(items) == 1
  rnd = host_renderer(simd_bytes)
  k = hand_coded(Kernel(items[0].ast, rnd))
  got, spec = run_ast(items[0], k.ast, rnd)
  want = np.pad(x, ((0, 0), (0, 0), pads, pads))
  np.testing.assert_equal(got.reshape(want.shape), want)
  if rnd.masked_vectors:
    assert any(o.op.name == "PADTO" for o in k.applied), k.applied
    assert _gated_per_lane(spec, Ops.LOAD) and _gated_per_lane(spec, Ops.STORE)

def test_masked_vectors_keep_a_padded_reduction_exact():
  # a padded output axis of a reduction (a row of 29 sums padded to 32): masked lanes store nothing and add nothing
  x = rng.standard_normal((40, 29)).astype(np.float32)
  got = (Tensor(x)[:, None, :] * Tensor(x)[None, :, :]).sum(-1).numpy()
  np.testing.assert_allclose(got, x @ x.T, rtol=1e-4, atol=1e-4)

def test_strided_offset_answers_an_index_once(monkeypatch):
  # the optimizer and the expander ask the same (index, axis) many times a kernel: split and rebuilt once
  import core.ir.symbolic as S
  from core.codegen.opt.expander import strided_offset, _offsets
  from core.ir.ops import UOp
  r, q = UOp.range(8, 0, AxisType.UPCAST), UOp.range(4, 1, AxisType.LOOP)
  idx = q * 24 + r * 3 + 5
  _offsets.clear()
  calls: list = []
  split = S.split_sum
  monkeypatch.setattr(S, "split_sum", lambda x: calls.append(x) or split(x))
  want = (q * 24 + 5, 3)
  assert strided_offset(idx, r) == want and strided_offset(idx, r) == want and len(calls) == 1
  assert strided_offset(idx, q) == (r * 3 + 5, 24) and len(calls) == 2
  # an index using the axis inside another term has no stride along it
  assert strided_offset(idx + r // 2, r) is None and strided_offset(idx + r // 2, r) is None and len(calls) == 3
