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

def _in_suite(config: Any, nodeid: str) -> bool:
  # node ids are relative to the rootdir; with xdist only the ids reach the controller, so resolve them as paths
  return SUITE.resolve() in (pathlib.Path(str(config.rootpath)) / nodeid.split("::")[0]).resolve().parents

def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: Any) -> None:
  stats = terminalreporter.stats
  def reports(kind: str) -> list[Any]:
    seen, out = set(), []
    for r in stats.get(kind, []):
      nid = getattr(r, "nodeid", "")
      if nid and nid not in seen and _in_suite(config, nid): seen.add(nid); out.append(r)
    return out
  passed, failed, skipped = reports("passed"), reports("failed") + reports("error"), reports("skipped")
  if not (passed or failed or skipped): return
  reasons = sorted({str(r.longrepr[2]).removeprefix("Skipped: ") for r in skipped if isinstance(r.longrepr, tuple)})
  line = f"conformance DEV={os.getenv('DEV') or 'default'}: {len(passed)} passed, {len(failed)} failed, {len(skipped)} skipped"
  if reasons: line += f" (unsupported: {'; '.join(reasons)})"
  terminalreporter.write_line(line)
