"""BatchNorm in training: the batch statistics, running statistics, output and gradients against numpy; the statistics'
kernels reading each (sample, channel) row in place (no row of the reduction crosses samples: no index division); the
backward's two per-channel sums of the output gradient."""
import numpy as np
import pytest
from core import Tensor
from core.ir.ops import Ops
from core.schedule.kernelize import create_schedule
from core.tensor.nn.layers import BatchNorm

SHAPES = [(6, 5), (4, 3, 7), (2, 4, 9, 11), (2, 3, 4, 5, 6), (2, 4, 130, 130)]   # the last: 33800 elements per channel

def _data(shape: tuple[int, ...]) -> np.ndarray:
  rng = np.random.default_rng(len(shape))
  return (rng.standard_normal(shape) * 3 + rng.standard_normal((1, shape[1]) + (1,) * (len(shape) - 2)) * 5).astype(np.float32)

@pytest.mark.parametrize("shape", SHAPES)
def test_training_stats_output_and_running(shape):
  x = _data(shape)
  axes = tuple(i for i in range(x.ndim) if i != 1)
  bn = BatchNorm(shape[1])
  bn.weight.assign(Tensor(np.linspace(0.5, 2, shape[1], dtype=np.float32)))
  bn.bias.assign(Tensor(np.linspace(-1, 1, shape[1], dtype=np.float32)))
  with Tensor.train():
    mean, var = bn.calc_stats(Tensor(x))
    out = bn(Tensor(x))
    out.realize()
  x64 = x.astype(np.float64)
  m, v = x64.mean(axes), x64.var(axes)
  np.testing.assert_allclose(mean.numpy(), m, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(var.numpy(), v, rtol=1e-5, atol=1e-5)
  c = (1, -1) + (1,) * (x.ndim - 2)
  want = (x64 - m.reshape(c)) / np.sqrt(v.reshape(c) + 1e-5) * np.linspace(0.5, 2, shape[1]).reshape(c) + np.linspace(-1, 1, shape[1]).reshape(c)
  np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-4)
  n = x.size // shape[1]
  np.testing.assert_allclose(bn.running_mean.numpy(), 0.1 * m, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(bn.running_var.numpy(), 0.9 + 0.1 * v * n / (n - 1), rtol=1e-5, atol=1e-6)

@pytest.mark.parametrize("shape", SHAPES[:4])
def test_training_gradients(shape):
  x, g = _data(shape), np.random.default_rng(7).standard_normal(shape).astype(np.float32)
  axes = tuple(i for i in range(x.ndim) if i != 1)
  bn = BatchNorm(shape[1])
  xt = Tensor(x, requires_grad=True)
  with Tensor.train():
    loss = (bn(xt) * Tensor(g)).sum()
    gx, gw, gb = loss.gradient(xt, bn.weight, bn.bias)
  c = (1, -1) + (1,) * (x.ndim - 2)
  x64, g64 = x.astype(np.float64), g.astype(np.float64)
  xhat = (x64 - x64.mean(axes).reshape(c)) / np.sqrt(x64.var(axes).reshape(c) + 1e-5)
  # d/dx of (x - mean) * invstd with batch statistics (weight 1): invstd * (g - mean(g) - xhat * mean(g * xhat))
  want_gx = (g64 - g64.mean(axes).reshape(c) - xhat * (g64 * xhat).mean(axes).reshape(c)) / np.sqrt(x64.var(axes).reshape(c) + 1e-5)
  np.testing.assert_allclose(gx.numpy(), want_gx, rtol=1e-3, atol=1e-4)
  np.testing.assert_allclose(gw.numpy(), (g64 * xhat).sum(axes), rtol=1e-4, atol=1e-3)
  np.testing.assert_allclose(gb.numpy(), g64.sum(axes), rtol=1e-4, atol=1e-3)

def test_stats_kernels_have_no_index_division():
  # 8x16x112x112: one reduction over (0, 2, 3) is split into rows of 512 that cross the 12544 elements of a sample
  x = Tensor.empty(8, 16, 112, 112)
  with Tensor.train(): mean, var = BatchNorm(16).calc_stats(x)
  items, _, _ = create_schedule([mean.uop, var.uop])
  reads = [it for it in items if it.ast.op is Ops.SINK and any(u.op is Ops.REDUCE for u in it.ast.toposort())]
  assert reads and sum(u.op in (Ops.IDIV, Ops.MOD) for it in reads for u in it.ast.toposort()) == 0

def test_backward_reads_the_output_gradient_in_two_sums():
  # sum(g) (bias and mean) and sum(g * (x - mean)) (weight and variance); through the plain form weight, bias, mean
  # and invstd each took a sum of g of its own
  bn, x, g = BatchNorm(8), Tensor.empty(4, 8, 16, 16, requires_grad=True), Tensor.empty(4, 8, 16, 16)
  with Tensor.train(): gx, gw, gb = (bn(x) * g).sum().gradient(x, bn.weight, bn.bias)
  items, _, _ = create_schedule([gx.uop, gw.uop, gb.uop])
  assert sum(1 for it in items if g.uop.base in it.bufs and any(u.op is Ops.REDUCE for u in it.ast.toposort())) == 2
