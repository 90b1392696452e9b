"""The backend guide quotes the example plugin's files: the quotes must stay the files."""
from __future__ import annotations
import pathlib, re

ROOT = pathlib.Path(__file__).resolve().parent.parent

def test_the_guide_shows_the_example_pyproject_whole():
  guide = (ROOT / "docs" / "writing-a-backend.md").read_text()
  block = re.search(r"```toml\n(.*?)```", guide, re.S)
  assert block is not None and block.group(1) == (ROOT / "examples" / "plugin-example" / "pyproject.toml").read_text()

def test_the_guide_imports_hookimpl_from_where_it_lives():
  guide = (ROOT / "docs" / "writing-a-backend.md").read_text()
  hooks = (ROOT / "examples" / "plugin-example" / "plugin_example" / "__init__.py").read_text()
  assert "from core.device.hookspecs import hookimpl" in guide and "from core.device.hookspecs import hookimpl" in hooks

def test_the_tensor_api_page_is_current():
  import importlib.util
  spec = importlib.util.spec_from_file_location("tensor_api_doc", ROOT / "docs" / "tensor_api.py")
  assert spec is not None and spec.loader is not None
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  assert (ROOT / "docs" / "tensor-api.md").read_text() == mod.render(), "docs/tensor-api.md is stale: run python docs/tensor_api.py"
