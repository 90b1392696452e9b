"""What WGSL lacks, handled: packed 8/16-bit integers and bool written by neighbouring threads, emulated int64, NaN and inf
on bit tests, exp2/log2/sin on IEEE special values, and the clear errors (validator line, too many storage buffers)."""
from __future__ import annotations
from typing import Any
import numpy as np
import pytest
from core import Tensor, dtypes

@pytest.mark.parametrize("np_dt", [np.int8, np.uint8, np.int16, np.uint16, np.bool_])
def test_packed_neighbours_all_written(webgpu: Any, np_dt: Any) -> None:
  # every thread stores one element; four (or two) share a u32 word, so a lost byte would show as a wrong element
  a = (np.arange(1027) % 97 - 40).astype(np_dt)
  out = (Tensor(a, device="WEBGPU") + Tensor(np.ones(1027, dtype=np_dt), device="WEBGPU")).numpy() if np_dt is not np.bool_ \
    else (Tensor(a, device="WEBGPU") ^ Tensor(np.ones(1027, dtype=np.bool_), device="WEBGPU")).numpy()
  np.testing.assert_array_equal(out, (a + np.ones(1027, dtype=np_dt)) if np_dt is not np.bool_ else ~a)

def test_int64_arithmetic_matches_numpy(webgpu: Any) -> None:
  rng = np.random.default_rng(0)
  a = rng.integers(-2**62, 2**62, 256, dtype=np.int64)
  b = rng.integers(-2**31, 2**31, 256, dtype=np.int64)
  b[b == 0] = 7
  ta, tb = Tensor(a, device="WEBGPU"), Tensor(b, device="WEBGPU")
  np.testing.assert_array_equal((ta + tb).numpy(), a + b)
  np.testing.assert_array_equal((ta - tb).numpy(), a - b)
  np.testing.assert_array_equal((ta * tb).numpy(), a * b)
  np.testing.assert_array_equal((ta // tb).numpy(), a // b)   # floor division, as Python and numpy
  np.testing.assert_array_equal((ta % tb).numpy(), a % b)
  np.testing.assert_array_equal((ta < tb).numpy(), a < b)
  np.testing.assert_array_equal(ta.maximum(tb).numpy(), np.maximum(a, b))
  np.testing.assert_array_equal((ta >> 3).numpy(), a >> 3)
  np.testing.assert_array_equal(ta.cast(dtypes.int32).numpy(), a.astype(np.int32))
  np.testing.assert_array_equal(tb.cast(dtypes.float32).numpy(), b.astype(np.float32))

def test_uint64_sum_carries_into_the_high_word(webgpu: Any) -> None:
  a = np.full(64, 2**32 - 1, dtype=np.uint64)
  assert Tensor(a, device="WEBGPU").sum().item() == int(a.sum())

def test_nan_and_inf_on_bits(webgpu: Any) -> None:
  x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 3e38], dtype=np.float32)
  t = Tensor(x, device="WEBGPU")
  with np.errstate(all="ignore"):
    np.testing.assert_array_equal((t != t).numpy(), np.isnan(x))
    np.testing.assert_array_equal(t.maximum(0.0).numpy(), np.maximum(x, 0.0))   # NaN wins, as numpy's maximum
    np.testing.assert_array_equal(t.exp2().numpy(), np.exp2(x))
    np.testing.assert_array_equal(t.log2().numpy(), np.log2(x))
    np.testing.assert_array_equal(t.sin().numpy()[:3], np.sin(x[:3]))   # NaN for NaN and both infinities
    np.testing.assert_array_equal((t * 1e10).numpy(), x * np.float32(1e10))   # overflow to inf

def test_f16_overflow_rounds_to_inf(webgpu: Any) -> None:
  if dtypes.float16 not in webgpu.renderer.supported_dtypes: pytest.skip("this adapter has no shader-f16")
  x = np.array([70000.0, -1e6, 65519.0, np.nan], dtype=np.float32)
  np.testing.assert_array_equal(Tensor(x, device="WEBGPU").cast(dtypes.float16).numpy(), x.astype(np.float16))

def test_float64_is_declared_unsupported(webgpu: Any) -> None:
  # the conformance suite reads supported_dtypes: float64 tests skip with "unsupported: float64"; int64 runs, emulated
  assert dtypes.float64 not in webgpu.renderer.supported_dtypes and dtypes.int64 in webgpu.renderer.supported_dtypes
  with pytest.raises(NotImplementedError, match="WGSL has no float64"): (Tensor([1.0], device="WEBGPU", dtype=dtypes.float64) + 1).realize()

def test_invalid_wgsl_names_the_line(webgpu: Any) -> None:
  from core.device.compiler import CompileError
  from plugin_webgpu.renderer import META
  bad = META + '{"name":"k","bufs":[],"vars":[],"workgroups":1,"dispatch":[1,1,1],"local":[1,1,1]}\n' \
        "@group(0) @binding(0) var<uniform> core_args: array<vec4<u32>, 1>;\n@compute @workgroup_size(1)\nfn main() {\n  let x: i32 = 1.5;\n}\n"
  with pytest.raises(CompileError, match=r"at WGSL line 5: let x: i32 = 1.5;"): webgpu.compiler.compile(bad)

def test_too_many_storage_buffers_is_a_clear_error(webgpu: Any) -> None:
  n = webgpu.renderer.max_storage_buffers
  ts = [Tensor(np.full(4, i, dtype=np.float32), device="WEBGPU") for i in range(n + 1)]
  for t in ts: t.realize()
  acc = ts[0]
  for t in ts[1:]: acc = acc + t
  with pytest.raises(ValueError, match=f"more than the {n} storage buffers per shader stage"): acc.realize()

def test_more_than_65535_workgroups_fold_into_two_dimensions(webgpu: Any) -> None:
  a = np.arange(70001, dtype=np.float32)
  np.testing.assert_array_equal((Tensor(a, device="WEBGPU") * 2 + 1).numpy(), a * 2 + 1)
  from plugin_webgpu.renderer import shader_meta
  from core.codegen.program import program_source
  from core.hcq.state import _compiled
  metas = [shader_meta(program_source(p)) for (_, dev), p in list(_compiled.items()) if dev.startswith("WEBGPU")]
  big = [m for m in metas if m["workgroups"] >= 70001]
  assert big and all(m["dispatch"][0] <= 65535 and m["dispatch"][0] * m["dispatch"][1] >= m["workgroups"] for m in big)
