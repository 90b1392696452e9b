"""Small models of the shapes people deploy, built with onnx.helper, against onnxruntime; plus the runner's contract
(paths, numpy or Tensor inputs, Jit replay, errors that name the node/op/attribute)."""
import os
import numpy as np
import pytest
from core.testing.helpers import ci_run
if not ci_run():   # test-only dependencies (the testing extra): the core job installs both, so there they must import
  pytest.importorskip("onnx")
  pytest.importorskip("onnxruntime")
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402
from core.tensor.tensor import Tensor  # noqa: E402
from core import Jit  # noqa: E402
from core.onnx import OnnxRunner, OnnxError  # noqa: E402
from core.onnx.testing import OPSET, MODELS, resnet, mobilenet  # noqa: E402

def ort_run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
  sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
  return sess.run(None, {"x": x})[0]

@pytest.mark.parametrize("name", list(MODELS))
def test_model_matches_onnxruntime(name):
  model, shape = MODELS[name]()
  x = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
  want = ort_run(model, x)
  got = OnnxRunner(model)({"x": x})[model.graph.output[0].name].numpy()
  assert got.shape == want.shape and got.dtype == np.float32
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)

def test_depthwise_conv_is_grouped():
  model, shape = mobilenet()
  groups = [a.i for n in model.graph.node if n.op_type == "Conv" for a in n.attribute if a.name == "group"]
  assert max(groups) > 1   # the net really has depthwise convs

def test_path_and_tensor_inputs(tmp_path):
  model, shape = resnet()
  p = tmp_path / "resnet.onnx"
  onnx.save(model, os.fspath(p))
  x = np.random.default_rng(6).standard_normal(shape).astype(np.float32)
  runner = OnnxRunner(p)
  out_name = model.graph.output[0].name
  got = runner({"x": Tensor(x)})[out_name].numpy()
  np.testing.assert_allclose(got, ort_run(model, x), rtol=1e-4, atol=1e-5)

@pytest.mark.parametrize("name", ["resnet", "transformer"])
def test_under_jit(name):
  model, shape = MODELS[name]()
  runner = OnnxRunner(model)
  out_name = model.graph.output[0].name
  step = Jit(lambda x: runner({"x": x})[out_name])
  rng = np.random.default_rng(7)
  for _ in range(4):   # eager, capture, then replays with new inputs
    x = rng.standard_normal(shape).astype(np.float32)
    np.testing.assert_allclose(step(Tensor(x)).numpy(), ort_run(model, x), rtol=1e-4, atol=1e-5)
  assert step.cnt == 2

def test_resnet_convs_read_their_padded_input_in_place():
  # the model's 3x3 convs read their small zero-padded inputs through gated loads (core.tensor.conv.PAD_IN_PLACE_BYTES): no
  # copy kernel before each; nor before the max pool, which reads the conv's buffer through its -inf padding (9 kernels, was 15)
  from core.ir.ops import Ops
  model, shape = resnet()
  runner = OnnxRunner(model)
  out_name = model.graph.output[0].name
  step = Jit(lambda x: runner({"x": x})[out_name])
  x = np.random.default_rng(8).standard_normal(shape).astype(np.float32)
  for _ in range(3): got = step(Tensor(x)).numpy()
  np.testing.assert_allclose(got, ort_run(model, x), rtol=1e-4, atol=1e-5)
  copies = [it.ast.arg for it in step.items if not any(u.op is Ops.REDUCE for u in it.ast.toposort())]
  assert not copies and len(step.items) == 9, (copies, [it.ast.arg for it in step.items])

def _single(op: str, **attrs) -> onnx.ModelProto:
  node = helper.make_node(op, ["x"], ["y"], name="the_node", **attrs)
  g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
  return helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)])

def test_unsupported_op_names_node_and_op():
  with pytest.raises(OnnxError, match=r"the_node.*NoSuchOp"): OnnxRunner(_single("NoSuchOp"))

def test_unsupported_attribute_names_it():
  with pytest.raises(OnnxError, match=r"the_node.*Relu.*'bogus'"): OnnxRunner(_single("Relu", bogus=3))

def test_missing_input_is_reported():
  with pytest.raises(OnnxError, match="missing input 'x'"): OnnxRunner(_single("Relu"))({})

@pytest.mark.parametrize("name", list(MODELS))
def test_model_in_half(name):
  """FLOAT16=1's mode (weights, inputs and compute in half) against onnxruntime in float32, within half tolerance."""
  model, shape = MODELS[name]()
  x = np.random.default_rng(8).standard_normal(shape).astype(np.float32)
  want = ort_run(model, x)
  got = OnnxRunner(model, float16=True)({"x": x})[model.graph.output[0].name]
  assert got.dtype.name == "float16"
  np.testing.assert_allclose(got.float().numpy(), want, rtol=2e-2, atol=2e-2)
