"""conv2d backward: the weight gradient (conv._weight_grad: a product with the output channels innermost, summed over batch and
pixels) and the input gradient, against numpy at several shapes (stride 1 and 2, padding, groups, batch 1, odd sizes). The
weight gradient's kernel, as the heuristic optimizes it on AVX2-like and AVX-512-like renderers: results, and its output
channels in vectors (a matmul's columns) with each load of dY reused across several outputs."""
from __future__ import annotations
import numpy as np
import pytest
from core import Tensor
from core.ir.ops import Ops, AxisType
from core.schedule.kernelize import create_schedule
from core.tensor import conv
from core.codegen.opt import Kernel
from core.codegen.opt.heuristic import hand_coded
from core.codegen.program import program_uops
from opt_helpers import run_ast, host_renderer

rng = np.random.default_rng(11)

def _windows(xp: np.ndarray, kh: int, kw: int, stride: int) -> np.ndarray:
  """(n, c, oh, ow, kh, kw) windows of the padded input."""
  return np.lib.stride_tricks.sliding_window_view(xp, (kh, kw), axis=(2, 3))[:, :, ::stride, ::stride]

def _grads_ref(x: np.ndarray, w: np.ndarray, g: np.ndarray, stride: int, pad: int, groups: int) -> tuple[np.ndarray, np.ndarray]:
  """(dL/dx, dL/dw) of L = sum(conv2d(x, w) * g), in float64."""
  n, c, h, wd = x.shape
  o, cg, kh, kw = w.shape
  xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
  win = _windows(xp, kh, kw, stride)
  oh, ow = win.shape[2:4]
  gg = g.astype(np.float64).reshape(n, groups, o // groups, oh, ow)
  dw = np.einsum("ngohw,ngchwij->gocij", gg, win.reshape(n, groups, cg, oh, ow, kh, kw)).reshape(w.shape)
  # dx: each output pixel's gradient spread back over the window it read
  cols = np.einsum("ngohw,gocij->ngchwij", gg, w.astype(np.float64).reshape(groups, o // groups, cg, kh, kw)).reshape(n, c, oh, ow, kh, kw)
  dxp = np.zeros_like(xp)
  for i in range(kh):
    for j in range(kw): dxp[:, :, i:i + stride * oh:stride, j:j + stride * ow:stride] += cols[:, :, :, :, i, j]
  return dxp[:, :, pad:pad + h, pad:pad + wd], dw

CASES = [  # (batch, channels in, size, channels out, kernel, stride, padding, groups)
  (2, 8, 16, 8, 3, 1, 1, 1),      # rows of 16: whole vectors along the image rows
  (1, 4, 13, 6, 3, 1, 1, 1),      # batch 1, odd size
  (2, 6, 15, 8, 3, 2, 1, 1),      # stride 2, odd size
  (1, 8, 12, 8, 3, 1, 1, 4),      # groups
  (2, 4, 7, 8, 3, 1, 1, 1),       # 7x7 images (ResNet's last stage): rows too short for a vector
  (1, 3, 21, 4, 7, 2, 3, 1),      # the stem: 7x7 stride 2
  (2, 8, 10, 4, 1, 2, 0, 1),      # a 1x1 stride-2 downsample
]

@pytest.mark.parametrize("n, c, hw, o, k, stride, pad, groups", CASES)
def test_conv_grads_match_numpy(n, c, hw, o, k, stride, pad, groups):
  x = rng.standard_normal((n, c, hw, hw)).astype(np.float32)
  w = rng.standard_normal((o, c // groups, k, k)).astype(np.float32)
  tx, tw = Tensor(x, requires_grad=True), Tensor(w, requires_grad=True)
  y = tx.conv2d(tw, stride=stride, padding=pad, groups=groups)
  g = rng.standard_normal(y.shape).astype(np.float32)
  (y * Tensor(g)).sum().backward()
  assert tx.grad is not None and tw.grad is not None
  want_dx, want_dw = _grads_ref(x, w, g, stride, pad, groups)
  np.testing.assert_allclose(tw.grad.numpy(), want_dw, rtol=1e-4, atol=1e-3)
  np.testing.assert_allclose(tx.grad.numpy(), want_dx, rtol=1e-4, atol=1e-3)

@pytest.mark.parametrize("simd_bytes", [32, 64])
@pytest.mark.parametrize("n, c, hw, o, k, stride", [(2, 8, 18, 8, 3, 1), (1, 4, 34, 12, 3, 1), (2, 6, 9, 16, 3, 1), (1, 4, 35, 32, 3, 2),
                                                    (1, 3, 23, 16, 7, 2), (2, 8, 7, 24, 1, 1)])
def test_weight_grad_kernel(simd_bytes, n, c, hw, o, k, stride):
  # the weight's gradient is a product with the output channels innermost (conv._weight_grad): dY copied to (n, h, w, o), the
  # sum stored as (c, kh, kw, o) (per image first when the images are big), so the heuristic gives it vectors along o like a
  # matmul's columns
  x = rng.standard_normal((n, c, hw, hw)).astype(np.float32)
  w = rng.standard_normal((o, c, k, k)).astype(np.float32)
  oh = (hw - k) // stride + 1
  g = rng.standard_normal((n, o, oh, oh)).astype(np.float32)
  tw = Tensor(w, requires_grad=True).realize()
  (gw,) = (Tensor(x).realize().conv2d(tw, stride=stride) * Tensor(g).realize()).sum().gradient(tw)
  items, _, _ = create_schedule([gw.uop])
  reds = [i for i, it in enumerate(items) if any(u.op is Ops.REDUCE for u in it.ast.toposort())]
  # many pixels per image into a small weight: a partial sum per image first, then the images' sum
  assert len(reds) == (2 if n > 1 and c * k * k <= conv.PARTIALS_PER_DY * oh * oh else 1), [it.ast.arg for it in items]
  for i, it in enumerate(items):
    if i != reds[0]: got, _ = run_ast(it, it.ast)   # the dY copy, the images' sum, the permuted copy gradient() realizes
    else:
      kern = hand_coded(Kernel(it.ast, host_renderer(simd_bytes)))
      _, spec = run_ast(it, kern.ast, kern.renderer)
  np.testing.assert_allclose(got.reshape(w.shape), _grads_ref(x, w, g, stride, 0, 1)[1], rtol=1e-4, atol=1e-3)
  uops = program_uops(spec)
  # stored (and dY loaded) as vectors along o, several output rows (c, kh, kw) per dY load
  stores = [u for u in uops if u.op is Ops.STORE and u.src[0].op is Ops.INDEX and u.src[0].src[0].op is Ops.PARAM]
  assert stores and all(u.src[1].dtype.count >= 4 for u in stores), [u.src[1].dtype for u in stores]
  ups = [r.src[0].arg for r in kern.axes if r.arg[1] is AxisType.UPCAST]
  # (not yet the 7x7 stem's on AVX-512, one vector of o: its rows 3x7x7 take no register reuse, no tile amount divides 7)
  if not (k == 7 and o == simd_bytes // 4): assert len(ups) >= 2 and np.prod(ups) >= 8, kern.applied
