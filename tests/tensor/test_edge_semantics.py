"""Edge cases where core once differed from tinygrad and PyTorch (found by tools/tinygrad_compat): pow's gradient at zero
and infinite bases and zero exponents, var/std with no degrees of freedom left, the error an unknown dtype name raises,
and linear interpolation of uint8 images. Expected values come from numpy or from the definitions, written out."""
from __future__ import annotations
import math, warnings
import numpy as np
import pytest
from core.tensor.tensor import Tensor
from core.ir.dtype import dtypes

# *** pow: torch's gradient, d/db = e * b**(e-1) (0 where e == 0), d/de = b**e * ln(b) (0 where b == 0 and e >= 0) ***

def _pow_grads(b: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  with np.errstate(all="ignore"):
    db = np.where(e == 0, 0.0, e * np.power(b, e - 1))
    de = np.where((b == 0) & (e >= 0), 0.0, np.power(b, e) * np.log(b))
  return db.astype(np.float32), de.astype(np.float32)

SPECIAL = [-math.inf, -2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 3.0, math.inf]

def test_pow_tensor_gradients_at_special_points():
  b, e = (a.ravel().astype(np.float32) for a in np.meshgrid(SPECIAL, [-2.0, -1.0, -0.3, 0.0, 0.3, 1.0, 2.0, 3.3]))
  tb, te = Tensor(b), Tensor(e)
  gb, ge = (tb ** te).sum().gradient(tb, te)
  want_b, want_e = _pow_grads(b, e)
  np.testing.assert_allclose(gb.numpy(), want_b, rtol=1e-5)   # nan where numpy's is nan, inf where it is inf
  np.testing.assert_allclose(ge.numpy(), want_e, rtol=1e-5)
  with np.errstate(all="ignore"): np.testing.assert_allclose((tb ** te).numpy(), np.power(b, e), rtol=1e-5)

@pytest.mark.parametrize("c", [0.3, -0.3, 3.3, -1.5])
def test_pow_const_exponent_gradient(c: float):
  b = np.array(SPECIAL, dtype=np.float32)
  t = Tensor(b)
  (g,) = (t ** c).sum().gradient(t)
  np.testing.assert_allclose(g.numpy(), _pow_grads(b, np.full_like(b, c))[0], rtol=1e-5)

def test_pow_const_base_gradient():
  e = np.array([-2.0, -1.0, 0.0, 1.0, 2.0, 3.0], dtype=np.float32)
  for base in (0.0, 0.7, -2.0):
    t = Tensor(e)
    (g,) = (base ** t).sum().gradient(t)
    np.testing.assert_allclose(g.numpy(), _pow_grads(np.full_like(e, base), e)[1], rtol=1e-5)   # 0**-2: -inf; (-2)**y: nan

def test_pow_gradient_reaches_through_backward():
  b = Tensor([0.0, 2.0], requires_grad=True)
  (b ** 0.5).sum().backward()
  np.testing.assert_allclose(b.grad.numpy(), [math.inf, 0.5 / math.sqrt(2)], rtol=1e-6)

# *** var/std with correction >= the number of elements: divide by max(0, n - correction), as numpy ***

@pytest.mark.parametrize("axis,correction", [((0, 3), 1), ((0, 4), 5), ((0, 4), 7), ((0, 3), 0), ((1, 4), 9)])
def test_var_std_without_degrees_of_freedom(axis, correction):
  x = np.random.default_rng(3).uniform(-2, 2, (1, 2, 3, 1, 5)).astype(np.float32)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", RuntimeWarning)
    want_var, want_std = np.var(x, axis=axis, ddof=correction), np.std(x, axis=axis, ddof=correction)
  np.testing.assert_allclose(Tensor(x).var(axis, correction=correction).numpy(), want_var, rtol=1e-5)
  np.testing.assert_allclose(Tensor(x).std(axis, correction=correction).numpy(), want_std, rtol=1e-5)

def test_var_of_one_element_has_nan_gradient():
  t = Tensor([3.0])
  (g,) = t.var().gradient(t)   # 0/0 in value and gradient, as torch
  assert np.isnan(t.var().item()) and np.isnan(g.numpy()).all()

# *** an unknown dtype name: a ValueError that is also the AttributeError tinygrad raises ***

def test_unknown_dtype_name_error_types():
  for f in (lambda: Tensor([1.0, 2.0]).sum(dtype=""), lambda: Tensor([1.0]).cast("float33"), lambda: Tensor([1.0]).prod(dtype="x")):
    with pytest.raises(AttributeError, match="unknown dtype"): f()
    with pytest.raises(ValueError, match="unknown dtype"): f()

# *** uint8 linear interpolation: per axis, last first, in fixed point, rounded half up ***

def _uint8_linear_reference(x: np.ndarray, size: tuple[int, ...], align_corners: bool = False) -> np.ndarray:
  """The rule written out in numpy: for each resized axis from the last, weights (1-w, w) of the two neighbours, rounded to
  `bits` fractional bits (the most that keep the largest weight below 2**15), sum + half, shifted down, clipped to uint8."""
  for i in range(len(size) - 1, -1, -1):
    ax, out = x.ndim - len(size) + i, size[i]
    n = x.shape[ax]
    if out == n: continue
    o = np.arange(out, dtype=np.float64)
    if align_corners: src = o * (n - 1) / (out - 1) if out > 1 else np.zeros(1)
    else: src = np.maximum((o + 0.5) * n / out - 0.5, 0.0)
    i0 = np.minimum(np.floor(src).astype(np.int64), n - 1)
    i1 = np.minimum(i0 + 1, n - 1)
    w = np.where(i0 == n - 1, 0.0, src - i0)
    wmax = max(w.max(), (1 - w).max())
    bits = max(p for p in range(23) if p == 0 or int(0.5 + wmax * 2 ** p) < 2 ** 15)
    shape = [1] * x.ndim
    shape[ax] = out
    w1 = np.floor(w * 2 ** bits + 0.5).astype(np.int64).reshape(shape)
    w0 = np.floor((1 - w) * 2 ** bits + 0.5).astype(np.int64).reshape(shape)
    a, b = np.take(x, i0, axis=ax).astype(np.int64), np.take(x, i1, axis=ax).astype(np.int64)
    x = np.clip((a * w0 + b * w1 + 2 ** (bits - 1)) >> bits, 0, 255).astype(np.uint8)
  return x

@pytest.mark.parametrize("shape,size,align", [((2, 3, 64, 64), (10, 10), False), ((1, 2, 7, 5), (16, 11), False),
                                              ((1, 1, 9, 13), (4, 20), True), ((3, 40), (17,), False)])
def test_uint8_linear_interpolation(shape, size, align):
  x = np.random.default_rng(7).integers(0, 256, shape).astype(np.uint8)
  got = Tensor(x).interpolate(size, mode="linear", align_corners=align)
  assert got.dtype is dtypes.uint8
  np.testing.assert_equal(got.numpy(), _uint8_linear_reference(x, size, align))

def test_uint8_bilinear_matches_torch():
  torch = pytest.importorskip("torch")
  rng = np.random.default_rng(11)
  for _ in range(6):
    h, w, oh, ow = (int(v) for v in rng.integers(2, 50, 4))
    x = rng.integers(0, 256, (1, 2, h, w)).astype(np.uint8)
    want = torch.nn.functional.interpolate(torch.from_numpy(x), size=(oh, ow), mode="bilinear").numpy()
    np.testing.assert_equal(Tensor(x).interpolate((oh, ow), mode="linear").numpy(), want)
