"""Subgraphs (If, Loop, Scan) and sequence values in OnnxRunner, against numpy."""
import numpy as np
import pytest
from core.testing.helpers import ci_run
if not ci_run(): pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402
from core.onnx import OnnxRunner  # noqa: E402

F = TensorProto.FLOAT

def _model(nodes, inputs, outputs, opset=18):
  return helper.make_model(helper.make_graph(nodes, "g", inputs, outputs), opset_imports=[helper.make_opsetid("", opset)])

def test_if_branches_read_the_enclosing_scope_on_every_call():
  x, y = helper.make_tensor_value_info("x", F, [3]), helper.make_tensor_value_info("y", F, [3])
  then = helper.make_graph([helper.make_node("Mul", ["x", "x"], ["t"])], "then", [], [helper.make_tensor_value_info("t", F, [3])])
  other = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [], [helper.make_tensor_value_info("e", F, [3])])
  m = _model([helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0), helper.make_node("Constant", [], ["z"], value_float=0.0),
              helper.make_node("Greater", ["s", "z"], ["c"]), helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)], [x], [y])
  r = OnnxRunner(m)
  for v in (np.array([1, 2, 3], np.float32), np.array([-1, -2, 0.5], np.float32), np.array([4, 5, 6], np.float32)):
    np.testing.assert_array_equal(r({"x": v})["y"].numpy(), v * v if v.sum() > 0 else -v)

def test_loop_carries_a_value_and_stacks_scan_outputs():
  body = helper.make_graph(
    [helper.make_node("Identity", ["c_in"], ["c_out"]), helper.make_node("Cast", ["i"], ["fi"], to=F),
     helper.make_node("Add", ["acc_in", "fi"], ["acc_out"]), helper.make_node("Mul", ["acc_out", "w"], ["scan"])], "body",
    [helper.make_tensor_value_info("i", TensorProto.INT64, []), helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
     helper.make_tensor_value_info("acc_in", F, [2])],
    [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []), helper.make_tensor_value_info("acc_out", F, [2]),
     helper.make_tensor_value_info("scan", F, [2])])
  m = _model([helper.make_node("Loop", ["n", "", "a"], ["acc", "scans"], body=body)],
             [helper.make_tensor_value_info("n", TensorProto.INT64, []), helper.make_tensor_value_info("a", F, [2]),
              helper.make_tensor_value_info("w", F, [2])],
             [helper.make_tensor_value_info("acc", F, [2]), helper.make_tensor_value_info("scans", F, [None, 2])])
  a, w = np.array([1, -1], np.float32), np.array([2, 3], np.float32)
  out = OnnxRunner(m).numpy({"n": np.array(4, np.int64), "a": a, "w": w})
  accs = [a + sum(range(k + 1)) for k in range(4)]
  np.testing.assert_array_equal(out["acc"], accs[-1])
  np.testing.assert_array_equal(out["scans"], np.stack(accs) * w)

def test_scan_runs_a_cumulative_sum_in_both_directions():
  body = helper.make_graph([helper.make_node("Add", ["s_in", "x_t"], ["s_out"]), helper.make_node("Identity", ["s_out"], ["y_t"])], "body",
                           [helper.make_tensor_value_info("s_in", F, [2]), helper.make_tensor_value_info("x_t", F, [2])],
                           [helper.make_tensor_value_info("s_out", F, [2]), helper.make_tensor_value_info("y_t", F, [2])])
  m = _model([helper.make_node("Scan", ["s", "x"], ["last", "ys"], body=body, num_scan_inputs=1, scan_input_directions=[1])],
             [helper.make_tensor_value_info("s", F, [2]), helper.make_tensor_value_info("x", F, [5, 2])],
             [helper.make_tensor_value_info("last", F, [2]), helper.make_tensor_value_info("ys", F, [5, 2])])
  x = np.arange(10, dtype=np.float32).reshape(5, 2)
  out = OnnxRunner(m).numpy({"s": np.zeros(2, np.float32), "x": x})
  np.testing.assert_array_equal(out["ys"], np.cumsum(x[::-1], axis=0))
  np.testing.assert_array_equal(out["last"], x.sum(0))

def test_sequences_split_insert_and_concat():
  m = _model([helper.make_node("SplitToSequence", ["x"], ["s"], axis=1), helper.make_node("SequenceInsert", ["s", "x"], ["s2"]),
              helper.make_node("SequenceLength", ["s2"], ["n"]), helper.make_node("ConcatFromSequence", ["s2"], ["y"], axis=1)],
             [helper.make_tensor_value_info("x", F, [2, 3])], [helper.make_tensor_value_info("y", F, [2, 6]),
                                                               helper.make_tensor_value_info("n", TensorProto.INT64, [])])
  x = np.arange(6, dtype=np.float32).reshape(2, 3)
  out = OnnxRunner(m).numpy({"x": x})
  assert int(out["n"]) == 4
  np.testing.assert_array_equal(out["y"], np.concatenate([x, x], axis=1))
