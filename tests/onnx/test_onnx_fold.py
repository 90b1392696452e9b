"""Load-time graph rewrites: Conv -> BatchNormalization pairs folded into one Conv (core/onnx/fold.py), against onnx's reference
implementation, and the pairs that must not fold; one-element initializers held as constants (core/onnx/runner.py)."""
import numpy as np
import pytest
from core.testing.helpers import ci_run
if not ci_run():
  pytest.importorskip("onnx")
import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402
from core.onnx import OnnxRunner  # noqa: E402
from core.onnx.testing import OPSET  # noqa: E402

def _model(conv_bias: bool = True, extra_reader: bool = False, conv_out_is_output: bool = False, mean_is_input: bool = False,
           training: bool = False) -> onnx.ModelProto:
  rng = np.random.default_rng(3)
  inits = [numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w"),
           numpy_helper.from_array(rng.uniform(0.5, 1.5, 4).astype(np.float32), "scale"),
           numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "bias"),
           numpy_helper.from_array(rng.uniform(0.5, 1.5, 4).astype(np.float32), "var")]
  if conv_bias: inits.append(numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b"))
  inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 6])]
  if mean_is_input: inputs.append(helper.make_tensor_value_info("mean", TensorProto.FLOAT, [4]))
  else: inits.append(numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "mean"))
  nodes = [helper.make_node("Conv", ["x", "w"] + (["b"] if conv_bias else []), ["c"], pads=[1, 1, 1, 1]),
           helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["y"], epsilon=1e-3,
                            **({"training_mode": 1} if training else {}))]
  outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
  if extra_reader:
    nodes.append(helper.make_node("Relu", ["c"], ["r"]))
    outputs.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, None))
  if conv_out_is_output: outputs.append(helper.make_tensor_value_info("c", TensorProto.FLOAT, None))
  return helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, inits), opset_imports=[helper.make_opsetid("", OPSET)])

def _check(model: onnx.ModelProto, feeds: dict) -> OnnxRunner:
  runner = OnnxRunner(model)
  got = runner.numpy(feeds)
  for name, want in zip([o.name for o in model.graph.output], ReferenceEvaluator(model).run(None, feeds)):
    np.testing.assert_allclose(got[name], want, rtol=1e-4, atol=1e-5)
  return runner

@pytest.mark.parametrize("conv_bias", [True, False])
def test_conv_batchnorm_folds(conv_bias):
  x = np.random.default_rng(4).standard_normal((1, 3, 6, 6)).astype(np.float32)
  runner = _check(_model(conv_bias=conv_bias), {"x": x})
  assert [n.op_type for n in runner.nodes] == ["Conv"]
  # the unfolded weights and BN parameters are not kept as constants
  assert not {"w", "scale", "bias", "mean", "var", "b"} & set(runner.consts.tensors)

@pytest.mark.parametrize("case", [{"extra_reader": True}, {"conv_out_is_output": True}, {"mean_is_input": True}, {"training": True}])
def test_pairs_that_do_not_fold(case):
  rng = np.random.default_rng(5)
  feeds = {"x": rng.standard_normal((1, 3, 6, 6)).astype(np.float32)}
  if case.get("mean_is_input"): feeds["mean"] = rng.standard_normal(4).astype(np.float32)
  model = _model(**case)
  if case.get("training"):   # training mode's outputs are batch statistics: only the op list is checked
    assert [n.op_type for n in OnnxRunner(model).nodes] == ["Conv", "BatchNormalization"]
    return
  assert [n.op_type for n in _check(model, feeds).nodes][:2] == ["Conv", "BatchNormalization"]

def test_scalar_initializers_are_constants():
  """A one-element initializer (Clip's bounds, a Div's divisor) becomes a constant in the graph, not a buffer each kernel loads."""
  from core.ir.ops import Ops
  inits = [numpy_helper.from_array(np.array(0, np.float32), "lo"), numpy_helper.from_array(np.array([6], np.float32), "hi"),
           numpy_helper.from_array(np.array([2, 3], np.float32), "two")]
  nodes = [helper.make_node("Clip", ["x", "lo", "hi"], ["c"]), helper.make_node("Mul", ["c", "two"], ["y"])]
  g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 2])],
                        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
  model = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)])
  x = np.array([[-1, 2], [7, 5], [0.5, 6.5]], np.float32)
  runner = _check(model, {"x": x})
  ops = {n: {u.op for u in runner.consts.tensors[n].uop.toposort()} for n in ("lo", "hi", "two")}
  assert Ops.BUFFER not in ops["lo"] | ops["hi"] and Ops.CONST in ops["lo"] & ops["hi"]
  assert Ops.BUFFER in ops["two"]   # two elements: a buffer as before
