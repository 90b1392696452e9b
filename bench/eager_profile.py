"""Per-stage cost of one tiny eager realize, `(x + 1).realize()`, on the current DEV: build, schedule lookup, run, result.
Run: DEV=CPU python bench/eager_profile.py [--profile]   (also DEV=DIRECT+CPU); the min over many repeats, in microseconds."""
from __future__ import annotations
import cProfile, os, pstats, sys, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))   # core from a checkout
import numpy as np

def best_us(fn, n: int = 20, rounds: int = 60) -> tuple[float, float]:
  """(wall, this thread's CPU time) per call, each the min over `rounds` of the mean over `n` calls: the machine is shared, so
  the min is the least contended figure; CPU time leaves out the time other processes had the core."""
  wall = cpu = float("inf")
  for _ in range(rounds):
    st, ct = time.perf_counter_ns(), time.thread_time_ns()
    for _ in range(n): fn()
    wall, cpu = min(wall, (time.perf_counter_ns() - st) / n / 1e3), min(cpu, (time.thread_time_ns() - ct) / n / 1e3)
  return wall, cpu

def main() -> None:
  from core import Tensor
  from core.engine import realize as R
  from core.engine.run import run_items
  from core.device.registry import Device
  a = Tensor(np.arange(64, dtype=np.float32)).realize()
  for _ in range(50): (a + 1).realize()   # compile, fill the caches
  assert np.allclose((a + 1).numpy(), np.arange(64) + 1)
  dev = Device[a.device]
  c = a + 1
  w = R._walk([c.uop], True)
  assert w is not None
  key, inputs, *_ = w
  items, _, var_vals = R._scheduled([c.uop], key, inputs)
  stages = {
    "tensor build (a + 1)": lambda: a + 1,
    "schedule lookup (_walk: structural key)": lambda: R._walk([c.uop], True),
    "schedule hit (_scheduled: rebind buffers)": lambda: R._scheduled([c.uop], key, inputs),
    "run (lower/submit/wait)": lambda: run_items(R._scheduled([c.uop], key, inputs)[0], var_vals),
    "eager fast path (_run_eager: bind, submit, wait)": lambda: R._run_eager(key, inputs),
    "  one-level walk (_walk_one)": lambda: R._walk_one(c.uop),
    "realize (all but build)": lambda: R.realize((a + 1).uop),
    "Tensor.realize (end to end)": lambda: (a + 1).realize(),
    "Tensor.realize + synchronize (bench/suite.py)": lambda: ((a + 1).realize(), dev.synchronize()),
    "  synchronize alone": dev.synchronize,
  }
  if getattr(dev, "hcq", None) is not None:
    from core.engine.run import hcq_submission, buffer_of
    sub, slots = hcq_submission(items)
    bufs = [buffer_of(b) for b in slots]
    stages["  hcq_submission (cache key)"] = lambda: hcq_submission(items)
    stages["  Submission.run, no wait"] = lambda: (sub.run(bufs, var_vals, wait=False), sub.wait())
    stages["  submit + wait only (prg call)"] = lambda: (sub.prg(*sub.args), sub.wait())
  print(f"DEV={os.environ.get('DEV', '(default)')} device {a.device} hcq={getattr(dev, 'hcq', None) is not None}")
  print(f"  {'stage':50s} {'wall us':>8s} {'cpu us':>8s}")
  for name, fn in list(stages.items()) + [("numpy a + 1 (reference)", lambda: np.arange(64, dtype=np.float32) + 1)]:
    print(f"  {name:50s} {best_us(fn)[0]:8.1f} {best_us(fn)[1]:8.1f}")
  if "--profile" in sys.argv:
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(500): (a + 1).realize()
    pr.disable()
    pstats.Stats(pr).sort_stats("tottime").print_stats(25)

if __name__ == "__main__": main()
