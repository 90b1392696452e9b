"""Random numbers are a function of (seed, draw number) only: the device under test gives exactly the numbers the PYTHON
reference device gives, draw after draw, and a Jit replay continues the same stream."""
from __future__ import annotations
from typing import Callable
import numpy as np
import pytest
from core.tensor.tensor import Tensor
from core.ir.dtype import dtypes
from core.testing.capabilities import device_name
from core.testing.helpers import scaled

def draws(device: str, fn: Callable[[str], Tensor], seed: int = 1234, n: int = 3) -> list[np.ndarray]:
  Tensor.manual_seed(seed)
  return [fn(device).numpy() for _ in range(n)]

N = scaled(1000, 16) + 1   # odd: the last threefry output pair is used halfway

# exact: integer bit manipulation only. randn goes through log/cos/sqrt, whose last bit may differ between libms.
EXACT = {
  "rand": lambda d: Tensor.rand(N, device=d),
  "rand_2d": lambda d: Tensor.rand(3, N, device=d),
  "randint": lambda d: Tensor.randint(N, low=-50, high=50, device=d),
  "uniform": lambda d: Tensor.uniform(N, low=-2.0, high=3.0, device=d),
  "rand_like": lambda d: Tensor.ones(5, 7, device=d).rand_like(),
}
CLOSE = {
  "randn": lambda d: Tensor.randn(N, device=d),
  "normal": lambda d: Tensor.normal(N, mean=1.0, std=3.0, device=d),
  "kaiming_uniform": lambda d: Tensor.kaiming_uniform(16, 9, device=d),
}

@pytest.mark.parametrize("name", sorted(EXACT))
def test_same_seed_same_numbers_as_python_device(name):
  got, want = draws(device_name(), EXACT[name]), draws("PYTHON", EXACT[name])
  for g, w in zip(got, want):
    assert g.dtype == w.dtype and g.shape == w.shape
    np.testing.assert_array_equal(g, w)
  assert not np.array_equal(got[0], got[1]), "two draws after one seed must differ"

@pytest.mark.parametrize("name", sorted(CLOSE))
def test_same_seed_close_numbers_as_python_device(name):
  for g, w in zip(draws(device_name(), CLOSE[name]), draws("PYTHON", CLOSE[name])):
    np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)

def test_dropout_mask_matches_python_device():
  def mask(d: str) -> Tensor:
    with Tensor.train(): return Tensor.ones(N, device=d).dropout(0.3)
  for g, w in zip(draws(device_name(), mask), draws("PYTHON", mask)): np.testing.assert_array_equal(g, w)

def test_seed_changes_numbers_and_rand_is_in_range():
  a, b = draws(device_name(), EXACT["rand"], seed=1), draws(device_name(), EXACT["rand"], seed=2)
  assert not np.array_equal(a[0], b[0])
  assert all(0 <= x.min() and x.max() < 1 for x in a + b)

def test_float16_rand_matches_float32_rounded():
  from core.testing.capabilities import skip_unless
  skip_unless(dtypes.float16)
  Tensor.manual_seed(9)
  h = Tensor.rand(N, dtype=dtypes.float16).numpy()
  Tensor.manual_seed(9)
  f = Tensor.rand(N, dtype=dtypes.float32).numpy()
  assert h.dtype == np.float16 and h.min() >= 0 and h.max() <= 1
  np.testing.assert_array_equal(h, f.astype(np.float16))   # the same draw, rounded to nearest (not truncated, not redrawn)
  assert len(np.unique(h)) > N // 4, "float16 draws collapsed to a few values"
