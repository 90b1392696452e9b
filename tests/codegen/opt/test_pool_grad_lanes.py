"""A padded max pool's gradient (ResNet's stem pool, 3x3 stride 2 padding 1) reads dY[(w + kw - 1)//2] under the gate 0 < w + kw:
trunc(-1/2) kept that division after any split of w, so the kernel ran scalar (26 ms of the one-thread ResNet-18 step).
symbolic.index_given_gate makes the quotient nonnegative under its gate, and heuristic._undivide splits w (and h) by the
stride, unrolls the window and puts the lanes on w's outer part: no div/mod left in any address, vector loads. Results
against numpy on AVX2 and AVX-512 renderers."""
from __future__ import annotations
import numpy as np
import pytest
from core.ir.ops import Ops
from core.codegen.opt import Kernel, OptOps
from core.codegen.opt.heuristic import hand_coded
from core.codegen.opt.expander import expand_kernel
from opt_helpers import run_ast, host_renderer

def _pool_grad_item(shape: tuple[int, ...], rng: np.random.Generator):
  from core import Tensor
  from core.schedule.kernelize import create_schedule
  x = rng.standard_normal(shape).astype(np.float32)
  xt = Tensor(x, requires_grad=True).realize()
  y = xt.max_pool2d(kernel_size=3, stride=2, padding=1)
  g = rng.standard_normal(y.shape).astype(np.float32)
  gx = (y * Tensor(g).realize()).sum().gradient(xt)[0]
  items, _, _ = create_schedule([gx.uop])
  return x, g, items

def _pool_grad_np(x: np.ndarray, g: np.ndarray) -> np.ndarray:
  n, c, h, w = x.shape
  xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
  out = np.zeros_like(xp)
  for i in range(g.shape[2]):
    for j in range(g.shape[3]):
      win = xp[:, :, 2 * i:2 * i + 3, 2 * j:2 * j + 3]
      out[:, :, 2 * i:2 * i + 3, 2 * j:2 * j + 3] += (win == win.max(axis=(2, 3), keepdims=True)) * g[:, :, i:i + 1, j:j + 1]
  return out[:, :, 1:-1, 1:-1]

@pytest.mark.parametrize("simd_bytes", [32, 64])
@pytest.mark.parametrize("hw", [16, 64, 112])
def test_pool_grad_vectorized_without_division(simd_bytes, hw):
  rng = np.random.default_rng(hw)
  x, g, items = _pool_grad_item((2, 3, hw, hw), rng)
  rnd = host_renderer(simd_bytes)
  item = items[-1]
  from core.codegen.opt.kernel import range_size
  assert [range_size(r) for r in Kernel(item.ast, rnd).axes][-4:-2] == [hw, hw], item.ast.arg
  for it in items[:-1]: run_ast(it, hand_coded(Kernel(it.ast, rnd)).ast, rnd)   # the forward pool the gradient reads
  k = hand_coded(Kernel(item.ast, rnd))
  ups = [o.amt for o in k.applied if o.op is OptOps.UPCAST]
  assert ups[:2] == [2, 2] and ups[2] == (simd_bytes // 4 if hw // 2 % (simd_bytes // 4) == 0 else 8), k.applied
  sink = expand_kernel(k.ast, vectorize=True, masked=rnd.masked_vectors)
  idxs = [u for u in sink.toposort() if u.op is Ops.INDEX]
  assert not any(n.op in (Ops.IDIV, Ops.MOD) for i in idxs for s in i.src[1:] for n in s.toposort()), "a div/mod left in an address"
  assert any(u.op is Ops.LOAD and u.dtype.count == ups[2] for u in sink.toposort())
  got, _ = run_ast(item, k.ast, rnd)
  np.testing.assert_allclose(got.reshape(x.shape), _pool_grad_np(x, g), rtol=1e-6, atol=1e-6)
