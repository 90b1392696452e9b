"""The device's declared capabilities are consistent, and what it declares works: the renderer's class attributes say what
the rest of the suite may skip, so they are checked first."""
from __future__ import annotations
import numpy as np
from core.tensor.tensor import Tensor
from core.ir.dtype import dtypes
from core.testing.capabilities import FLAGS, max_buffer_size, renderer, requires, requires_buffer
from core.testing.helpers import rng, scaled

def test_declarations_have_the_right_types():
  r = renderer()
  assert isinstance(r.supported_dtypes, (frozenset, set)) and set(r.supported_dtypes) <= set(dtypes.all), r.supported_dtypes
  for f in FLAGS: assert isinstance(getattr(r, f), bool), f"{type(r).__name__}.{f} must be a bool"
  assert r.max_buffer_size is None or (isinstance(r.max_buffer_size, int) and r.max_buffer_size > 0)
  for dims in (r.global_max, r.local_max):
    assert dims is None or (len(dims) <= 3 and all(isinstance(d, int) and d > 0 for d in dims)), dims

def test_core_needs_bool_int32_float32():
  # indices are int32, comparisons give bool, Python floats become float32: no device can leave these out
  missing = {dtypes.bool, dtypes.int32, dtypes.float32} - set(renderer().supported_dtypes)
  assert not missing, f"{type(renderer()).__name__} must support {sorted(d.name for d in missing)}"

def test_locals_come_with_their_limits():
  r = renderer()
  if r.has_local: assert r.local_max is not None and r.global_max is not None, "has_local needs global_max and local_max"
  if r.has_shared: assert r.has_local and r.shared_max > 0, "has_shared needs has_local and shared_max > 0"

@requires("has_local")
def test_work_larger_than_a_workgroup():
  # more threads than one workgroup holds along each axis, and a reduction across them
  n = max(renderer().local_max or (1,)) * 3 + 1
  x = rng(3).standard_normal((3, n)).astype(np.float32)
  np.testing.assert_allclose((Tensor(x) * 2 + 1).numpy(), x * 2 + 1, rtol=1e-6)
  np.testing.assert_allclose(Tensor(x).sum(1).numpy(), x.astype(np.float64).sum(1), rtol=1e-4, atol=1e-4)

BIG = scaled(1 << 26, 1 << 16)   # bytes: 64 MiB at the default scale

@requires_buffer(BIG)
def test_large_buffer_round_trip():
  n = BIG // 4
  x = np.arange(n, dtype=np.uint32) * np.uint32(2654435761)   # every element distinct and position-dependent
  t = Tensor(x)
  got = (t ^ 0x5A5A5A5A).numpy()
  np.testing.assert_array_equal(got, x ^ np.uint32(0x5A5A5A5A))
  assert max_buffer_size() is None or max_buffer_size() >= BIG
