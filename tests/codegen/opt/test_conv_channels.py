"""Convs whose output rows hold few vectors (ResNet's late 7x7 and 14x14 stages): the heuristic puts the vectors along the
output channels over a packed weight panel and broadcasts the input along a block of the row. Results against numpy on
AVX2-like (8 float32 lanes, 16 registers) and AVX-512-like (16 lanes, 32 registers) renderers for odd sizes, batch 1, groups,
stride 2 and padding, the tile's shape (its accumulators fit the registers) and that the channel path is taken; and the
whole path through Tensor.conv2d on the default device."""
from __future__ import annotations
import numpy as np
import pytest
from core import Tensor
from core.ir.ops import Ops, AxisType
from core.schedule.kernelize import create_schedule
from core.codegen.opt import Kernel
from core.codegen.opt.heuristic import hand_coded
from core.helpers import prod
from core.codegen.program import program_uops
from opt_helpers import run_ast, host_renderer

rng = np.random.default_rng(23)

def _conv_ref(x: np.ndarray, w: np.ndarray, stride: int, pad: int, groups: int) -> np.ndarray:
  xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
  n, o, (cg, kh, kw) = x.shape[0], w.shape[0], w.shape[1:]
  win = np.lib.stride_tricks.sliding_window_view(xp, (kh, kw), axis=(2, 3))[:, :, ::stride, ::stride]
  win = win.reshape(n, groups, cg, *win.shape[2:])
  out = np.einsum("ngchwij,gocij->ngohw", win, w.reshape(groups, o // groups, cg, kh, kw).astype(np.float64))
  return out.reshape(n, o, *out.shape[-2:])

CASES = [  # (batch, channels in, size, channels out, stride, padding, groups, takes the channel path on 8 / 16 lanes)
  (2, 32, 7, 32, 1, 1, 1, (True, True)),     # ResNet's last stage: rows of 7 hold no vector
  (1, 16, 14, 32, 1, 1, 1, (True, True)),    # batch 1, rows of 14
  (2, 8, 9, 16, 1, 0, 1, (True, True)),      # no padding, odd rows of 7
  (1, 16, 11, 48, 1, 1, 1, (True, True)),    # odd size 11: a row block of 11, three channel vectors' worth
  (2, 16, 14, 32, 2, 1, 1, (True, True)),    # stride 2 (the 14 -> 7 downsample)
  (1, 32, 7, 64, 1, 1, 2, (False, False)),   # groups: the input's channel depends on the output's (o // 32): the row path
  (1, 4, 6, 16, 1, 1, 1, (True, True)),      # rows of 6, one channel block
  (1, 8, 8, 16, 1, 1, 1, (False, True)),     # rows of 8: one whole vector on 8 lanes (the row path); half of 16, whose channel tile takes its rows from the output rows
  (2, 8, 5, 8, 1, 1, 1, (True, False)),      # 8 channels fill no 16-lane vector
]

@pytest.mark.parametrize("simd_bytes", [32, 64])
@pytest.mark.parametrize("n, c, hw, o, stride, pad, groups, channel", CASES)
def test_small_image_conv_matches_numpy(simd_bytes, n, c, hw, o, stride, pad, groups, channel):
  x = rng.standard_normal((n, c, hw, hw)).astype(np.float32)
  w = rng.standard_normal((o, c // groups, 3, 3)).astype(np.float32)
  items, _, _ = create_schedule([Tensor(x).realize().conv2d(Tensor(w).realize(), stride=stride, padding=pad, groups=groups).uop])
  conv = items[-1]   # after the padded input's copy, when there is padding
  rnd = host_renderer(simd_bytes)
  k = hand_coded(Kernel(conv.ast, rnd))
  if pad:
    # the padded copy first, on the same renderer, so the conv reads it
    pk = hand_coded(Kernel(items[0].ast, rnd))
    run_ast(items[0], pk.ast, rnd)
  got, spec = run_ast(conv, k.ast, rnd)
  want = _conv_ref(x, w, stride, pad, groups)
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-3)
  lanes = simd_bytes // 4
  uops = program_uops(spec)
  # the channel path: the packed weight panel read as whole vectors along the channels, the output stored lane by lane (a vector
  # of channels is 16 elements a plane apart) or, AVX-512 LLVM code, as the tile's rows (plugin_cpu.tile_rows: arg "tile row");
  # the row path reads the panel as broadcast scalars
  reg_loads = [u for u in uops if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX and u.src[0].src[0].op is not Ops.PARAM]
  stores = [u for u in uops if u.op is Ops.STORE and u.src[0].op is Ops.INDEX and u.src[0].src[0].op is Ops.PARAM]
  took = bool(reg_loads) and all(u.dtype.count == lanes for u in reg_loads) and \
         all(u.src[1].dtype.count == 1 or u.arg == "tile row" for u in stores)
  assert took == channel[simd_bytes == 64], k.applied
  if took:
    # the accumulators (a block of pixels times the channel vectors), a weight vector per channel vector (the weights' register
    # axes: the copy into the panel reads buffer 2) and the broadcast input fit the registers
    ups = [r for r in k.axes if r.arg[1] is AxisType.UPCAST]
    w_load = next(u for u in k.ast.toposort() if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX and u.src[0].src[0].op is Ops.PARAM and
                  u.src[0].src[0].arg == 2)
    accs = int(np.prod([r.src[0].arg for r in ups])) // lanes
    w_vecs = int(np.prod([r.src[0].arg for r in ups if r in w_load.toposort()])) // lanes
    assert accs + w_vecs + 1 <= rnd.simd_regs and w_vecs >= 1, k.applied

@pytest.mark.parametrize("n, c, hw, o, stride, pad", [(2, 32, 7, 32, 1, 1), (1, 16, 14, 16, 1, 1), (3, 16, 13, 32, 2, 1),
                                                      (1, 3, 9, 16, 1, 0)])
def test_small_image_conv_through_tensor(n, c, hw, o, stride, pad):
  # the default device's own renderer and optimizer, forward and in a small net (conv -> relu -> conv)
  x = rng.standard_normal((n, c, hw, hw)).astype(np.float32)
  w = rng.standard_normal((o, c, 3, 3)).astype(np.float32)
  w2 = rng.standard_normal((o, o, 3, 3)).astype(np.float32)
  y = Tensor(x).conv2d(Tensor(w), stride=stride, padding=pad)
  want = _conv_ref(x, w, stride, pad, 1)
  np.testing.assert_allclose(y.numpy(), want, rtol=1e-4, atol=1e-3)
  got2 = y.relu().conv2d(Tensor(w2), padding=1).numpy()
  np.testing.assert_allclose(got2, _conv_ref(np.maximum(want, 0), w2, 1, 1, 1), rtol=1e-4, atol=1e-2)

@pytest.mark.parametrize("simd_bytes", [32, 64])
def test_per_channel_epilogue_keeps_the_lanes_on_the_row(simd_bytes):
  # a conv with a batchnorm's four parameters per output channel and a relu in its kernel (ResNet's conv-bn-relu): those
  # loads run once per output, the input's once per reduce step, so the lanes stay along the output row (rows of 64: whole
  # vectors; rows of 56 take the channel tile on 16 lanes, test_conv_channel_rows) and do not move to the channels the four
  # parameters are contiguous along
  x = rng.standard_normal((2, 8, 58, 66)).astype(np.float32)
  w = rng.standard_normal((16, 8, 3, 3)).astype(np.float32)
  mean, var, gamma, beta = (rng.standard_normal(16).astype(np.float32) for _ in range(4))
  var = np.abs(var) + 0.5
  ch = [Tensor(v).realize().reshape(1, 16, 1, 1) for v in (mean, var, gamma, beta)]
  y = ((Tensor(x).realize().conv2d(Tensor(w).realize()) - ch[0]) * (ch[2] / ch[1].sqrt()) + ch[3]).relu()
  items, _, _ = create_schedule([y.uop])
  assert len(items) == 1, [it.ast.arg for it in items]
  rnd = host_renderer(simd_bytes)
  k = hand_coded(Kernel(items[0].ast, rnd))
  got, spec = run_ast(items[0], k.ast, rnd)
  c = lambda v: v.astype(np.float64)[None, :, None, None]
  want = np.maximum((_conv_ref(x, w, 1, 0, 1) - c(mean)) * (c(gamma) / np.sqrt(c(var))) + c(beta), 0)
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-3)
  x_loads = [u for u in program_uops(spec) if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX and u.src[0].src[0].op is Ops.PARAM and
             u.src[0].src[0].arg == 1]
  assert x_loads and all(u.dtype.count == simd_bytes // 4 for u in x_loads), [u.dtype for u in x_loads]

@pytest.mark.parametrize("simd_bytes", [32, 64])
@pytest.mark.parametrize("shortcut", ["residual", "conv"])
def test_small_image_conv_with_its_block_epilogue(simd_bytes, shortcut):
  # ResNet's last block on 7x7 images in one kernel: the conv, a per-channel scale, and the shortcut (an input added once per
  # output, or a 1x1 stride-2 conv with a reduction of its own): the channel path still applies (only loads inside a
  # reduction are the product's inputs; each weight's panel holds its own reduction)
  x = rng.standard_normal((2, 16, 9, 9)).astype(np.float32)
  w = rng.standard_normal((32, 16, 3, 3)).astype(np.float32)
  sc = rng.standard_normal(32).astype(np.float32)
  s_in = rng.standard_normal((2, 32, 7, 7) if shortcut == "residual" else (2, 8, 13, 13)).astype(np.float32)
  w2 = rng.standard_normal((32, 8, 1, 1)).astype(np.float32)
  s = Tensor(s_in).realize()
  short = s if shortcut == "residual" else s.conv2d(Tensor(w2).realize(), stride=2)
  y = (Tensor(x).realize().conv2d(Tensor(w).realize()) * Tensor(sc).realize().reshape(1, 32, 1, 1) + short).relu()
  items, _, _ = create_schedule([y.uop])
  assert len(items) == 1, [it.ast.arg for it in items]
  rnd = host_renderer(simd_bytes)
  k = hand_coded(Kernel(items[0].ast, rnd))
  got, spec = run_ast(items[0], k.ast, rnd)
  want_short = s_in.astype(np.float64) if shortcut == "residual" else _conv_ref(s_in, w2, 2, 0, 1)
  want = np.maximum(_conv_ref(x, w, 1, 0, 1) * sc.astype(np.float64)[None, :, None, None] + want_short, 0)
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-3)
  reg_loads = [u for u in program_uops(spec) if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX and u.src[0].src[0].op is not Ops.PARAM]
  assert reg_loads and all(u.dtype.count == simd_bytes // 4 for u in reg_loads), k.applied

@pytest.mark.parametrize("simd_bytes", [32, 64])
@pytest.mark.parametrize("n, c, hw, o, stride", [(2, 32, 7, 32, 1), (2, 32, 14, 32, 1), (2, 16, 14, 32, 2)])
def test_channel_tile_unrolls_the_kernel_rows_where_they_fit(simd_bytes, n, c, hw, o, stride):
  """The channel path unrolls the kernel rows (kh) as well as its columns where the register limit allows (AVX2's tiles of 8
  lanes x 14 pixels: 1008 of MAX_REGISTER_ELEMS), so no loop of 3 is left around the tile; AVX-512's wider tiles keep the loop."""
  from core.codegen.opt.kernel import MAX_REGISTER_ELEMS
  x = rng.standard_normal((n, c, hw, hw)).astype(np.float32)
  w = rng.standard_normal((o, c, 3, 3)).astype(np.float32)
  items, _, _ = create_schedule([Tensor(x).realize().conv2d(Tensor(w).realize(), stride=stride, padding=1).uop])
  rnd = host_renderer(simd_bytes)
  k = hand_coded(Kernel(items[-1].ast, rnd))
  assert any(r.arg[1] is AxisType.UPCAST and r.src[0].arg == simd_bytes // 4 for r in k.axes), k.applied   # the channel path
  left = [r.src[0].arg for r in k.of_type(AxisType.REDUCE)]
  assert k.register_elems() <= MAX_REGISTER_ELEMS and (3 not in left) == (simd_bytes == 32), (k.applied, left)
  run_ast(items[0], hand_coded(Kernel(items[0].ast, rnd)).ast, rnd)
  got, _ = run_ast(items[-1], k.ast, rnd)
  want = _conv_ref(x, w, stride, 1, 1)
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-3)

@pytest.mark.parametrize("simd_bytes", [32, 64])
@pytest.mark.parametrize("stride", [1, 2])
def test_channel_tile_takes_a_second_image_only_where_it_fits_the_registers(simd_bytes, stride):
  """A channel tile of 7 pixels x one vector (AVX2) takes no second image: 14 accumulators beside the 3 kernel columns' weight
  vectors and the broadcast need 18 of 16 registers and spill (one Zen 3 thread: 8x512x7x7 faster with 7); nor at stride 2, where
  a kernel row of 7 pixels reads 15 inputs (21.4 -> 13.5 ms, ResNet's 8x256x14x14 -> 512 3x3/2). AVX-512's tile holds 2
  vectors x 7 either way."""
  x = rng.standard_normal((2, 16, 7 * stride, 7 * stride)).astype(np.float32)
  w = rng.standard_normal((32, 16, 3, 3)).astype(np.float32)
  items, _, _ = create_schedule([Tensor(x).realize().conv2d(Tensor(w).realize(), stride=stride, padding=1).uop])
  rnd = host_renderer(simd_bytes)
  k = hand_coded(Kernel(items[-1].ast, rnd))
  lanes = simd_bytes // 4
  accs = prod(r.src[0].arg for r in k.of_type(AxisType.UPCAST)) // lanes
  assert accs == (14 if simd_bytes == 64 else 7), k.applied
  for it in items[:-1]: run_ast(it, hand_coded(Kernel(it.ast, rnd)).ast, rnd)
  got, _ = run_ast(items[-1], k.ast, rnd)
  want = _conv_ref(x, w, stride, 1, 1)
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-3)

@pytest.mark.parametrize("simd_bytes", [64])   # on 8 lanes the row of 7 pads to one vector instead (test_narrow_tile)
def test_strided_1x1_conv_with_short_rows_takes_the_channel_tile(simd_bytes):
  """A 1x1 conv at stride 2 onto 7x7 (ResNet's last shortcut): no window, and its pixels can't merge into a longer row; the
  channel tile (vectors along the output channels, the 7 pixels in registers) instead of 7 columns run scalar (7.1 -> 2.9 ms
  on one Zen 3 thread for 8x256x14x14 -> 512)."""
  x = rng.standard_normal((2, 32, 14, 14)).astype(np.float32)
  w = rng.standard_normal((32, 32, 1, 1)).astype(np.float32)
  items, _, _ = create_schedule([Tensor(x).realize().conv2d(Tensor(w).realize(), stride=2).uop])
  rnd = host_renderer(simd_bytes)
  k = hand_coded(Kernel(items[-1].ast, rnd))
  sizes = [r.src[0].arg for r in k.of_type(AxisType.UPCAST)]
  assert simd_bytes // 4 in sizes and 7 in sizes, k.applied
  for it in items[:-1]: run_ast(it, hand_coded(Kernel(it.ast, rnd)).ast, rnd)
  got, _ = run_ast(items[-1], k.ast, rnd)
  want = _conv_ref(x, w, 2, 0, 1)
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-3)
