"""ONNX element types core has no dtype for (float8, float4, 4- and 2-bit ints), held exactly in a wider core dtype.

A narrow value is a Tensor of its storage dtype (float32 for the float formats, int8/uint8 for the ints) whose elements are
all representable in the narrow type; casting to a narrow type rounds on the device with Tensor ops, so it runs anywhere.
The runner tracks which values are narrow; only ops that declare a `_narrow` parameter take them."""
from __future__ import annotations
import math
from dataclasses import dataclass
from typing import Any
from core.ir.dtype import DType, dtypes
from core.tensor.tensor import Tensor

@dataclass(frozen=True)
class NarrowType:
  name: str           # the ONNX TensorProto type name
  np_name: str        # the ml_dtypes type numpy holds it in
  storage: DType
  lo: float           # the int range, or -max..max of a float format
  hi: float
  mant: int = 0       # float formats: mantissa bits, smallest normal exponent, whether overflow (saturate=0) gives inf
  emin: int = 0
  has_inf: bool = False
  saturating: bool = False   # overflow always saturates (float4e2m1 has neither inf nor nan)

def _float(name: str, np_name: str, mant: int, emin: int, hi: float, has_inf: bool = False, saturating: bool = False) -> NarrowType:
  return NarrowType(name, np_name, dtypes.float32, -hi, hi, mant, emin, has_inf, saturating)

# TensorProto.DataType numbers (onnx.proto)
NARROW: dict[int, NarrowType] = {
  17: _float("FLOAT8E4M3FN", "float8_e4m3fn", 3, -6, 448.0),
  18: _float("FLOAT8E4M3FNUZ", "float8_e4m3fnuz", 3, -7, 240.0),
  19: _float("FLOAT8E5M2", "float8_e5m2", 2, -14, 57344.0, has_inf=True),
  20: _float("FLOAT8E5M2FNUZ", "float8_e5m2fnuz", 2, -15, 57344.0),
  21: NarrowType("UINT4", "uint4", dtypes.uint8, 0, 15),
  22: NarrowType("INT4", "int4", dtypes.int8, -8, 7),
  23: _float("FLOAT4E2M1", "float4_e2m1fn", 1, 0, 6.0, saturating=True),
  24: NarrowType("FLOAT8E8M0", "float8_e8m0fnu", dtypes.float32, 2.0 ** -127, 2.0 ** 127),
  25: NarrowType("UINT2", "uint2", dtypes.uint8, 0, 3),
  26: NarrowType("INT2", "int2", dtypes.int8, -2, 1),
}
_BY_NP = {nt.np_name: elem for elem, nt in NARROW.items()}

@dataclass(frozen=True)
class Narrow:
  """What an op returns for a narrow output: the storage Tensor and the ONNX element type it holds."""
  t: Tensor
  elem: int

def narrow_elem(arr: Any) -> int | None:
  """The ONNX element type of a numpy array of a narrow ml_dtypes type, else None."""
  import numpy as np
  return _BY_NP.get(arr.dtype.name) if isinstance(arr, (np.ndarray, np.generic)) else None

def storage_array(arr: Any, elem: int) -> Any:
  """A narrow numpy array as its storage dtype (exact)."""
  import numpy as np
  from core.ir.dtype import to_np
  return np.asarray(arr).astype(to_np(NARROW[elem].storage))

def from_storage(a: Any, elem: int) -> Any:
  """A storage numpy array as the narrow ml_dtypes type onnx uses (exact: the values are representable)."""
  import ml_dtypes
  return a.astype(getattr(ml_dtypes, NARROW[elem].np_name))

def _round_float(x: Tensor, nt: NarrowType, saturate: bool) -> Tensor:
  """Round to nearest even on the format's grid: the grid step is a power of two read from the float32 exponent."""
  x = x.cast(dtypes.float32)
  a = x.abs()
  e = (a.bitcast(dtypes.uint32) >> 23).cast(dtypes.int32) - 127
  step = ((e.maximum(nt.emin) - nt.mant + 127).cast(dtypes.uint32) << 23).bitcast(dtypes.float32)
  r = (a / step).round() * step   # dividing by a power of two is exact
  over = r > nt.hi
  r = over.where(nt.hi if saturate or nt.saturating else (math.inf if nt.has_inf else math.nan), r)
  return (x.bitcast(dtypes.uint32) >= 0x80000000).where(-r, r)   # the sign bit, so -0.0 stays -0.0

def _round_e8m0(x: Tensor, saturate: bool, round_mode: str) -> Tensor:
  """float8e8m0 is a bare exponent (2**(k-127), k=255 is nan): k is float32's exponent field, rounded by the mantissa."""
  bits = x.cast(dtypes.float32).bitcast(dtypes.uint32)
  k = ((bits >> 23) & 0xFF).cast(dtypes.int32)
  if round_mode == "up": inc = (bits & 0x7FFFFF) > 0
  elif round_mode == "nearest":   # round half to even on the exponent: the guard bit, then round/sticky bits or an odd exponent
    inc = ((bits & 0x400000) > 0) & (((bits & 0x3FFFFF) > 0) | (k > 0))
  elif round_mode == "down": inc = k.zeros_like().bool()
  else:
    from core.onnx.registry import OnnxError
    raise OnnxError(f"attribute round_mode={round_mode!r}")
  special = k == 255
  if saturate: inc = inc & (k != 254)
  k = special.where(255, k + inc.cast(dtypes.int32))
  out = (k == 0).where(0x400000, (k == 255).where(0x7FC00000, k.cast(dtypes.uint32) << 23))   # k=0 is float32's denormal 2**-127
  return out.cast(dtypes.uint32).bitcast(dtypes.float32)

def to_narrow(x: Tensor, elem: int, saturate: bool = True, round_mode: str = "up") -> Narrow:
  """x cast to a narrow type (ONNX Cast's rules): floats round to nearest even and saturate (or overflow to inf/nan when
  saturate is off); ints truncate, and values outside the range give 0 (as onnx's reference, through ml_dtypes)."""
  nt = NARROW[elem]
  if elem == 24: return Narrow(_round_e8m0(x, saturate, round_mode), elem)
  if nt.storage is dtypes.float32: return Narrow(_round_float(x, nt, saturate), elem)
  t = x.trunc() if dtypes.is_float(x.dtype) else x
  inside = (t >= nt.lo) & (t <= nt.hi)
  return Narrow(inside.where(t, 0).cast(nt.storage), elem)
