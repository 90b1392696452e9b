"""tinygrad.dtype: core's dtypes."""
from core.ir.dtype import DType, dtypes, to_dtype, least_upper_dtype

__all__ = ["DType", "dtypes", "to_dtype", "least_upper_dtype"]
