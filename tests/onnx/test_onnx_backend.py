"""onnx's shipped node tests (onnx/backend/test/data/node) through core.onnx.backend, tensors on DEV.

Every node test runs except those EXCLUDED below, each with its reason; test_node_suite_coverage asserts the share that
runs (and so must pass). Measured on DEV=CPU with onnx 1.23.2: see FLOOR."""
import re
import pytest
from core.testing.helpers import ci_run
if not ci_run(): pytest.importorskip("onnx")   # the core job installs onnx: there it must be importable
import onnx.backend.test  # noqa: E402
from core.onnx.backend import CoreBackend  # noqa: E402

EXCLUDED: dict[str, str] = {
  # dtypes
  r"string|strnormalizer|regex_full_match|tfidfvectorizer|label_encoder": "dtype core lacks: strings",
  # ops not supported yet, and random outputs
  r"image_decoder": "op not supported yet: ImageDecoder (decoding JPEG/PNG/... byte streams)",
  r"bernoulli|training_dropout(?!_zero_ratio)": "random outputs: Bernoulli, RandomUniformLike and Dropout in training mode can't match a "
    "stored result",
  # results that differ from the reference in the last bits
  r"causal_conv_with_state_silu_fp16": "not matched: 2 of 64 half outputs are one half-ulp off (rtol 1e-3): the reference rounds "
    "its fp16 convolution differently from core, and SiLU carries the difference (the op and its expanded graph alike)",
  r"test_dft_inverse(_opset19)?_cpu": "float32 rounding: 10 of 200 outputs of the inverse DFT (a float32 matmul with cos/sin tables) "
    "miss the test's atol 1e-7 + rtol 1e-3 by up to 1.9x (near-zero values from cancelling terms)",
  r"test_dynamicquantizelinear(_expanded)?_cpu": "not matched: core divides as x * (1/y), not correctly rounded: -2.5 / 0.019607844 "
    "gives -127.5 where float32 division gives -127.49999, so one value rounds to 25, not 26 (the op and its expanded graph alike)",
  r"attention_4d_(causal_|gqa_with_past_and_present_)?fp16_expanded": "not matched: a few half outputs of the expanded fp16 attention "
    "graphs are one half-ulp off, just over rtol 1e-3 (3 of 192 by up to 1.08x in attention_4d_fp16_expanded)",
  # onnx's harness
  r"loop16_seq_none": "onnx's harness fails it for every backend: its expected sequence holds a 0-d array, and assert_similar_outputs "
    "recurses into the elements and calls len() on it (core's output matches the expected values)",
}
FLOOR = 0.96   # the share of node tests that run and pass on DEV=CPU: 1822 of 1884 (96.7%) with onnx 1.23.2

backend_test = onnx.backend.test.BackendTest(CoreBackend, __name__)
backend_test.include(r"test_.*_cpu$")
OnnxBackendNodeModelTest = backend_test.test_cases["OnnxBackendNodeModelTest"]
_all_names = [n for n in vars(OnnxBackendNodeModelTest) if n.startswith("test_")]
NODE_TESTS = [n for n in _all_names if n.endswith("_cpu")]   # onnx copies every test per device kind; the tensors go to DEV either way
_excluded = {n: next(r for p, r in EXCLUDED.items() if re.search(p, n)) for n in NODE_TESTS if any(re.search(p, n) for p in EXCLUDED)}
for _name in _all_names:
  if _name in _excluded or not _name.endswith("_cpu"): delattr(OnnxBackendNodeModelTest, _name)

def test_node_suite_coverage():
  total, run = len(NODE_TESTS), len(NODE_TESTS) - len(_excluded)
  print(f"onnx node tests: {run} of {total} run ({run / total:.1%}); {len(_excluded)} excluded")
  assert total > 1000   # the installed onnx ships its node tests
  assert run / total >= FLOOR, f"only {run} of {total} node tests run"
