"""The EXAMPLE renderer: core's C renderer with this device's capabilities (plain loops, no thread ids)."""
from __future__ import annotations
from core.codegen.c_style import CStyleRenderer
from core.ir.dtype import dtypes

class ExampleRenderer(CStyleRenderer):
  device = "EXAMPLE"
  suffix = "C"
  has_local = False
  global_max = None        # no launch grid: codegen turns every axis into a loop
  supports_float4 = False  # keep the example scalar
  supported_dtypes = frozenset({dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32,
                                dtypes.int64, dtypes.uint64, dtypes.float32, dtypes.float64})
