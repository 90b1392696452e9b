"""The docs stay true to the code: the backend guide quotes the example plugin's files, the Tensor API page is current, and every
setting the code reads is named in the docs."""
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

# read by core or a plugin but owned by the OS or another library (XDG folders, the Vulkan loader's driver list, the dynamic
# loader's path), or a test switch only (PYTHON_FOLD_LOOPS: tests/device/test_python_device.py runs the slow path with it)
_NOT_CORES_SETTINGS = {"LD_LIBRARY_PATH", "VK_DRIVER_FILES", "VK_ICD_FILENAMES", "XDG_CACHE_HOME", "XDG_DATA_DIRS", "PYTHON_FOLD_LOOPS"}

def test_every_setting_the_code_reads_is_documented():
  # each environment variable core/, a plugin package or an example reads by a literal name (getenv, os.environ, ContextVar, C getenv)
  read = re.compile(r"""(?:getenv|environ\.get|ContextVar)\(\s*["']([A-Z][A-Z0-9_]+)["']|environ\[\s*["']([A-Z][A-Z0-9_]+)["']\]"""
                    r"""|["']([A-Z][A-Z0-9_]+)["'] not in os\.environ""")
  sources = [*ROOT.glob("core/**/*.py"), *ROOT.glob("plugins/*/plugin_*/**/*.py"), *ROOT.glob("plugins/*/plugin_*/native/*.c"),
             *ROOT.glob("examples/**/*.py")]
  names = {next(g for g in m.groups() if g): p.relative_to(ROOT) for p in sources for m in read.finditer(p.read_text())}
  docs = "".join(p.read_text() for p in [ROOT / "README.md", *ROOT.glob("docs/*.md"), *ROOT.glob("plugins/*/README.md"),
                                         *ROOT.glob("core/*/README.md"), *ROOT.glob("examples/**/README.md")])
  # named as the docs name settings: a code span that starts `NAME`, `NAME=value` or `$NAME` (the settings tables, the prose that
  # describes one); a word of prose is not enough: JIT is also a word of text about other things (the host JIT)
  missing = {n: str(p) for n, p in names.items() if n not in _NOT_CORES_SETTINGS and not re.search(rf"`\$?{n}\b", docs)}
  assert len(names) > 40 and not missing, f"settings read but named in no README or docs/*.md as `NAME`, `NAME=...` or `$NAME`: {missing}"
