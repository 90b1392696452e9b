"""A wide reduction (a conv's, a matmul's) that would share its kernel with another reduction over other loops gets a kernel
of its own: the optimizer tiles a kernel for one reduction, and ResNet's max-pool gradient count ran under the conv's tile
in the kernel of the conv's input gradient (66 ms on one thread, against 24 for the conv and 6 for the count's kernel)."""
import numpy as np
from core import Tensor
from core.ir.ops import Ops, UOp
from core.schedule.kernelize import create_schedule
from core.schedule.realize_points import SIBLING_WIDE, SIBLING_MIN_WORK

def kernels(items): return [it for it in items if it.ast.op is Ops.SINK]

def reduce_groups(ast: UOp) -> list[int]:
  """Per REDUCE of a kernel, how many elements it reduces per output (its reduce ranges' product)."""
  return [int(np.prod([r.src[0].arg for r in red.src[1:]])) for red in ast.toposort() if red.op is Ops.REDUCE]

def assert_no_wide_sibling(items):
  for k in kernels(items):
    sizes = reduce_groups(k.ast)
    assert len(sizes) < 2 or max(sizes) < SIBLING_WIDE, f"{k.ast.arg} reduces {sizes} in one kernel"

def test_matmul_next_to_a_window_sum_is_its_own_kernel():
  rng = np.random.default_rng(0)
  a, b, c = (rng.standard_normal(s).astype(np.float32) for s in ((129, 1030), (1030, 67), (129, 67, 3)))
  assert 129 * 67 * 1030 >= SIBLING_MIN_WORK
  out = Tensor(a) @ Tensor(b) + Tensor(c).sum(-1)
  items = create_schedule([out.uop])[0]
  assert len(kernels(items)) == 2   # the matmul, then the sum with the add (one kernel holding both before)
  assert_no_wide_sibling(items)
  np.testing.assert_allclose(out.numpy(), a @ b + c.sum(-1), rtol=1e-4, atol=1e-3)

def test_small_matmul_next_to_a_sum_stays_one_kernel():
  # below SIBLING_MIN_WORK the added kernel's launch costs about what sharing the tiles loses
  rng = np.random.default_rng(3)
  a, b, c = (rng.standard_normal(s).astype(np.float32) for s in ((9, 70), (70, 13), (9, 13, 3)))
  out = Tensor(a) @ Tensor(b) + Tensor(c).sum(-1)
  assert len(kernels(create_schedule([out.uop])[0])) == 1
  np.testing.assert_allclose(out.numpy(), a @ b + c.sum(-1), rtol=1e-5, atol=1e-5)

def test_two_sums_over_the_same_loops_stay_together():
  rng = np.random.default_rng(1)
  x = rng.standard_normal((5, 300)).astype(np.float32)
  t = Tensor(x)
  out = t.sum(1) + (t * t).sum(1)
  assert len(kernels(create_schedule([out.uop])[0])) == 1
  np.testing.assert_allclose(out.numpy(), x.sum(1) + (x * x).sum(1), rtol=1e-4, atol=1e-4)

def _pool(x):
  """3x3 stride-2 max pool with padding 1: the values and each window's argmax (flat index into x's last two dims)."""
  n, c, h, w = x.shape
  xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
  ho, wo = (h - 1) // 2 + 1, (w - 1) // 2 + 1
  out, arg = np.zeros((n, c, ho, wo), x.dtype), np.zeros((n, c, ho, wo), np.int64)
  for i in range(ho):
    for j in range(wo):
      win = xp[:, :, 2 * i:2 * i + 3, 2 * j:2 * j + 3].reshape(n, c, 9)
      k = win.argmax(-1)
      out[:, :, i, j], arg[:, :, i, j] = win.max(-1), (2 * i + k // 3 - 1) * w + (2 * j + k % 3 - 1)
  return out, arg

def _conv_grads(p, w, g):
  """d/dp and d/dw of sum(conv2d(p, w, padding=1) * g)."""
  pp, gp = np.pad(p, ((0, 0), (0, 0), (1, 1), (1, 1))), np.pad(g, ((0, 0), (0, 0), (1, 1), (1, 1)))
  h, wd = p.shape[2:]
  dp, dw = np.zeros_like(p), np.zeros_like(w)
  for ki in range(3):
    for kj in range(3):
      dp += np.einsum("nohw,oc->nchw", gp[:, :, 2 - ki:2 - ki + h, 2 - kj:2 - kj + wd], w[:, :, ki, kj])
      dw[:, :, ki, kj] = np.einsum("nohw,nchw->oc", g, pp[:, :, ki:ki + h, kj:kj + wd])
  return dp, dw

def test_pool_gradient_and_conv_gradient_in_separate_kernels():
  # ResNet's stem pool under its first conv, both differentiated: the pool gradient's window count and the conv's input
  # gradient are two kernels, not one reducing both
  rng = np.random.default_rng(2)
  for shape in ((2, 16, 40, 40), (3, 8, 45, 37)):   # the input gradient reduces >= SIBLING_MIN_WORK elements
    x = rng.standard_normal(shape).astype(np.float32)
    c = shape[1]
    w = rng.standard_normal((64, c, 3, 3)).astype(np.float32)   # the input gradient reduces 64*3*3 >= SIBLING_WIDE per element
    p, arg = _pool(x)
    g = rng.standard_normal((shape[0], 64) + p.shape[2:]).astype(np.float32)
    tx, tw = Tensor(x, requires_grad=True), Tensor(w, requires_grad=True)
    loss = (tx.max_pool2d(3, 2, padding=1).conv2d(tw, padding=1) * Tensor(g)).sum()
    dx, dw = loss.gradient(tx, tw)
    assert_no_wide_sibling(create_schedule([dx.uop, dw.uop])[0])
    dp, dw_ref = _conv_grads(p, w, g)
    dx_ref = np.zeros_like(x).reshape(shape[0], c, -1)
    np.add.at(dx_ref, (np.arange(shape[0])[:, None, None, None], np.arange(c)[None, :, None, None], arg), dp)
    np.testing.assert_allclose(dx.numpy(), dx_ref.reshape(shape), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(dw.numpy(), dw_ref, rtol=1e-4, atol=1e-4)

def test_mean_over_a_conv_reads_the_conv_buffer():
  # a global average pool over a conv (ResNet's head): the conv is its own kernel, with its output loops to tile, and the
  # mean reads its buffer; fused, the conv's output loops were the mean's reduce loops
  rng = np.random.default_rng(5)
  x, w = rng.standard_normal((3, 16, 15, 13)).astype(np.float32), rng.standard_normal((64, 16, 3, 3)).astype(np.float32)
  out = Tensor(x).conv2d(Tensor(w), padding=1).relu().mean((2, 3))
  items = create_schedule([out.uop])[0]
  assert [len(reduce_groups(k.ast)) for k in kernels(items)] == [1, 1]   # the conv, then the mean (one kernel holding both before)
  xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
  conv = sum(np.einsum("nchw,oc->nohw", xp[:, :, i:i + 15, j:j + 13], w[:, :, i, j]) for i in range(3) for j in range(3))
  np.testing.assert_allclose(out.numpy(), np.maximum(conv, 0).mean((2, 3)), rtol=1e-4, atol=1e-4)
