"""Products a tensor core computes (Opt TC): half and bfloat16 inputs summed in float, float32 matmuls, convolutions, sizes
that are and are not multiples of the 8/16-wide tiles, with an epilogue. On a device whose renderer offers tensor cores
(METAL, NV, PYTHON with PYTHON_TC) they run as WMMA; elsewhere through the other optimizations. Against numpy in float64."""
from __future__ import annotations
import numpy as np
import pytest
from core.tensor.tensor import Tensor
from core.ir.dtype import dtypes
from core.testing.capabilities import requires_dtype

rng = np.random.default_rng(29)
SHAPES = [(16, 16, 8), (32, 48, 16), (20, 30, 12), (9, 17, 5), (64, 32, 40)]

def _inputs(m: int, k: int, n: int, dt) -> tuple[Tensor, Tensor, np.ndarray, np.ndarray]:
  a = Tensor(rng.standard_normal((m, k)).astype(np.float32)).cast(dt).realize()
  b = Tensor(rng.standard_normal((k, n)).astype(np.float32)).cast(dt).realize()
  return a, b, a.float().numpy().astype(np.float64), b.float().numpy().astype(np.float64)

@requires_dtype(dtypes.float16)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_half_matmul_float_sum(shape):
  a, b, an, bn = _inputs(*shape, dtypes.float16)
  np.testing.assert_allclose((a.float() @ b.float()).numpy(), an @ bn, rtol=1e-5, atol=1e-5)

@requires_dtype(dtypes.bfloat16)
@pytest.mark.parametrize("shape", SHAPES[:3], ids=lambda s: "x".join(map(str, s)))
def test_bfloat16_matmul_float_sum(shape):
  a, b, an, bn = _inputs(*shape, dtypes.bfloat16)
  np.testing.assert_allclose((a.float() @ b.float()).numpy(), an @ bn, rtol=1e-5, atol=1e-5)

@requires_dtype(dtypes.float16)
def test_half_matmul_half_out():
  a, b, an, bn = _inputs(24, 40, 16, dtypes.float16)
  np.testing.assert_allclose((a @ b).numpy().astype(np.float64), an @ bn, rtol=2e-3, atol=3e-2)

@pytest.mark.parametrize("shape", SHAPES[1:3], ids=lambda s: "x".join(map(str, s)))
def test_float_matmul_bias_relu(shape):
  a, b, an, bn = _inputs(*shape, dtypes.float32)
  bias = rng.standard_normal(shape[2]).astype(np.float32)
  np.testing.assert_allclose((a @ b + Tensor(bias)).relu().numpy(), np.maximum(an @ bn + bias, 0), rtol=1e-4, atol=1e-4)

@requires_dtype(dtypes.float16)
def test_half_batched_matmul():
  a = Tensor(rng.standard_normal((3, 16, 24)).astype(np.float16)).realize()
  b = Tensor(rng.standard_normal((3, 24, 8)).astype(np.float16)).realize()
  want = a.numpy().astype(np.float64) @ b.numpy().astype(np.float64)
  np.testing.assert_allclose((a.float() @ b.float()).numpy(), want, rtol=1e-5, atol=1e-5)

@requires_dtype(dtypes.float16)
@pytest.mark.parametrize("cin,cout,pad", [(16, 16, 0), (8, 12, 1)])
def test_half_conv2d_float_sum(cin, cout, pad):
  x = Tensor(rng.standard_normal((2, cin, 6, 6)).astype(np.float16)).realize()
  w = Tensor(rng.standard_normal((cout, cin, 3, 3)).astype(np.float16)).realize()
  xf = np.pad(x.numpy().astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
  wf = w.numpy().astype(np.float64)
  o = xf.shape[2] - 2
  want = sum(np.einsum("bchw,oc->bohw", xf[:, :, i:i + o, j:j + o], wf[:, :, i, j]) for i in range(3) for j in range(3))
  np.testing.assert_allclose(x.float().conv2d(w.float(), padding=pad).numpy(), want, rtol=1e-4, atol=1e-4)
