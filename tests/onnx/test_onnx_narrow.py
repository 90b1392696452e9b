"""Casts to ONNX's narrow types (float8, float4, 4- and 2-bit ints) computed with Tensor ops, against ml_dtypes and onnx's
reference conversions."""
import numpy as np
import pytest
from core.testing.helpers import ci_run
if not ci_run(): pytest.importorskip("onnx")
import ml_dtypes  # noqa: E402
from onnx import numpy_helper  # noqa: E402
from core.tensor.tensor import Tensor  # noqa: E402
from core.onnx.narrow import NARROW, from_storage, to_narrow  # noqa: E402

_rng = np.random.default_rng(0)
# grid points, halfway ties, the overflow edge, subnormals, specials
_X = np.concatenate([_rng.standard_normal(200) * 30, _rng.standard_normal(100) * 0.01, [0.0, -0.0, 0.5, 1.5, 2.5, 448, 464, 470, 480, 240, 248,
                     57344, 61440, 65000, 6, 5, 7, 1e6, -1e6, 2 ** -9, 2 ** -10, 3 * 2 ** -11, 2 ** -17, np.inf, -np.inf, np.nan]]).astype(np.float32)

def _cast(x: np.ndarray, elem: int, saturate: bool = True, round_mode: str = "up") -> np.ndarray:
  n = to_narrow(Tensor(x), elem, saturate, round_mode)
  return from_storage(n.t.numpy(), elem)

@pytest.mark.parametrize("elem", [17, 18, 19, 20])
def test_float8_saturating_cast_matches_onnx(elem):
  want = numpy_helper.saturate_cast(_X, getattr(ml_dtypes, NARROW[elem].np_name))
  np.testing.assert_array_equal(_cast(_X, elem).view(np.uint8), want.view(np.uint8))

@pytest.mark.parametrize("elem", [17, 18, 19, 20, 23])
def test_non_saturating_cast_matches_ml_dtypes(elem):
  want = _X.astype(getattr(ml_dtypes, NARROW[elem].np_name))
  got = _cast(_X, elem, saturate=False)
  np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))   # nan == nan here; -0 == 0 (fnuz has no -0)

@pytest.mark.parametrize("mode", ["up", "down", "nearest"])
def test_float8e8m0_cast_matches_onnx(mode):
  x = np.abs(_X)
  want = numpy_helper.to_float8e8m0(x, True, mode)
  np.testing.assert_array_equal(_cast(x, 24, True, mode).view(np.uint8), want.view(np.uint8))

@pytest.mark.parametrize("elem,lo,hi", [(21, 0, 15), (22, -8, 7), (25, 0, 3), (26, -2, 1)])
def test_int_casts_truncate_and_zero_outside_the_range(elem, lo, hi):
  x = np.array([-20, -9.5, -8.7, -2.5, -1.9, -0.5, 0, 0.7, 1.2, 3.9, 7.99, 8, 15.5, 16, 100], np.float32)
  t = np.trunc(x)
  want = np.where((t >= lo) & (t <= hi), t, 0)
  got = _cast(x, elem)
  assert got.dtype == getattr(ml_dtypes, NARROW[elem].np_name)
  np.testing.assert_array_equal(got.astype(np.float32), want)

def _model(*nodes, out_type=1):
  from onnx import TensorProto, helper
  g = helper.make_graph(list(nodes), "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                        [helper.make_tensor_value_info("y", out_type, [4])])
  return helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])

def test_a_narrow_value_round_trips_through_a_model():
  from onnx import helper
  from core.onnx import OnnxRunner
  m = _model(helper.make_node("Cast", ["x"], ["q"], to=17), helper.make_node("Cast", ["q"], ["y"], to=1))
  x = np.array([0.3, -1000, 17.5, 0.01], np.float32)
  np.testing.assert_array_equal(OnnxRunner(m).numpy({"x": x})["y"], numpy_helper.saturate_cast(x, ml_dtypes.float8_e4m3fn).astype(np.float32))

def test_a_narrow_output_comes_back_as_its_ml_dtypes_type():
  from onnx import helper
  from core.onnx import OnnxRunner
  y = OnnxRunner(_model(helper.make_node("Cast", ["x"], ["y"], to=22), out_type=22)).numpy({"x": np.array([1, -3.5, 7, 9], np.float32)})["y"]
  assert y.dtype == ml_dtypes.int4 and y.astype(np.int8).tolist() == [1, -3, 7, 0]

def test_an_op_that_does_not_take_narrow_inputs_names_node_op_and_type():
  from onnx import helper
  from core.onnx import OnnxError, OnnxRunner
  m = _model(helper.make_node("Cast", ["x"], ["q"], to=17), helper.make_node("Relu", ["q"], ["y"], name="act"), out_type=17)
  with pytest.raises(OnnxError, match=r"node act: op Relu does not take FLOAT8E4M3FN inputs"): OnnxRunner(m)({"x": np.zeros(4, np.float32)})

def test_double_to_half_is_correctly_rounded():
  from onnx import TensorProto, helper
  from core.onnx import OnnxRunner
  # halfway cases of float16 that float32 would round first (1 + 2**-11 + 2**-40 must go up, not tie to even)
  x = np.concatenate([[1 + 2 ** -11 + 2 ** -40, 1 + 2 ** -11, 1 + 3 * 2 ** -11 - 2 ** -40, 65504.0, 65520.0, 1e300, -1e-300, 2 ** -25 + 2 ** -60, 0.0, np.nan],
                      _rng.standard_normal(200) * 100])
  g = helper.make_graph([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT16)], "g",
                        [helper.make_tensor_value_info("x", TensorProto.DOUBLE, [len(x)])], [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [len(x)])])
  got = OnnxRunner(helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])).numpy({"x": x})["y"]
  np.testing.assert_array_equal(got, x.astype(np.float16))

def test_narrow_casts_replay_under_jit():
  from onnx import helper
  from core import Jit
  from core.onnx import OnnxRunner
  r = OnnxRunner(_model(helper.make_node("Cast", ["x"], ["q"], to=19), helper.make_node("Cast", ["q"], ["y"], to=1)))
  step = Jit(lambda x: r({"x": x})["y"].contiguous())
  for _ in range(3):
    x = _rng.standard_normal(4).astype(np.float32) * 1000
    np.testing.assert_array_equal(step(Tensor(x)).numpy(), numpy_helper.saturate_cast(x, ml_dtypes.float8_e5m2).astype(np.float32))
