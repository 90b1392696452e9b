"""bfloat16 on renderers without it: uint16 storage, float32 math rounded to bf16 after each op."""
import numpy as np
import pytest
from core.testing.helpers import ci_run
from core import Tensor, dtypes
from core.ir.dtype import truncate, float_to_bf16_bits

VALUES = [1.0, 2.5, 3.1415926, -7.77, 1e30, -0.0, 1e-40, 65504.0, 3.0e38, float("inf")]

def test_bf16_cast_and_math_match_reference_rounding(dev="PYTHON"):
  t = Tensor(VALUES, device=dev).cast(dtypes.bfloat16)
  got = (t * 3 + 1).cast(dtypes.float32).numpy()
  want = [truncate(dtypes.bfloat16, truncate(dtypes.bfloat16, truncate(dtypes.bfloat16, v) * 3) + 1) for v in VALUES]
  np.testing.assert_array_equal(got, np.array(want, dtype=np.float32))

def test_bf16_bits_round_trip_exactly(dev="PYTHON"):
  bits = np.array([0x3f80, 0xc000, 0x7f80, 0x0001, 0x7fc1, 0xffff], np.uint16)
  back = Tensor(bits, device=dev).bitcast(dtypes.bfloat16).bitcast(dtypes.uint16).numpy()
  np.testing.assert_array_equal(back, bits)

def test_bf16_store_rounds_to_nearest_even(dev="PYTHON"):
  vals = [1.0 + 2**-8, 1.0 + 3 * 2**-8, float("nan")]
  got = Tensor(vals, device=dev).cast(dtypes.bfloat16).bitcast(dtypes.uint16).numpy()
  np.testing.assert_array_equal(got, [float_to_bf16_bits(v) for v in vals])

def test_bf16_emulation_on_the_c_renderer():
  """The C renderer has no bf16 either: run the same checks there (DEV picks the renderer, so use a subprocess)."""
  import subprocess, sys, os
  if not ci_run(): pytest.importorskip("plugin_cpu")   # the core job installs every plugin: there it must import
  code = (f"import runpy; t = type('m', (), runpy.run_path({os.path.abspath(__file__)!r}))\n"
          "t.test_bf16_cast_and_math_match_reference_rounding('CPU'); t.test_bf16_bits_round_trip_exactly('CPU'); "
          "t.test_bf16_store_rounds_to_nearest_even('CPU'); print('ok')")
  out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "DEV": "CPU:C"}, capture_output=True, text=True)
  assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-2000:]
