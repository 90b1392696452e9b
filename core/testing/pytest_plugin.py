"""pytest plugin (entry point `pytest11`): `pytest --core-conformance` runs core's device suite against DEV.
Inactive unless asked for, so installing core never changes anyone else's test runs."""
from __future__ import annotations
import os, pathlib
from typing import Any

SUITE = pathlib.Path(__file__).parent / "suite"

def pytest_addoption(parser: Any) -> None:
  group = parser.getgroup("core")
  group.addoption("--core-conformance", action="store_true", default=False,
                  help="run core's backend conformance suite on the device selected by DEV")

def pytest_load_initial_conftests(early_config: Any, parser: Any, args: list[str]) -> None:
  # the flag adds the suite to what is collected; the user's own paths still run too
  if "--core-conformance" in args and str(SUITE) not in args: args.append(str(SUITE))

def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: Any) -> None:
  stats = terminalreporter.stats
  suite_reports = [r for k in ("passed", "failed", "skipped", "error") for r in stats.get(k, []) if str(SUITE) in str(getattr(r, "fspath", ""))
                   or "core/testing/suite" in getattr(r, "nodeid", "")]
  if not suite_reports: return
  def count(kind: str) -> int: return sum(1 for r in stats.get(kind, []) if r in suite_reports)
  reasons = sorted({str(r.longrepr[2]).removeprefix("Skipped: ") for r in stats.get("skipped", []) if r in suite_reports
                    and isinstance(r.longrepr, tuple)})
  dev = os.getenv("DEV") or "default"
  line = f"conformance DEV={dev}: {count('passed')} passed, {count('failed') + count('error')} failed, {count('skipped')} skipped"
  if reasons: line += f" (unsupported: {'; '.join(reasons)})"
  terminalreporter.write_line(line)
