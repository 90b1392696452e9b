"""Elementwise Tensor ops against numpy: forward on random and edge-case shapes, backward against numerical derivatives."""
from __future__ import annotations
import math
import numpy as np
import pytest
from core.tensor.tensor import Tensor
from core.ir.dtype import dtypes, to_np
from core.testing.helpers import check_op, rng
from core.testing.capabilities import dtype_params, requires_dtype

SHAPES = [(), (1,), (0,), (3, 4), (2, 1, 5)]

def _np_sigmoid(x): return 1 / (1 + np.exp(-x))
def _np_softplus(x): return np.log1p(np.exp(-np.abs(x))) + np.maximum(x, 0)

UNARY = {
  "neg": (lambda t: -t, lambda x: -x, (-2, 2)),
  "exp": (Tensor.exp, np.exp, (-2, 2)),
  "exp2": (Tensor.exp2, np.exp2, (-2, 2)),
  "log": (Tensor.log, np.log, (0.1, 3)),
  "log2": (Tensor.log2, np.log2, (0.1, 3)),
  "sqrt": (Tensor.sqrt, np.sqrt, (0.1, 3)),
  "rsqrt": (Tensor.rsqrt, lambda x: 1 / np.sqrt(x), (0.1, 3)),
  "sin": (Tensor.sin, np.sin, (-3, 3)),
  "cos": (Tensor.cos, np.cos, (-3, 3)),
  "tan": (Tensor.tan, np.tan, (-1.2, 1.2)),
  "reciprocal": (Tensor.reciprocal, lambda x: 1 / x, (0.5, 3)),
  "abs": (Tensor.abs, np.abs, (-2, 2)),
  "square": (Tensor.square, np.square, (-2, 2)),
  "relu": (Tensor.relu, lambda x: np.maximum(x, 0), (-2, 2)),
  "leaky_relu": (lambda t: t.leaky_relu(0.1), lambda x: np.where(x < 0, 0.1 * x, x), (-2, 2)),
  "elu": (Tensor.elu, lambda x: np.where(x > 0, x, np.exp(x) - 1), (-2, 2)),
  "gelu": (Tensor.gelu, lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3))), (-3, 3)),
  "quick_gelu": (Tensor.quick_gelu, lambda x: x * _np_sigmoid(1.702 * x), (-3, 3)),
  "silu": (Tensor.silu, lambda x: x * _np_sigmoid(x), (-3, 3)),
  "swish": (Tensor.swish, lambda x: x * _np_sigmoid(x), (-3, 3)),
  "sigmoid": (Tensor.sigmoid, _np_sigmoid, (-4, 4)),
  "tanh": (Tensor.tanh, np.tanh, (-3, 3)),
  "softplus": (Tensor.softplus, _np_softplus, (-4, 4)),
  "mish": (Tensor.mish, lambda x: x * np.tanh(_np_softplus(x)), (-3, 3)),
  "hardswish": (Tensor.hardswish, lambda x: x * np.clip(x + 3, 0, 6) / 6, (-5, 5)),
  "hardtanh": (Tensor.hardtanh, lambda x: np.clip(x, -1, 1), (-2, 2)),
}

@pytest.mark.parametrize("name", sorted(UNARY))
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_unary(name, shape):
  tf, nf, (lo, hi) = UNARY[name]
  check_op([shape], tf, nf, low=lo, high=hi)

@pytest.mark.parametrize("name", ["exp", "sin", "relu", "sigmoid", "sqrt"])
def test_unary_non_contiguous(name):
  tf, nf, (lo, hi) = UNARY[name]
  check_op([(3, 5)], tf, nf, low=lo, high=hi, permute_inputs=True)

BINARY = {
  "add": (lambda a, b: a + b, np.add),
  "sub": (lambda a, b: a - b, np.subtract),
  "mul": (lambda a, b: a * b, np.multiply),
  "div": (lambda a, b: a / b, np.divide),
  "maximum": (Tensor.maximum, np.maximum),
  "minimum": (Tensor.minimum, np.minimum),
  "pow": (lambda a, b: a.abs() ** b, lambda a, b: np.abs(a) ** b),
}

