"""Runs tinygrad's own Tensor API test files (test/backend/test_ops.py, test/test_tiny.py) against core through the
`tinygrad` shim in shim/, and prints pass/fail/skip per file with the pass rate. The test files are read from a tinygrad
checkout or bare git repository at run time into a temporary folder; they are not part of this repository.

  python tools/tinygrad_compat/run.py --tinygrad /path/to/tinygrad [-n 2] [--failures] [--json out.json] [-k expr]
"""
from __future__ import annotations
import argparse, ast, json, os, pathlib, subprocess, sys, tempfile
import xml.etree.ElementTree as ET

HERE = pathlib.Path(__file__).resolve().parent
SHIM = HERE / "shim"
MIRROR = pathlib.Path("/work/.mirror/tinygrad+tinygrad/repo")
FILES = {"test_ops": "test/backend/test_ops.py", "test_tiny": "test/test_tiny.py"}

# Skips that tinygrad itself takes on its CPU device too, reported apart so that the figure "of the tests tinygrad runs on
# CPU" leaves them out: every unconditional @unittest.skip in the file (found by unconditional_skips), and these
# conditions on another device. Any other skip counts as not passed.
TINYGRAD_CPU_SKIPS = {"image only supported on CL"}

def unconditional_skips(source: str) -> set[str]:
  """The reasons of the file's `@unittest.skip("...")` decorators (skipped on every device, whatever is tested)."""
  reasons = set()
  for node in ast.walk(ast.parse(source)):
    if not isinstance(node, ast.FunctionDef): continue
    for d in node.decorator_list:
      if isinstance(d, ast.Call) and isinstance(d.func, ast.Attribute) and d.func.attr == "skip" and d.args and \
         isinstance(d.args[0], ast.Constant) and isinstance(d.args[0].value, str): reasons.add(d.args[0].value)
  return reasons

def read_tinygrad_file(src: pathlib.Path, rel: str) -> str:
  """A file of the tinygrad source at `src`: a working tree, or a (bare) git repository read at HEAD."""
  if (src / rel).is_file(): return (src / rel).read_text()
  git_dir = src / ".git" if (src / ".git").exists() else src
  return subprocess.run(["git", f"--git-dir={git_dir}", "show", f"HEAD:{rel}"], check=True, capture_output=True, text=True).stdout

def classify(case: ET.Element, cpu_skips: set[str]) -> tuple[str, str]:
  """(outcome, message) of one junit testcase: passed, failed, error, skipped_cpu (tinygrad skips it on CPU too) or skipped."""
  for tag in ("failure", "error"):
    if (el := case.find(tag)) is not None:
      lines = (el.get("message") or "").strip().splitlines()
      return ("failed" if tag == "failure" else "error"), (lines[0][:300] if lines else "")
  if (el := case.find("skipped")) is not None:
    reason = (el.get("message") or "").strip().removeprefix("Skipped: ")
    return ("skipped_cpu" if reason in cpu_skips else "skipped"), reason
  return "passed", ""

def run_file(name: str, path: pathlib.Path, workdir: pathlib.Path, args: argparse.Namespace) -> dict[str, tuple[str, str]]:
  cpu_skips = TINYGRAD_CPU_SKIPS | unconditional_skips(path.read_text())
  xml = workdir / f"{name}.xml"
  cmd = [sys.executable, "-m", "pytest", str(path), "-q", "-p", "no:cacheprovider", f"--junitxml={xml}", "-o", "addopts=",
         "--rootdir", str(workdir), "-W", "ignore::DeprecationWarning"]
  if args.n > 1: cmd += ["-n", str(args.n)]
  if args.k: cmd += ["-k", args.k]
  env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SHIM), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
  env.setdefault("DEV", "CPU")
  subprocess.run(cmd, cwd=workdir, env=env, stdout=None if args.verbose else subprocess.DEVNULL, stderr=None if args.verbose else subprocess.DEVNULL)
  if not xml.exists(): raise SystemExit(f"{name}: pytest wrote no report (run with -v to see why)")
  return {f"{c.get('classname', '').rsplit('.', 1)[-1]}.{c.get('name')}": classify(c, cpu_skips) for c in ET.parse(xml).getroot().iter("testcase")}

def summarize(name: str, results: dict[str, tuple[str, str]]) -> dict[str, int]:
  counts = {k: sum(1 for o, _ in results.values() if o == k) for k in ("passed", "failed", "error", "skipped", "skipped_cpu")}
  total = len(results)
  runs_on_cpu = total - counts["skipped_cpu"]
  print(f"{name:10s} {counts['passed']:4d} of {total:4d} passed ({100 * counts['passed'] / max(total, 1):5.1f}%), "
        f"{counts['passed']:4d} of {runs_on_cpu:4d} that tinygrad runs on CPU ({100 * counts['passed'] / max(runs_on_cpu, 1):5.1f}%); "
        f"failed {counts['failed']}, errors {counts['error']}, skipped {counts['skipped']} (+{counts['skipped_cpu']} skipped by tinygrad on CPU too)")
  return {"total": total, **counts}

def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--tinygrad", type=pathlib.Path, default=MIRROR, help="a tinygrad checkout or git repository (default: %(default)s)")
  ap.add_argument("--files", default=",".join(FILES), help="which files to run: test_ops,test_tiny")
  ap.add_argument("-n", type=int, default=1, help="pytest-xdist workers")
  ap.add_argument("-k", default="", help="pytest -k expression")
  ap.add_argument("--failures", action="store_true", help="list every test not passed, with its first message line")
  ap.add_argument("--json", type=pathlib.Path, help="write every test's outcome here")
  ap.add_argument("-v", "--verbose", action="store_true", help="show pytest's own output")
  args = ap.parse_args()
  out: dict[str, dict] = {}
  totals = {"total": 0, "passed": 0, "skipped_cpu": 0}
  with tempfile.TemporaryDirectory(prefix="tinygrad_compat_") as tmp:
    work = pathlib.Path(tmp)
    for name in args.files.split(","):
      path = work / f"{name}.py"
      path.write_text(read_tinygrad_file(args.tinygrad, FILES[name]))
      results = run_file(name, path, work, args)
      counts = summarize(name, results)
      for k in totals: totals[k] += counts[k]
      out[name] = {"counts": counts, "tests": {t: {"outcome": o, "message": m} for t, (o, m) in sorted(results.items())}}
      if args.failures:
        for t, (o, m) in sorted(results.items()):
          if o != "passed": print(f"  {o:11s} {t}: {m}")
  runs_on_cpu = totals["total"] - totals["skipped_cpu"]
  print(f"{'all':10s} {totals['passed']:4d} of {totals['total']:4d} passed ({100 * totals['passed'] / max(totals['total'], 1):5.1f}%), "
        f"{totals['passed']:4d} of {runs_on_cpu:4d} that tinygrad runs on CPU ({100 * totals['passed'] / max(runs_on_cpu, 1):5.1f}%)")
  if args.json: args.json.write_text(json.dumps(out, indent=1))
  return 0

if __name__ == "__main__": sys.exit(main())
