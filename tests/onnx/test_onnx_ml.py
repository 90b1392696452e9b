"""ai.onnx.ml ops against onnx's reference evaluator."""
import numpy as np
import pytest
from core.testing.helpers import ci_run
if not ci_run(): pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402
from core.onnx import OnnxError, OnnxRunner  # noqa: E402

def _ensemble(**kw):
  # two trees over 2 features: tree 0 splits x0 <= 0.5 then x1 < 2; tree 1 tests x1 > 1; 5 leaves over 2 targets
  attrs = dict(tree_roots=[0, 2], nodes_featureids=[0, 1, 1], nodes_splits=helper.make_tensor("s", TensorProto.FLOAT, [3], [0.5, 2.0, 1.0]),
               nodes_modes=helper.make_tensor("m", TensorProto.UINT8, [3], [0, 1, 3]), nodes_truenodeids=[1, 0, 3],
               nodes_falsenodeids=[2, 1, 4], nodes_trueleafs=[0, 1, 1], nodes_falseleafs=[1, 1, 1], leaf_targetids=[0, 1, 0, 1, 0],
               leaf_weights=helper.make_tensor("w", TensorProto.FLOAT, [5], [1.5, -2.0, 4.0, 0.25, 8.0]), n_targets=2,
               nodes_missing_value_tracks_true=[1, 0, 0])
  attrs.update(kw)
  node = helper.make_node("TreeEnsemble", ["x"], ["y"], domain="ai.onnx.ml", **attrs)
  g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 2])],
                        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 2])])
  return helper.make_model(g, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("ai.onnx.ml", 5)])

X = np.array([[0.1, 1.0], [0.1, 3.0], [0.9, 0.5], [0.9, 5.0], [np.nan, 1.5], [0.5, np.nan]], np.float32)

@pytest.mark.parametrize("agg", [0, 1, 2, 3])
def test_tree_ensemble_matches_the_reference(agg):
  m = _ensemble(aggregate_function=agg)
  np.testing.assert_allclose(OnnxRunner(m).numpy({"x": X})["y"], ReferenceEvaluator(m).run(None, {"x": X})[0], rtol=1e-6)

def test_tree_ensemble_post_transform_is_refused_by_name():
  with pytest.raises(OnnxError, match="TreeEnsemble: attribute post_transform=2"): OnnxRunner(_ensemble(post_transform=2))({"x": X})