@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.parametrize("shapes", [((3, 4), (3, 4)), ((3, 1), (1, 4)), ((4,), (2, 3, 4)), ((), (2, 3)), ((0, 3), (1, 3)), ((1,), (1,))], ids=str)
def test_binary(name, shapes):
  tf, nf = BINARY[name]
  inputs = None
  if name == "div":  # keep the divisor away from 0
    r = rng(1)
    inputs = [r.uniform(-2, 2, shapes[0]).astype(np.float32), (r.uniform(0.5, 2, shapes[1]) * r.choice([-1, 1], shapes[1])).astype(np.float32)]
  if name == "pow":
    r = rng(2)
    inputs = [r.uniform(0.5, 2, shapes[0]).astype(np.float32), r.uniform(-2, 2, shapes[1]).astype(np.float32)]
  check_op(shapes, tf, nf, inputs=inputs)

def test_binary_non_contiguous():
  check_op([(4, 3), (4, 3)], lambda a, b: a * b + a, lambda a, b: a * b + a, permute_inputs=True)

@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "rsub", "rdiv"])
def test_scalar_ops(op):
  fns = {"add": (lambda t: t + 2.5, lambda x: x + 2.5), "sub": (lambda t: t - 1.5, lambda x: x - 1.5), "mul": (lambda t: t * 3, lambda x: x * 3),
         "div": (lambda t: t / 4, lambda x: x / 4), "rsub": (lambda t: 1 - t, lambda x: 1 - x), "rdiv": (lambda t: 2 / t, lambda x: 2 / x)}
  check_op([(3, 3)], *fns[op], low=0.5, high=2)

def test_scalar_is_weak():
  assert (Tensor([1, 2], dtype=dtypes.int8) + 1).dtype is dtypes.int8
  assert (Tensor([1, 2], dtype=dtypes.float16) * 2.0).dtype is dtypes.float16
  assert (Tensor([1, 2], dtype=dtypes.int32) * 1.5).dtype is dtypes.default_float
  assert (Tensor([True, False]) + 1).dtype is dtypes.default_int
  np.testing.assert_allclose((Tensor([1, 2], dtype=dtypes.int32) * 1.5).numpy(), [1.5, 3.0])
  np.testing.assert_equal((Tensor([127], dtype=dtypes.int8) + 1).numpy(), np.array([-128], np.int8))

def test_promotion():
  a, b = Tensor([1, 2], dtype=dtypes.int8), Tensor([1, 2], dtype=dtypes.uint8)
  assert (a + b).dtype is dtypes.int16
  assert (Tensor([1.0], dtype=dtypes.float16) + Tensor([1], dtype=dtypes.int32)).dtype is dtypes.float16
  assert (Tensor([1.0], dtype=dtypes.float32) + Tensor([1.0], dtype=dtypes.float16)).dtype is dtypes.float32
  assert (Tensor([1, 2]) / Tensor([2, 4])).dtype is dtypes.default_float
  np.testing.assert_allclose((Tensor([1, 2]) / Tensor([2, 4])).numpy(), [0.5, 0.5])

def test_broadcast_error():
  with pytest.raises(ValueError, match="broadcast"): Tensor.ones(3, 4) + Tensor.ones(5)

INT_DTYPES = [dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.int32, dtypes.uint32, dtypes.int64]

