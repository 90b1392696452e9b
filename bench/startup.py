"""Start-up cost (issue 23 item 7): `import core` plus a first small result, `(Tensor([1., 2., 3.]) + 1).numpy()`, each run in a
new process. Cold: a fresh compile-cache folder (every kernel and the host submit program compiled); warm: the same folder again.
Python's own bytecode cache is kept in a private folder (PYTHONPYCACHEPREFIX) and filled by a first unmeasured run, so a
PYTHONDONTWRITEBYTECODE set in the environment (which recompiles every module on each start, ~200 ms here) does not count.
Prints the median, min and max of the in-process time (import to result), of its CPU time, and of the whole process's wall
time, with numpy's own import in the same setting for scale. Run: python bench/startup.py [--runs 7] [--dev CPU]"""
from __future__ import annotations
import argparse, json, os, statistics, subprocess, sys, tempfile, time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")

FIRST = """
import time
t0, c0 = time.perf_counter(), time.process_time()
import core
from core import Tensor
r = (Tensor([1., 2., 3.]) + 1).numpy()
t1, c1 = time.perf_counter(), time.process_time()
assert r.tolist() == [2., 3., 4.], r
import sys, json
print("RESULT", json.dumps({"wall": t1 - t0, "cpu": c1 - c0, "llvmlite": "llvmlite.binding" in sys.modules}))
"""
NUMPY = """
import time
t0, c0 = time.perf_counter(), time.process_time()
import numpy
t1, c1 = time.perf_counter(), time.process_time()
import json
print("RESULT", json.dumps({"wall": t1 - t0, "cpu": c1 - c0, "llvmlite": False}))
"""

def run(code: str, env: dict[str, str]) -> dict:
  st = time.perf_counter()
  out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=ROOT, timeout=300)
  total = time.perf_counter() - st
  if out.returncode != 0: raise RuntimeError(f"the start-up run failed:\n{out.stderr}")
  res = json.loads(next(ln for ln in out.stdout.splitlines() if ln.startswith("RESULT"))[7:])
  return {**res, "process": total}

def summary(name: str, runs: list[dict]) -> None:
  def f(key: str) -> str:
    v = sorted(r[key] * 1e3 for r in runs)
    return f"{statistics.median(v):6.0f} ms ({v[0]:.0f}-{v[-1]:.0f})"
  llvm = sum(r["llvmlite"] for r in runs)
  print(f"  {name:28s} in-process {f('wall')}  cpu {f('cpu')}  whole process {f('process')}  llvmlite loaded in {llvm}/{len(runs)}")

def main(argv: list[str] | None = None) -> None:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--runs", type=int, default=7)
  ap.add_argument("--dev", default=os.getenv("DEV", ""))
  args = ap.parse_args(argv)
  with tempfile.TemporaryDirectory(prefix="core_startup_") as tmp:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "CORE_CACHE_DIR", "DEV")}
    env.update(PYTHONPYCACHEPREFIX=os.path.join(tmp, "pyc"), PYTHONPATH=ROOT + os.pathsep + env.get("PYTHONPATH", ""))
    if args.dev: env["DEV"] = args.dev
    run(FIRST, {**env, "CORE_CACHE_DIR": os.path.join(tmp, "prime")})   # fills the bytecode cache, not measured
    cold = [run(FIRST, {**env, "CORE_CACHE_DIR": os.path.join(tmp, f"cold{i}")}) for i in range(args.runs)]
    warm_env = {**env, "CORE_CACHE_DIR": os.path.join(tmp, "cold0")}
    warm = [run(FIRST, warm_env) for _ in range(args.runs)]
    numpy = [run(NUMPY, env) for _ in range(args.runs)]
  print(f"import core + first result, new process each, DEV={args.dev or '(default)'}, {args.runs} runs: median (min-max)")
  summary("cold compile cache", cold)
  summary("warm compile cache", warm)
  summary("import numpy (reference)", numpy)

if __name__ == "__main__": main()
