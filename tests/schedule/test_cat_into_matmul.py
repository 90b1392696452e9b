"""A concatenation (a sum of padded parts: cat, and the gradient of chunk/split) that a matmul broadcasts is realized once
(realize_points.GATE_COST) instead of being recomputed, with a gated load per part, in the matmul's inner loop. A single
padded buffer (a conv's padded input) and a small padded elementwise value stay fused. Counts come from the schedule,
values from numpy."""
import numpy as np
import pytest
from core import Tensor
from core.ir.ops import Ops, UOp
from core.schedule.kernelize import create_schedule
from core.schedule.realize_points import find_realize_points

def kernels(*ts: Tensor) -> list:
  return [it for it in create_schedule([t.uop for t in ts])[0] if it.ast.op is Ops.SINK]

def pads_in(ast) -> int:
  """Loads behind a gate (a PAD's valid range) in a kernel: an INDEX with a condition."""
  return sum(1 for u in ast.toposort() if u.op is Ops.INDEX and len(u.src) > 2)

@pytest.mark.parametrize("n,parts,k", [(64, (16, 24, 8), 32), (7, (5, 3, 9), 13), (33, (1, 1, 1), 5)])
def test_cat_into_matmul_is_realized(n, parts, k):
  rng = np.random.default_rng(0)
  xs = [rng.standard_normal((n, p)).astype(np.float32) for p in parts]
  w = rng.standard_normal((sum(parts), k)).astype(np.float32)
  ts = [Tensor(x).realize() for x in xs]
  out = (ts[0] * 2).cat(ts[1] * 3, ts[2] + 1, dim=1) @ Tensor(w).realize()
  ks = kernels(out)
  assert len(ks) == 2   # the concatenation, then the matmul reading it as a plain buffer
  assert pads_in(ks[-1].ast) == 0
  want = np.concatenate([xs[0] * 2, xs[1] * 3, xs[2] + 1], axis=1).astype(np.float64) @ w
  np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-4)

def test_chunk_gradient_is_realized_once():
  """GPT-2's qkv projection: the gradient of the chunked output is a sum of three padded gradients, read by the input's
  and the weight's gradient (two matmuls) and the bias's sum: one kernel computes it, the matmuls read its buffer."""
  rng = np.random.default_rng(1)
  t, d = 12, 10
  x_np, w_np = rng.standard_normal((t, d)).astype(np.float32), rng.standard_normal((3 * d, d)).astype(np.float32)
  b_np = rng.standard_normal(3 * d).astype(np.float32)
  x, w, b = (Tensor(a.copy(), requires_grad=True) for a in (x_np, w_np, b_np))
  q, k, v = x.linear(w.T, b).chunk(3, dim=-1)
  loss = ((q * k).sum(-1, keepdim=True) * v).sum()
  gx, gw, gb = loss.gradient(x, w, b)
  cat = [p for p in find_realize_points(UOp(Ops.SINK, src=(gx.uop, gw.uop, gb.uop)))
         if p.op is Ops.ADD and p.shape == (t, 3 * d) and sum(1 for u in p.toposort() if u.op is Ops.PAD) >= 3]
  assert len(cat) == 1
  assert all(pads_in(it.ast) == 0 for it in kernels(gx, gw) if any(u.op is Ops.REDUCE for u in it.ast.toposort()))
  # numpy: y = x @ w.T + b, q k v its thirds, loss = sum_t (q_t . k_t) * sum(v_t)
  y = x_np.astype(np.float64) @ w_np.T + b_np
  qn, kn, vn = y[:, :d], y[:, d:2 * d], y[:, 2 * d:]
  s, vs = (qn * kn).sum(-1, keepdims=True), vn.sum(-1, keepdims=True)
  gy = np.concatenate([kn * vs, qn * vs, np.broadcast_to(s, vn.shape)], axis=1)
  np.testing.assert_allclose(gx.numpy(), gy @ w_np, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(gw.numpy(), gy.T @ x_np, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(gb.numpy(), gy.sum(0), rtol=1e-4, atol=1e-4)

def test_padded_buffer_into_conv_stays_fused():
  """A conv reads its padded input in place: one PAD of a buffer is a movement of it, not a value to realize."""
  rng = np.random.default_rng(2)
  x, w = rng.standard_normal((2, 3, 9, 9)).astype(np.float32), rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
  out = Tensor(x).realize().conv2d(Tensor(w).realize(), padding=1)
  assert len(kernels(out)) == 1

def test_small_padded_elementwise_stays_fused():
  """One padded part and a few ALU ops cost less than a buffer round trip: still fused into the matmul."""
  rng = np.random.default_rng(3)
  a, w = rng.standard_normal((8, 6)).astype(np.float32), rng.standard_normal((9, 5)).astype(np.float32)
  out = (Tensor(a).realize().pad(((0, 0), (0, 3))) * 2 + 1) @ Tensor(w).realize()
  assert len(kernels(out)) == 1
  want = (np.pad(a, ((0, 0), (0, 3))).astype(np.float64) * 2 + 1) @ w
  np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-4)