@pytest.mark.parametrize("dt", dtype_params(INT_DTYPES))
def test_int_floordiv_mod(dt):
  r = rng(3)
  lo = 0 if dtypes.is_unsigned(dt) else -50
  a = r.integers(lo, 50, size=(5, 7)).astype(to_np(dt))
  b = r.integers(1, 9, size=(5, 7)).astype(to_np(dt))
  if not dtypes.is_unsigned(dt): b = b * r.choice(np.array([-1, 1], dtype=to_np(dt)), size=b.shape)
  ta, tb = Tensor(a), Tensor(b)
  np.testing.assert_equal((ta // tb).numpy(), a // b)
  np.testing.assert_equal((ta % tb).numpy(), a % b)
  np.testing.assert_equal((ta + tb).numpy(), a + b)
  np.testing.assert_equal((ta * tb).numpy(), a * b)
  np.testing.assert_equal((ta - tb).numpy(), a - b)
  assert (ta // tb).dtype is dt

def test_float_floordiv_mod():
  check_op([(4, 4)], lambda t: t // 0.7, lambda x: np.floor_divide(x, 0.7), grad=False)
  check_op([(4, 4)], lambda t: t % 0.7, lambda x: np.mod(x, 0.7), grad=False, atol=1e-5)

@pytest.mark.parametrize("dt", dtype_params(INT_DTYPES + [dtypes.bool]))
def test_bitwise(dt):
  r = rng(4)
  if dt is dtypes.bool: a, b = r.integers(0, 2, (6,)).astype(bool), r.integers(0, 2, (6,)).astype(bool)
  else:
    a = r.integers(0 if dtypes.is_unsigned(dt) else -100, 100, (6,)).astype(to_np(dt))
    b = r.integers(0, 100, (6,)).astype(to_np(dt))
  ta, tb = Tensor(a), Tensor(b)
  np.testing.assert_equal((ta & tb).numpy(), a & b)
  np.testing.assert_equal((ta | tb).numpy(), a | b)
  np.testing.assert_equal((ta ^ tb).numpy(), a ^ b)
  np.testing.assert_equal((~ta).numpy(), ~a)
  np.testing.assert_equal(ta.logical_not().numpy(), np.logical_not(a))

@pytest.mark.parametrize("dt", dtype_params([dtypes.int32, dtypes.uint8, dtypes.uint32, dtypes.int64]))
def test_shifts(dt):
  a = np.array([1, 3, 7, 100, 0], dtype=to_np(dt))
  np.testing.assert_equal((Tensor(a) << 2).numpy(), a << 2)
  np.testing.assert_equal((Tensor(a) >> 1).numpy(), a >> 1)

@pytest.mark.parametrize("dt", dtype_params([dtypes.float32, dtypes.int32, dtypes.uint8, dtypes.float16, dtypes.int8]))
def test_comparisons(dt):
  r = rng(5)
  a = (r.integers(0, 5, (4, 5))).astype(to_np(dt))
  b = (r.integers(0, 5, (4, 5))).astype(to_np(dt))
  ta, tb = Tensor(a), Tensor(b)
  for tf, nf in [(lambda x, y: x < y, np.less), (lambda x, y: x > y, np.greater), (lambda x, y: x <= y, np.less_equal),
                 (lambda x, y: x >= y, np.greater_equal), (lambda x, y: x == y, np.equal), (lambda x, y: x != y, np.not_equal)]:
    out = tf(ta, tb)
    assert out.dtype is dtypes.bool
    np.testing.assert_equal(out.numpy(), nf(a, b))
  np.testing.assert_equal((ta < 2).numpy(), a < 2)

def test_where():
  check_op([(3, 4), (3, 4)], lambda a, b: (a > 0).where(a, b), lambda a, b: np.where(a > 0, a, b))
  check_op([(3, 1), (4,)], lambda a, b: (a > b).where(a * 2, b), lambda a, b: np.where(a > b, a * 2, b))
  np.testing.assert_equal(Tensor([True, False]).where(1, 2).numpy(), [1, 2])
  np.testing.assert_allclose(Tensor([True, False]).where(Tensor([1.5, 2.5]), 0).numpy(), [1.5, 0.0])

def test_clip_and_sign():
  check_op([(5, 5)], lambda t: t.clip(-0.5, 0.7), lambda x: np.clip(x, -0.5, 0.7))
  check_op([(5, 5)], lambda t: t.sign(), np.sign, grad=False)
  np.testing.assert_equal(Tensor([-3, 0, 5]).sign().numpy(), [-1, 0, 1])
  np.testing.assert_equal(Tensor([-3, 0, 5], dtype=dtypes.int8).abs().numpy(), [3, 0, 5])

def test_rounding():
  x = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, -0.7, 0.7, 1.2, -1.2, 2.0, 0.0], dtype=np.float32)
  t = Tensor(x)
  np.testing.assert_equal(t.round().numpy(), np.round(x))  # half to even
  np.testing.assert_equal(t.floor().numpy(), np.floor(x))
  np.testing.assert_equal(t.ceil().numpy(), np.ceil(x))
  np.testing.assert_equal(t.trunc().numpy(), np.trunc(x))
  check_op([(3, 3)], lambda t: t.floor() * t, lambda x: np.floor(x) * x, grad_atol=2e-3)

def test_int_pow():
  a = np.array([-3, -1, 0, 2, 5], dtype=np.int32)
  np.testing.assert_equal((Tensor(a) ** 3).numpy(), a ** 3)
  assert (Tensor(a) ** 3).dtype is dtypes.int32
  np.testing.assert_allclose((Tensor([-2.0, 2.0, 0.0]) ** 3.0).numpy(), [-8.0, 8.0, 0.0])
  np.testing.assert_allclose((2 ** Tensor([0.0, 1.0, 3.0])).numpy(), [1.0, 2.0, 8.0], rtol=1e-6)
  np.testing.assert_allclose((Tensor([4.0, 9.0]) ** 0.5).numpy(), [2.0, 3.0], rtol=1e-6)
  assert math.isnan((Tensor([-2.0]) ** 0.5).item())

CASTS = [(dtypes.float32, dtypes.int32), (dtypes.int32, dtypes.float32), (dtypes.float32, dtypes.float16), (dtypes.int8, dtypes.int32),
         (dtypes.int32, dtypes.int8), (dtypes.float32, dtypes.bool), (dtypes.bool, dtypes.float32), (dtypes.uint8, dtypes.float32),
         (dtypes.float64, dtypes.float32)]

@pytest.mark.parametrize("src,dst", [pytest.param(s, d, marks=requires_dtype(s, d), id=f"{s.name}-{d.name}") for s, d in CASTS])
def test_cast(src, dst):
  x = np.array([-3.7, -1.0, 0.0, 0.5, 2.2, 100.9], dtype=np.float64)
  if dtypes.is_unsigned(src): x = np.abs(x)
  a = x.astype(to_np(src))
  np.testing.assert_equal(Tensor(a).cast(dst).numpy(), a.astype(to_np(dst)))

def test_bitcast():
  a = np.array([1.0, -2.5, 0.0], dtype=np.float32)
  np.testing.assert_equal(Tensor(a).bitcast(dtypes.uint32).numpy(), a.view(np.uint32))
  np.testing.assert_equal(Tensor(a.view(np.int32)).bitcast(dtypes.float32).numpy(), a)
  with pytest.raises(ValueError, match="itemsize"): Tensor(a).bitcast(dtypes.int8)

def test_isnan_isinf():
  a = np.array([1.0, np.nan, np.inf, -np.inf], dtype=np.float32)
  np.testing.assert_equal(Tensor(a).isnan().numpy(), np.isnan(a))
  np.testing.assert_equal(Tensor(a).isinf().numpy(), np.isinf(a))

_np_erf = np.vectorize(math.erf, otypes=[np.float64])

def test_erf_gelu_exact():
  check_op([(4, 5)], Tensor.erf, _np_erf, low=-3, high=3)
  x = np.linspace(-6, 6, 241).astype(np.float32)
  np.testing.assert_allclose(Tensor(x).erf().numpy(), _np_erf(x.astype(np.float64)), rtol=5e-7, atol=2e-7)   # float32 accuracy
  np.testing.assert_allclose(Tensor([1e-6, -3e-4]).erf().numpy(), _np_erf(np.array([1e-6, -3e-4])), rtol=1e-6)
  check_op([(3, 4)], lambda t: t.gelu(approximate="none"), lambda x: 0.5 * x * (1 + _np_erf(x / np.sqrt(2))), low=-3, high=3)
  with pytest.raises(ValueError, match="gelu: approximate must be .* got 'fast'"): Tensor([1.0]).gelu(approximate="fast")

def test_copysign_logaddexp():
  check_op([(3, 4), (3, 4)], lambda a, b: a.copysign(b), np.copysign)
  np.testing.assert_equal(Tensor([1.0, -2.0, 3.0, 4.0]).copysign(Tensor([-0.0, 0.0, -np.inf, np.inf])).numpy(), [-1.0, 2.0, -3.0, 4.0])
  check_op([(3, 4), (1, 4)], lambda a, b: a.logaddexp(b), np.logaddexp, low=-5, high=5)
  a = np.array([-np.inf, -np.inf, 1000.0, -1000.0, np.inf, np.nan], np.float32)
  b = np.array([-np.inf, 0.0, 1000.0, -1001.0, 1.0, 0.0], np.float32)
  with np.errstate(invalid="ignore"): want = np.logaddexp(a, b)
  np.testing.assert_allclose(Tensor(a).logaddexp(Tensor(b)).numpy(), want, rtol=1e-6)

def test_isclose():
  a = np.array([1.0, 1.0, 1e-9, np.inf, np.inf, -np.inf, np.nan, np.nan, 100.0], np.float32)
  b = np.array([1.0 + 1e-6, 1.1, 0.0, np.inf, 1e38, np.inf, np.nan, 1.0, 100.001], np.float32)
  np.testing.assert_equal(Tensor(a).isclose(Tensor(b)).numpy(), np.isclose(a, b))
  np.testing.assert_equal(Tensor(a).isclose(Tensor(b), equal_nan=True).numpy(), np.isclose(a, b, equal_nan=True))
  np.testing.assert_equal(Tensor(a).isclose(Tensor(b), rtol=0.2, atol=0.5).numpy(), np.isclose(a, b, rtol=0.2, atol=0.5))
  assert Tensor([1.0, 2.0]).allclose(Tensor([1.0, 2.0 + 1e-7])).item()

def test_div_rounding_mode():
  check_op([(3, 4), (3, 4)], lambda a, b: a.div(b, rounding_mode="trunc"), lambda a, b: np.trunc(a / b), grad=False)
  check_op([(3, 4), (3, 4)], lambda a, b: a.div(b, rounding_mode="floor"), lambda a, b: np.floor(a / b), grad=False)
  a, b = np.array([7, -7, 7, -7, 0], np.int32), np.array([2, 2, -2, -2, 3], np.int32)
  np.testing.assert_equal(Tensor(a).div(Tensor(b), rounding_mode="trunc").numpy(), np.trunc(a / b).astype(np.int32))
  np.testing.assert_equal(Tensor(a).div(Tensor(b), rounding_mode="floor").numpy(), a // b)
  assert Tensor(a).div(Tensor(b), rounding_mode="floor").dtype is dtypes.int32 and Tensor(a).div(Tensor(b)).dtype is dtypes.float32
  with pytest.raises(RuntimeError, match="div: rounding_mode must be .* got 'typo'"): Tensor(a).div(2, rounding_mode="typo")

def test_special_values():
  x = np.array([-np.inf, -2.0, -0.0, 0.0, 2.0, np.inf, np.nan], np.float32)
  t = Tensor(x)
  with np.errstate(all="ignore"):
    np.testing.assert_equal(t.abs().numpy(), np.abs(x))
    np.testing.assert_equal(t.sign().numpy(), np.sign(x))
    np.testing.assert_equal(t.relu().numpy(), np.where(np.isnan(x), np.nan, np.maximum(x, 0)))
    np.testing.assert_allclose(t.sigmoid().numpy(), _np_sigmoid(x.astype(np.float64)), rtol=1e-6)
    np.testing.assert_allclose(t.softplus().numpy(), _np_softplus(x.astype(np.float64)), rtol=1e-6)
    np.testing.assert_allclose(t.erf().numpy(), _np_erf(x.astype(np.float64)), rtol=1e-6)
    for approximate in ("tanh", "none"):
      got = t.gelu(approximate=approximate).numpy()
      np.testing.assert_allclose(got[[0, 5, 6]], [0.0, np.inf, np.nan])

def test_pow_fmod_special_values():
  b = np.array([0.0, -2.0, -2.0, 2.0, 0.5, 2.0, -1.0, 1.0, -np.inf, 1.0, 0.0, np.nan, -np.inf, -np.inf, -np.inf], np.float32)
  e = np.array([0.0, 0.5, 3.0, np.inf, np.inf, -np.inf, np.inf, np.nan, 3.0, -np.inf, -1.0, 0.0, 0.3, 3.3, -3.0], np.float32)
  with np.errstate(all="ignore"): want = np.power(b, e)
  np.testing.assert_allclose((Tensor(b) ** Tensor(e)).numpy(), want, rtol=1e-6)   # 0**0, 1**nan, (-1)**inf, (-2)**0.5, ...
  t = Tensor([-1.5, 0.7, 0.0, 2.0])
  (g,) = (t ** 5.5).sum().gradient(t)   # NaN only where the value is NaN; x**0 has gradient 0 even at a zero base
  np.testing.assert_allclose(g.numpy(), [np.nan, 5.5 * 0.7 ** 4.5, 0.0, 5.5 * 2.0 ** 4.5], rtol=1e-5)
  (g,) = (t ** Tensor([0.0, 0.0, 0.0, 0.0])).sum().gradient(t)
  np.testing.assert_equal(g.numpy(), [0.0, 0.0, 0.0, 0.0])
  a = np.array([5.0, -5.0, np.inf, 7.5, -7.5, 0.0], np.float32)
  d = np.array([np.inf, -np.inf, 2.0, 2.0, 2.0, 3.0], np.float32)
  with np.errstate(all="ignore"): want = np.fmod(a, d)
  np.testing.assert_equal(Tensor(a).fmod(Tensor(d)).numpy(), want)

def test_inverse_trig():
  check_op([(3, 5)], Tensor.atan, np.arctan, low=-4, high=4)
  check_op([(3, 5)], Tensor.asin, np.arcsin, low=-0.95, high=0.95)
  check_op([(3, 5)], Tensor.acos, np.arccos, low=-0.95, high=0.95)
  x = np.array([-1e30, -300.0, -1.0, -0.0, 1e-7, 1.0, 300.0, np.inf, -np.inf], np.float32)
  np.testing.assert_allclose(Tensor(x).atan().numpy(), np.arctan(x.astype(np.float64)), rtol=1e-6, atol=1e-7)
  np.testing.assert_allclose(Tensor([-1.0, 1.0]).asin().numpy(), [-np.pi / 2, np.pi / 2], rtol=1e-6)
  assert np.isnan(Tensor([1.5]).asin().item()) and np.isnan(Tensor([-1.5]).acos().item())

def test_extreme_gradients_and_clip_bounds():
  check_op([(2, 3)], Tensor.sigmoid, _np_sigmoid, low=-400, high=-300)   # exp(-x) would overflow: no NaN value or gradient
  check_op([(2, 3)], Tensor.sigmoid, _np_sigmoid, low=300, high=400)
  check_op([(2, 3)], Tensor.tanh, np.tanh, low=-303, high=-300, grad_atol=1e-6)
  check_op([(2, 3)], lambda t: t.gelu(), lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3))), low=-400, high=-300)
  t = Tensor([-3.0, -2.5, 0.0, 1.5, 2.0])
  t.clip(-2.5, 1.5).sum().backward()
  np.testing.assert_equal(t.grad.numpy(), [0.0, 1.0, 1.0, 1.0, 0.0])   # 1 at the bounds, as torch
  np.testing.assert_equal(Tensor([-1.0, 5.0]).clip(3, 0).numpy(), [0.0, 0.0])   # min > max: max wins

def test_shift_by_tensor():
  a = np.array([-8, 5, -2**31, 7], np.int32)
  s = np.array([1, 2, 1, 0], np.int32)
  np.testing.assert_equal((Tensor(a) << Tensor(s)).numpy(), a << s)
  np.testing.assert_equal((Tensor(a) >> Tensor(s)).numpy(), a >> s)
  np.testing.assert_equal((3 << Tensor(s)).numpy(), 3 << s)
  with pytest.raises(RuntimeError, match="shifts need int tensors, got dtypes.float32"): Tensor([1.0]) << 2
