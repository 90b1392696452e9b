"""docs/onnx.md's supported-op table is generated from the registry: it must match the registry of this checkout."""
import importlib.util, pathlib
import pytest
from core.testing.helpers import ci_run
if not ci_run(): pytest.importorskip("onnx")

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent

def _doc_module():
  spec = importlib.util.spec_from_file_location("onnx_ops_doc", ROOT / "docs" / "onnx_ops.py")
  assert spec is not None and spec.loader is not None
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod

def test_the_onnx_op_table_is_current():
  mod, page = _doc_module(), (ROOT / "docs" / "onnx.md").read_text()
  assert page == mod.render(page), "docs/onnx.md's op table is stale: run python docs/onnx_ops.py"

def test_the_op_table_lists_every_registered_op_and_its_attributes():
  from core.onnx.registry import OPS
  table = _doc_module().table()
  assert len(table.splitlines()) == len(OPS) + 2
  assert "| Gemm | alpha, beta, transA, transB | - |" in table and "| Reshape | allowzero | 1 |" in table
