"""What the device under test declares it can do (its renderer's capabilities), as pytest marks that skip with a reason."""
from __future__ import annotations
from typing import Any, Iterable, Sequence
import pytest
from core.ir.dtype import DType, dtypes

# every capability skip starts with this, so the conformance summary can list them apart from other skips
UNSUPPORTED = "unsupported: "
# the boolean capabilities a test may require (Renderer class attributes)
FLAGS = ("has_local", "has_shared", "has_images", "has_atomics", "supports_float4")

def device_name() -> str:
  """The device the suite runs on: DEV's first entry, else the best available one."""
  from core.device.registry import Device
  return Device.DEFAULT

def renderer() -> Any:
  """The renderer of the device under test (opening the device on first use)."""
  from core.device.registry import Device
  return Device[Device.DEFAULT].renderer

def supports_dtype(dt: DType) -> bool:
  """Whether kernels in `dt` run on the device under test. bfloat16 always does: core emulates it (codegen/decompose.py)
  on renderers that don't list it, computing in float32 and storing uint16 bits."""
  dt = dt.scalar()
  return dt is dtypes.bfloat16 or dt in renderer().supported_dtypes

def supports(flag: str) -> bool:
  """Whether the renderer declares the boolean capability `flag` (one of FLAGS)."""
  if flag not in FLAGS: raise ValueError(f"unknown capability {flag!r}; the suite knows {', '.join(FLAGS)}")
  return bool(getattr(renderer(), flag))

def max_buffer_size() -> int | None:
  """The largest buffer in bytes the renderer declares (Renderer.max_buffer_size); None when only memory limits it."""
  return renderer().max_buffer_size

def fits_buffer(nbytes: int) -> bool:
  """Whether one buffer of `nbytes` is within the declared max_buffer_size."""
  return (limit := max_buffer_size()) is None or nbytes <= limit

def missing(dtypes_: Iterable[DType] = (), flags: Iterable[str] = (), nbytes: int | None = None) -> list[str]:
  """The requirements the device under test doesn't meet, each named as it appears in a skip reason."""
  out = [dt.scalar().name for dt in dtypes_ if not supports_dtype(dt)]
  out += [f for f in flags if not supports(f)]
  if nbytes is not None and not fits_buffer(nbytes): out.append(f"buffers of {nbytes} bytes (max_buffer_size={max_buffer_size()})")
  return out

def skip_unless(*dtypes_: DType, flags: Sequence[str] = (), nbytes: int | None = None) -> None:
  """Inside a test: skip it, with the reason "unsupported: ...", unless the device meets every requirement."""
  if (miss := missing(dtypes_, flags, nbytes)): pytest.skip(UNSUPPORTED + ", ".join(miss))

# Marks: the check runs when the test is set up (core.testing.suite's conftest calls check_marks), not at import, so
# collecting the suite never opens a device and a broken device fails its tests instead of the collection.
def requires_dtype(*dtypes_: DType) -> Any:
  """Mark: the test computes in these dtypes; skipped with "unsupported: <dtype>" where the renderer doesn't list one."""
  return pytest.mark.core_requires(dtypes=tuple(dtypes_))

def requires(*flags: str) -> Any:
  """Mark: the test needs these renderer capabilities (e.g. "has_local"); skipped with "unsupported: has_local" otherwise."""
  for f in flags:
    if f not in FLAGS: raise ValueError(f"unknown capability {f!r}; the suite knows {', '.join(FLAGS)}")
  return pytest.mark.core_requires(flags=flags)

def requires_buffer(nbytes: int) -> Any:
  """Mark: the test allocates one buffer of `nbytes`; skipped where max_buffer_size is smaller."""
  return pytest.mark.core_requires(nbytes=nbytes)

def dtype_params(dts: Iterable[DType]) -> list[Any]:
  """pytest.param per dtype, each marked requires_dtype and named by the dtype: for @pytest.mark.parametrize."""
  return [pytest.param(dt, marks=requires_dtype(dt), id=dt.name) for dt in dts]

def check_marks(item: Any) -> None:
  """Skips `item` when one of its core_requires marks names something the device under test doesn't support."""
  for m in item.iter_markers("core_requires"):
    skip_unless(*m.kwargs.get("dtypes", ()), flags=m.kwargs.get("flags", ()), nbytes=m.kwargs.get("nbytes"))
