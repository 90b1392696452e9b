"""core.testing.helpers' one answer to "is this a CI run", and missing_tool: a failure there, a skip elsewhere."""
import pytest
from core.testing.helpers import ci_run, missing_tool

@pytest.mark.parametrize("value, ci", [(None, False), ("", False), ("0", False), ("false", False), ("true", True), ("True", True),
                                       ("1", True)])
def test_ci_run_reads_ci_true_as_github_and_ci_run_set_it(monkeypatch: pytest.MonkeyPatch, value: str | None, ci: bool) -> None:
  if value is None: monkeypatch.delenv("CI", raising=False)
  else: monkeypatch.setenv("CI", value)
  assert ci_run() is ci

def test_missing_tool_fails_in_ci_and_skips_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
  monkeypatch.setenv("CI", "true")
  with pytest.raises(pytest.fail.Exception, match="no clang: apt install clang"): missing_tool("no clang: apt install clang")
  monkeypatch.setenv("CI", "false")
  with pytest.raises(pytest.skip.Exception, match="no clang: apt install clang"): missing_tool("no clang: apt install clang")
