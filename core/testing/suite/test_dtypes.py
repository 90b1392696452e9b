"""Every dtype core knows, on the device under test: host round trip, kernels that load, compute and store it, casts to and
from float32. A dtype the renderer doesn't list is skipped with "unsupported: <dtype>" (fp8 today, float16 on some)."""
from __future__ import annotations
import numpy as np
import pytest
from core.tensor.tensor import Tensor
from core.ir.dtype import DType, dtypes, to_np
from core.testing.capabilities import dtype_params

# values exactly representable in every float format core has (fp8e5m2 keeps 2 mantissa bits, fp8e4m3 tops out at 448)
FLOAT_VALUES = [-3.0, -1.25, -0.5, 0.0, 0.25, 1.0, 1.5, 2.0, 3.5, 6.0, 96.0]

def sample(dt: DType) -> np.ndarray:
  """Values of `dt` as a numpy array (float32 for dtypes numpy lacks), including the integer extremes."""
  if dt is dtypes.bool: return np.array([True, False, False, True, True])
  if dtypes.is_float(dt): return np.array(FLOAT_VALUES, dtype=np.float32 if dt.fmt is None else to_np(dt))
  info = np.iinfo(to_np(dt))
  return np.array([info.min, info.min + 1, -1 if info.min < 0 else 2, 0, 1, 7, 100, info.max - 1, info.max], dtype=to_np(dt))

def make(dt: DType) -> Tensor:
  x = sample(dt)
  # bfloat16 and fp8 have no numpy dtype: build them on the device from float32 (the values above are exact in each)
  return Tensor(x).cast(dt) if dt.fmt is None else Tensor(x)

@pytest.mark.parametrize("dt", dtype_params(dtypes.all))
def test_load_store_and_cast_to_float32(dt):
  x, t = sample(dt), make(dt)
  assert t.dtype is dt
  got = t.contiguous().cast(dtypes.float32).numpy()   # a kernel reads dt and writes float32
  np.testing.assert_equal(got, x.astype(np.float32))
  if dt.fmt is not None:
    back = (t + 0 if dt is not dtypes.bool else t | False).numpy()   # a kernel that reads and writes dt
    assert back.dtype == x.dtype
    np.testing.assert_equal(back, x)

@pytest.mark.parametrize("dt", dtype_params(dtypes.all))
def test_arithmetic_compare_reduce(dt):
  x, t = sample(dt), make(dt)
  if dt is dtypes.bool:
    np.testing.assert_equal((t & t.flip(0)).numpy(), x & x[::-1])
    np.testing.assert_equal((t ^ True).numpy(), x ^ True)
  else:
    want_add, want_mul = x.astype(np.float64) + x[::-1], x.astype(np.float64) * 2
    if dtypes.is_int(dt):
      # integer overflow wraps, exactly as numpy's fixed-width arithmetic
      np.testing.assert_equal((t + t.flip(0)).numpy(), x + x[::-1])
      np.testing.assert_equal((t * 2).numpy(), x * x.dtype.type(2))
    else:
      np.testing.assert_equal((t + t.flip(0)).cast(dtypes.float32).numpy(), want_add.astype(np.float32))
      np.testing.assert_equal((t * 2).cast(dtypes.float32).numpy(), want_mul.astype(np.float32))
  np.testing.assert_equal((t < t.flip(0)).numpy(), x < x[::-1])
  np.testing.assert_equal((t == t.flip(0)).numpy(), x == x[::-1])
  # reduced in dt itself: a cast to float32 first would round the 32- and 64-bit integer extremes
  def host(r: Tensor) -> np.ndarray: return r.cast(dtypes.float32).numpy() if dt.fmt is None else r.numpy()
  assert host(t.max()) == x.max() and host(t.min()) == x.min()

@pytest.mark.parametrize("dt", dtype_params([d for d in dtypes.all if dtypes.is_float(d)]))
def test_float_from_float32_rounds(dt):
  # 1 + 2^-12 is exact in float32, rounds to 1 in every float narrower than float32; float64 keeps it
  t = Tensor([1.0 + 2.0 ** -12, -2.0], dtype=dtypes.float32).cast(dt).cast(dtypes.float32).numpy()
  np.testing.assert_equal(t, [1.0 + 2.0 ** -12 if dt.itemsize >= 4 else 1.0, -2.0])

@pytest.mark.parametrize("dt", dtype_params([d for d in dtypes.all if d.fmt is not None]))
def test_zero_size_and_odd_size(dt):
  assert Tensor(np.zeros((0, 3), to_np(dt))).contiguous().numpy().shape == (0, 3)
  x = np.resize(sample(dt), (7, 13))
  np.testing.assert_equal(Tensor(x).T.contiguous().numpy(), x.T)
