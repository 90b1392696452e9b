"""bfloat16 through the LLVM renderer (the C renderer leaves bf16 to codegen): casts round to nearest even, math rounds per op."""
import numpy as np
from core.ir.dtype import dtypes, float_to_bf16_bits, bf16_bits_to_float, truncate
from cpu_kernels import run, elementwise, device

def test_bf16_is_supported_by_llvm_only():
  assert dtypes.bfloat16 in device("LLVM").renderer.supported_dtypes
  assert dtypes.bfloat16 not in device("C").renderer.supported_dtypes

def test_float_to_bf16_and_back():
  f = np.array([1.0, 3.14159, -2.5e-3, 1e30, 65504.0, 1.00390625], np.float32)   # the last one is a tie: rounds to even
  uops = elementwise(6, [dtypes.float32], dtypes.uint16, lambda x: x.cast(dtypes.bfloat16).bitcast(dtypes.uint16))
  bits = run("LLVM", uops, [np.zeros(6, np.uint16), f])[0]
  np.testing.assert_array_equal(bits, [float_to_bf16_bits(float(v)) for v in f])

def test_bf16_add_rounds_to_bf16():
  a = np.array([float_to_bf16_bits(v) for v in (1.0, 256.0, -3.5)], np.uint16)
  b = np.array([float_to_bf16_bits(v) for v in (0.00390625, 1.0, 0.25)], np.uint16)
  uops = elementwise(3, [dtypes.uint16, dtypes.uint16], dtypes.float32,
                     lambda x, y: (x.bitcast(dtypes.bfloat16) + y.bitcast(dtypes.bfloat16)).cast(dtypes.float32))
  res = run("LLVM", uops, [np.zeros(3, np.float32), a, b])[0]
  want = [truncate(dtypes.bfloat16, bf16_bits_to_float(int(x)) + bf16_bits_to_float(int(y))) for x, y in zip(a, b)]
  np.testing.assert_array_equal(res, np.array(want, np.float32))
  assert res[1] == 256.0   # 257 is not a bfloat16: the sum rounds back to 256
