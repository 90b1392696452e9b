"""pytest plugin (entry point `pytest11`): `pytest --core-conformance` runs core's device suite against DEV.
Inactive unless asked for, so installing core never changes anyone else's test runs."""
from __future__ import annotations
import collections, os, pathlib
from typing import Any
import pytest

SUITE = pathlib.Path(__file__).parent / "suite"
UNSUPPORTED = "unsupported: "   # the prefix of capability skips (core.testing.capabilities), not imported to keep this module light

def pytest_addoption(parser: Any) -> None:
  group = parser.getgroup("core")
  group.addoption("--core-conformance", action="store_true", default=False,
                  help="run core's backend conformance suite on the device selected by DEV")

def pytest_load_initial_conftests(early_config: Any, parser: Any, args: list[str]) -> None:
  # the flag adds the suite to what is collected; the user's own paths still run too
  if "--core-conformance" in args:
    if str(SUITE) not in args: args.append(str(SUITE))
    os.environ.setdefault("SPEC", "1")   # a conformance run also checks every stage's validity rules

def pytest_configure(config: Any) -> None:
  config.addinivalue_line("markers", "core_requires(dtypes=(), flags=(), nbytes=None): skip unless the device under test supports "
                                     "these dtypes / renderer capabilities / buffer size (core.testing.capabilities)")

def pytest_runtest_setup(item: Any) -> None:
  # only tests marked through core.testing.capabilities are touched, so other projects' runs are unchanged
  if item.get_closest_marker("core_requires") is None: return
  from core.testing.capabilities import check_marks
  check_marks(item)

def subset() -> str:
  """CORE_CONFORMANCE: "full" (the default) or "smoke", every suite test function once, at its first parametrization.
  A smoke run is for a variant of a DEV string another run covers in full (another path to the same renderer, another
  arch of it, an image mode): it reaches every op family and check once, at about a fifth of the tests."""
  mode = os.getenv("CORE_CONFORMANCE", "full").lower()
  if mode not in ("full", "smoke"): raise pytest.UsageError(f"CORE_CONFORMANCE={mode!r}: expected 'full' or 'smoke'")
  return mode

def pytest_collection_modifyitems(session: Any, config: Any, items: list[Any]) -> None:
  # tag the suite's tests where their real paths are known: node ids of files outside the rootdir are relative to
  # whatever pytest picks, and with xdist only the reports (which carry user_properties) reach the controller
  suite, smoke = SUITE.resolve(), subset() == "smoke"
  seen: set[tuple[str, str]] = set()
  keep, dropped = [], []
  for it in items:
    if suite not in pathlib.Path(str(it.path)).resolve().parents: keep.append(it); continue
    it.user_properties.append(SUITE_TAG)
    fn = (str(it.path), getattr(it, "originalname", it.name))
    if smoke and fn in seen: dropped.append(it)
    else: seen.add(fn); keep.append(it)
  if dropped:
    config.hook.pytest_deselected(items=dropped)
    items[:] = keep

SUITE_TAG = ("core_conformance", True)
def _in_suite(report: Any) -> bool: return any(tuple(p) == SUITE_TAG for p in getattr(report, "user_properties", ()))

def compile_only() -> bool:
  """DEV=NULL:<renderer>[:arch]: kernels are rendered and compiled but never run, so values can't be checked."""
  return (os.getenv("DEV") or "").split(";")[0].upper().startswith("NULL")

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: Any, call: Any) -> Any:
  outcome = yield
  rep = outcome.get_result()
  # compile-only: a suite test passes when all its kernels compiled; a wrong value is expected (nothing ran), any
  # other error (a compile error above all) still fails
  if rep.when == "call" and rep.failed and compile_only() and SUITE_TAG in [tuple(p) for p in item.user_properties] \
     and call.excinfo is not None and call.excinfo.errisinstance(AssertionError):
    rep.outcome, rep.longrepr = "passed", None

def _device_label() -> str:
  if (dev := os.getenv("DEV")): return dev
  try:
    from core.device.registry import Device
    return f"{Device.DEFAULT} (auto)"
  except Exception: return "default"   # the failures above already say why no device opened

def summary_line(device: str, passed: int, failed: int, reasons: list[str]) -> str:
  """"conformance DEV=X: N passed, N failed, N skipped (unsupported: a x2, b; other skips: ...)" from one reason per skip."""
  counts = collections.Counter(reasons)
  def fmt(rs: list[str], strip: str = "") -> str:
    return ", ".join(r.removeprefix(strip) + (f" x{counts[r]}" if counts[r] > 1 else "") for r in rs)
  unsupported = sorted(r for r in counts if r.startswith(UNSUPPORTED))
  other = sorted(r for r in counts if not r.startswith(UNSUPPORTED))
  mode = " (compile-only: kernels compiled, values not checked)" if compile_only() else ""
  if subset() == "smoke": mode += " (smoke: each test function at its first parametrization)"
  line = f"conformance DEV={device}{mode}: {passed} passed, {failed} failed, {len(reasons)} skipped"
  if unsupported: line += f" (unsupported: {fmt(unsupported, UNSUPPORTED)})"
  if other: line += f" (other skips: {fmt(other)})"
  return line

def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: Any) -> None:
  stats = terminalreporter.stats
  def reports(kind: str) -> list[Any]:
    seen, out = set(), []
    for r in stats.get(kind, []):
      nid = getattr(r, "nodeid", "")
      if nid and nid not in seen and _in_suite(r): seen.add(nid); out.append(r)
    return out
  passed, failed, skipped = reports("passed"), reports("failed") + reports("error"), reports("skipped")
  if not (passed or failed or skipped): return
  reasons = [str(r.longrepr[2]).removeprefix("Skipped: ") if isinstance(r.longrepr, tuple) else "skipped" for r in skipped]
  terminalreporter.write_line(summary_line(_device_label(), len(passed), len(failed), reasons))
