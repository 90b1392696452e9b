"""core.testing.helpers.hardware_tests, the hooks of a plugin's hardware-test folder: its tests (only its own) are marked
`hardware` and skipped with the reason its check gives, in CI too."""
from __future__ import annotations
import os, pathlib, subprocess, sys, textwrap
import pytest

CONFTEST = textwrap.dedent('''
  from core.testing.helpers import hardware_tests
  pytest_configure, pytest_collection_modifyitems = hardware_tests(
    __file__, "a widget", lambda it: "no widget here" if "absent" in it.name else None)
''')

def run_pytest(tmp_path: pathlib.Path, *args: str, ci: str) -> str:
  (tmp_path / "hw").mkdir()
  (tmp_path / "hw" / "conftest.py").write_text(CONFTEST)
  (tmp_path / "hw" / "test_hw.py").write_text("def test_present(): pass\ndef test_absent(): pass\n")
  (tmp_path / "hw2").mkdir()   # a sibling folder whose name starts with the hardware folder's
  (tmp_path / "hw2" / "test_other.py").write_text("def test_absent_elsewhere(): pass\n")
  env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_XDIST_WORKER", "PYTEST_ADDOPTS")}
  env.update(CI=ci, PYTHONPATH=os.pathsep.join(sys.path))
  p = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "0", "-rs", "-v", *args], cwd=tmp_path, env=env,
                     capture_output=True, text=True, timeout=120)
  return p.stdout + p.stderr

@pytest.mark.parametrize("ci, note", [("false", ""), ("true", " (no CI job has a widget: skipped there too)")])
def test_folder_tests_marked_and_skipped_with_the_reason(tmp_path: pathlib.Path, ci: str, note: str) -> None:
  out = run_pytest(tmp_path, ".", ci=ci)
  assert "hw/test_hw.py::test_present PASSED" in out and "hw2/test_other.py::test_absent_elsewhere PASSED" in out, out
  assert f"SKIPPED [1] hw/test_hw.py: no widget here{note}\n" in out, out
  assert "1 skipped" in out and "2 passed" in out, out

def test_marker_selects_only_the_folders_tests(tmp_path: pathlib.Path) -> None:
  out = run_pytest(tmp_path, ".", "-m", "hardware", "--strict-markers", ci="false")
  assert "1 passed, 1 skipped, 1 deselected" in out, out
