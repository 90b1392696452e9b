"""ONNX TensorProto element types <-> core dtypes."""
from __future__ import annotations
from typing import Any
from core.ir.dtype import DType, dtypes

# TensorProto.DataType numbers (onnx.proto): only the ones core has a dtype for
_ONNX_TO_CORE: dict[int, DType] = {
  1: dtypes.float32, 2: dtypes.uint8, 3: dtypes.int8, 4: dtypes.uint16, 5: dtypes.int16, 6: dtypes.int32, 7: dtypes.int64,
  9: dtypes.bool, 10: dtypes.float16, 11: dtypes.float64, 12: dtypes.uint32, 13: dtypes.uint64, 16: dtypes.bfloat16,
}

def onnx_dtype(elem_type: int, where: str = "") -> DType:
  """The core dtype of an ONNX element type; OnnxError for the ones core lacks (strings, complex, fp8, 4-bit)."""
  from core.onnx.registry import OnnxError
  if (dt := _ONNX_TO_CORE.get(elem_type)) is None:
    import onnx
    name = onnx.TensorProto.DataType.Name(elem_type) if elem_type in onnx.TensorProto.DataType.values() else str(elem_type)
    raise OnnxError(f"{where}element type {name} has no core dtype")
  return dt

def to_tensor(arr: Any, device: str | None) -> Any:
  """A Tensor of a numpy array, bfloat16 (ml_dtypes, which numpy lacks) included; a 0-d array stays 0-d."""
  import numpy as np
  from core.tensor.tensor import Tensor
  a = np.asarray(arr, order="C")   # not ascontiguousarray: that makes a 0-d array 1-d
  if a.dtype.name == "bfloat16": return Tensor(a.astype(np.float32), device=device, requires_grad=False).cast(dtypes.bfloat16)
  return Tensor(a, device=device, requires_grad=False)

def to_numpy(t: Any) -> Any:
  """t.numpy(), with bfloat16 given back as ml_dtypes' bfloat16 as onnx writes it."""
  if t.dtype is dtypes.bfloat16:
    import ml_dtypes
    return t.numpy().astype(ml_dtypes.bfloat16)
  return t.numpy()
