"""UOp.const's cache of tensor-level constants: repeated scalars share one graph, different values never do."""
import math
from core.ir.ops import UOp
from core.ir.dtype import dtypes

def test_tensor_level_const_cache_keeps_values_apart():
  a = UOp.const(dtypes.float32, 1.0, "CPU", (4,))
  assert UOp.const(dtypes.float32, 1.0, "CPU", (4,)) is a          # repeated scalar ops reuse one graph
  assert UOp.const(dtypes.float32, 1.0, "CPU", (5,)) is not a and UOp.const(dtypes.float32, 1.0, "CPU:1", (4,)) is not a
  assert UOp.const(dtypes.float16, 1.0, "CPU", (4,)) is not a
  z, nz = UOp.const(dtypes.float32, 0.0, "CPU", (2,)), UOp.const(dtypes.float32, -0.0, "CPU", (2,))
  assert z is not nz and math.copysign(1, nz.src[0].src[0].arg) == -1 and math.copysign(1, z.src[0].src[0].arg) == 1
  n = UOp.const(dtypes.float32, float("nan"), "CPU", (3,))
  assert math.isnan(n.src[0].src[0].arg) and n.shape == (3,)
