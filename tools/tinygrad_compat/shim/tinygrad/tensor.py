"""tinygrad.tensor: the Tensor and the dtype -> numpy dtype helper the test files use."""
from __future__ import annotations
from typing import Any
from core import Tensor
from core.ir.dtype import DType, to_np

def _to_np_dtype(dtype: DType) -> Any: return None if dtype.fmt is None else to_np(dtype)

__all__ = ["Tensor", "_to_np_dtype"]
