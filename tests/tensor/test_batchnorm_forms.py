"""Tensor.batchnorm computes (x - mean) * weight * invstd + bias as (x - m) * scale + shift (m the detached mean), the form
BatchNorm uses in training and eval: values and the gradients of all five inputs against float64 references (numpy's closed
forms, BatchNorm's too, in training and eval, float32 and half), and the backward reading the output gradient in two sums."""
import numpy as np
import pytest
from core import Tensor
from core.ir.dtype import dtypes
from core.ir.ops import Ops
from core.schedule.kernelize import create_schedule
from core.tensor.nn.layers import BatchNorm

RNG = np.random.default_rng(11)

def _inputs(shape: tuple[int, ...], c: int) -> list[np.ndarray]:
  x = (RNG.standard_normal(shape) * 2 + 1).astype(np.float32)
  w, b, m = (RNG.standard_normal(c).astype(np.float32) for _ in range(3))
  return [x, w, b, m, RNG.uniform(0.5, 2, c).astype(np.float32), RNG.standard_normal(shape).astype(np.float32)]

@pytest.mark.parametrize("shape,axis", [((4, 3, 5, 6), 1), ((6, 5), 1), ((2, 3, 4), 2), ((2, 3, 4, 5), (1, 2))])
@pytest.mark.parametrize("affine", [True, False])
def test_values_and_all_five_gradients(shape, axis, affine):
  axes = (axis,) if isinstance(axis, int) else axis
  cs = tuple(shape[a] for a in axes)
  x, w, b, m, s, g = _inputs(shape, int(np.prod(cs)))
  w, b, m, s = (a.reshape(cs) for a in (w, b, m, s))
  tx, tw, tb, tm, ts = (Tensor(a, requires_grad=True) for a in (x, w, b, m, s))
  out = tx.batchnorm(tw if affine else None, tb if affine else None, tm, ts, axis=axis)
  grads = (out * Tensor(g)).sum().gradient(*((tx, tw, tb, tm, ts) if affine else (tx, tm, ts)))
  lay = tuple(n if i in axes else 1 for i, n in enumerate(shape))
  red = tuple(i for i in range(len(shape)) if i not in axes)
  x64, g64, m64, s64 = (a.astype(np.float64) for a in (x, g, m, s))
  w64, b64 = (w.astype(np.float64), b.astype(np.float64)) if affine else (np.ones(cs), np.zeros(cs))
  xc = x64 - m64.reshape(lay)
  np.testing.assert_allclose(out.numpy(), xc * (w64 * s64).reshape(lay) + b64.reshape(lay), rtol=1e-5, atol=1e-5)
  want = {"x": g64 * (w64 * s64).reshape(lay), "w": (g64 * xc).sum(red) * s64, "b": g64.sum(red), "m": -g64.sum(red) * w64 * s64,
          "s": (g64 * xc).sum(red) * w64}
  names = ["x", "w", "b", "m", "s"] if affine else ["x", "m", "s"]
  for n, got in zip(names, grads):
    np.testing.assert_allclose(got.numpy(), want[n].reshape(got.shape), rtol=1e-4, atol=1e-4, err_msg=n)

def test_invstd_broadcast_against_x_as_is():
  # an invstd that is not per channel (a scalar, or x's own shape) is used as it is, as before
  x, w, b, m, _, _ = _inputs((2, 3, 4), 3)
  for s in (np.float32(0.7), RNG.uniform(0.5, 2, (2, 3, 4)).astype(np.float32)):
    out = Tensor(x).batchnorm(Tensor(w), Tensor(b), Tensor(m), Tensor(s)).numpy()
    want = (x.astype(np.float64) - m.reshape(1, 3, 1)) * w.reshape(1, 3, 1) * s + b.reshape(1, 3, 1)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)

def test_backward_reads_the_output_gradient_in_two_sums():
  # sum(g) (bias and mean) and sum(g * (x - m)) (weight and invstd); the plain form took one sum of g for each of the four
  x, g = Tensor.empty(4, 8, 16, 16, requires_grad=True), Tensor.empty(4, 8, 16, 16)
  w, b, m, s = (Tensor.empty(8, requires_grad=True) for _ in range(4))
  grads = (x.batchnorm(w, b, m, s) * g).sum().gradient(x, w, b, m, s)
  items, _, _ = create_schedule([t.uop for t in grads])
  assert sum(1 for it in items if g.uop.base in it.bufs and any(u.op is Ops.REDUCE for u in it.ast.toposort())) == 2

def _batchnorm_layer_ref(x, w, b, rm, rv, g, training: bool, eps: float = 1e-5):
  """BatchNorm2d's output and the gradients of x, weight and bias (float64 closed forms): in training the batch's mean and
  biased variance, whose dependence on x adds two per-channel sums to dx; in eval the running statistics, constants."""
  axes = (0, 2, 3)
  mean, var = (x.mean(axes), x.var(axes)) if training else (rm, rv)
  c = (1, -1, 1, 1)
  invstd = 1 / np.sqrt(var + eps)
  xhat = (x - mean.reshape(c)) * invstd.reshape(c)
  gw, gb = (g * xhat).sum(axes), g.sum(axes)
  gxhat = g * w.reshape(c)
  if training:
    n = x.size // x.shape[1]
    gx = invstd.reshape(c) / n * (n * gxhat - gxhat.sum(axes, keepdims=True) - xhat * (gxhat * xhat).sum(axes, keepdims=True))
  else: gx = gxhat * invstd.reshape(c)
  return xhat * w.reshape(c) + b.reshape(c), gx, gw, gb

@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("half", [False, True], ids=["float32", "half"])
def test_batchnorm_layer_matches_float64(training, half):
  x, w, b, rm, rv, g = _inputs((4, 6, 7, 5), 6)
  dt = dtypes.float16 if half else dtypes.float32
  bn = BatchNorm(6)
  bn.weight, bn.bias = Tensor(w, dtype=dt, requires_grad=True), Tensor(b, dtype=dt, requires_grad=True)
  bn.running_mean, bn.running_var = Tensor(rm, dtype=dt, requires_grad=False), Tensor(rv, dtype=dt, requires_grad=False)
  # the reference in float64 on the inputs as rounded to the tested dtype
  want = _batchnorm_layer_ref(*(a.astype(np.float16 if half else np.float32).astype(np.float64) for a in (x, w, b, rm, rv, g)), training)
  xt = Tensor(x, dtype=dt, requires_grad=True)
  with Tensor.train(training):
    out = bn(xt)
    gx, gw, gb = (out * Tensor(g, dtype=dt)).sum().gradient(xt, bn.weight, bn.bias)
  tol = {"rtol": 2e-2, "atol": 2e-2} if half else {"rtol": 1e-4, "atol": 1e-4}
  np.testing.assert_allclose(out.numpy().astype(np.float64), want[0], **tol)
  for got, ref in zip((gx, gw, gb), want[1:]):
    scale = max(1.0, float(np.abs(ref).max())) if half else 1.0   # half: summed gradients are large, compared relative to their scale
    np.testing.assert_allclose(got.numpy().astype(np.float64) / scale, ref / scale, **tol)
