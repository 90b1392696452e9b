"""First-call cost against model depth (issue 23): a Jit-captured SGD step of an MLP with 2, 8 and 32 hidden layers of width
256 (batch 64), each in a new process, timed from the first call's start to its result, with a cold compile cache (a fresh
folder) and a warm one (the same folder again); tinygrad in the same setting when it is installed (its disk cache off for the
cold figure). A good compiler's first call grows with the model's distinct kernels, not with its depth.
Run: python bench/first_call.py [--depths 2,8,32]"""
from __future__ import annotations
import argparse, os, subprocess, sys, tempfile, time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")

# the same step for both frameworks: their Tensor APIs agree on everything used here
STEP = """
import sys, time
t0 = time.perf_counter()
depth, width, batch = {depth}, 256, 64
import numpy as np
{imports}
rng = np.random.default_rng(0)
ws = [Tensor(rng.uniform(-0.06, 0.06, (width, width)).astype(np.float32), requires_grad=True) for _ in range(depth)]
ws.append(Tensor(rng.uniform(-0.06, 0.06, (width, 10)).astype(np.float32), requires_grad=True))
opt = SGD(ws, lr=0.01)
x = Tensor(rng.standard_normal((batch, width)).astype(np.float32))
y = Tensor(rng.integers(0, 10, batch).astype(np.int32))
@Jit
def step(x, y):
  with Tensor.train():
    opt.zero_grad()
    h = x
    for w in ws[:-1]: h = (h @ w).relu()
    loss = (h @ ws[-1]).sparse_categorical_crossentropy(y)
    loss.backward()
    opt.step()
    return loss.realize()
st = time.perf_counter()
first = step(x, y).item()
print("FIRST", time.perf_counter() - st, "SETUP", st - t0, "LOSS", first)
"""
IMPORTS = {
  "ours": "from core.tensor import Tensor\nfrom core.tensor.jit import Jit\nfrom core.tensor.nn.optim import SGD",
  "tinygrad": "from tinygrad import Tensor, TinyJit as Jit\nfrom tinygrad.nn.optim import SGD",
}

def first_call(lib: str, depth: int, cache: str | None) -> float | str:
  """Seconds of the first call in a new process; `cache`: the compile-cache folder (None: caching off)."""
  env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
  if lib == "ours":
    if cache is None: env["CORE_DISABLE_COMPILER_CACHE"] = "1"
    else: env["CORE_CACHE_DIR"] = cache
  else:
    env["CACHELEVEL"] = "0" if cache is None else "1"
    if cache is not None: env["CACHEDB"] = os.path.join(cache, "tinygrad.db")
  ret = subprocess.run([sys.executable, "-c", STEP.format(depth=depth, imports=IMPORTS[lib])], capture_output=True, text=True, env=env, timeout=900)
  line = next((ln for ln in ret.stdout.splitlines() if ln.startswith("FIRST")), None)
  if ret.returncode != 0 or line is None: return "err: " + (ret.stderr.strip().splitlines() or ["?"])[-1][:80]
  return float(line.split()[1])

def main(argv: list[str] | None = None) -> int:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--depths", default="2,8,32")
  a = p.parse_args(argv)
  depths = [int(d) for d in a.depths.split(",")]
  libs = ["ours"]
  try:
    import importlib.util
    if importlib.util.find_spec("tinygrad") is not None: libs.append("tinygrad")
  except ValueError: pass
  print(f"first call of a Jit-captured MLP SGD step (width 256, batch 64), seconds; peers: {', '.join(libs)}")
  print(f"{'depth':>5}  " + "  ".join(f"{lib + ' cold':>14}  {lib + ' warm':>14}" for lib in libs) + ("  ratio cold" if len(libs) > 1 else ""))
  failed = False
  for d in depths:
    cells: list[float | str] = []
    for lib in libs:
      with tempfile.TemporaryDirectory() as cache:
        cold = first_call(lib, d, None if lib == "tinygrad" else cache)
        first_call(lib, d, cache)   # fills the cache (for ours the cold run already did)
        warm = first_call(lib, d, cache)
      cells += [cold, warm]
    failed |= any(isinstance(c, str) for c in cells[:2])
    ours, peer = cells[0], cells[2] if len(cells) == 4 else None
    ratio = f"  {ours / peer:9.2f}x" if isinstance(ours, float) and isinstance(peer, float) else ""
    print(f"{d:>5}  " + "  ".join(f"{c:>14.2f}" if isinstance(c, float) else f"{c:>14}" for c in cells) + ratio, flush=True)
  print(f"at {time.strftime('%H:%M:%S')}; load average {os.getloadavg()[0]:.1f} on {len(os.sched_getaffinity(0))} cores")
  return 1 if failed else 0

if __name__ == "__main__":
  sys.exit(main())
