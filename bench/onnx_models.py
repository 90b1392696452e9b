"""Issue 24's speed rows: the three ONNX models the tests use (core/onnx/testing.py: ResNet-style, MobileNet-style with depthwise
convolutions, a transformer encoder) on core against onnxruntime in the same process. Prints inferences per second of each and
the ratio core / onnxruntime (the goal: >= 0.8x) for core's eager runner, its Jit replay (called with Tensor(x), and with the numpy
array itself) and a compiled file's replay
(core.onnx.load_compiled: direct launches, CPU's default, and through the command queues), with each model's ONNX node and kernel
counts and the machine's load.
Every runner's output is checked against onnxruntime's before it is timed. Each of `--repeat` rounds times every runner in turn for
`--seconds`, every other round in reverse order (so a busy machine's swings fall on all alike); printed are the median rate, the median
of the per-round ratios, and under it the ratio of the median rates and the quartiles of the per-round ratios (their spread).
CPU: the pool's idle threads are parked before onnxruntime's turn, so they take no core from its threads.
Copies in and out are included on both sides.
Run: DEV=CPU python bench/onnx_models.py [--quick] [--models resnet,transformer] [--ort-threads 1]"""
from __future__ import annotations
import argparse, os, statistics, sys, tempfile, time
from typing import Any, Callable
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))   # core from a checkout
import numpy as np  # noqa: E402

def interleaved_rates(fns: dict[str, Callable[[], Any]], seconds: float, repeat: int,
                      before: dict[str, Callable[[], None]] | None = None) -> dict[str, list[float]]:
  """Calls per second of each fn in each of `repeat` rounds (one warm-up call of each first). A round times every fn in turn for
  `seconds`, in the order given and every other round in reverse, so a change in the machine's load falls on all of them alike
  and none is always timed right after the same neighbour. `before[k]` runs untimed before fn k's turn."""
  for f in fns.values(): f()
  rounds: dict[str, list[float]] = {k: [] for k in fns}
  for r in range(repeat):
    for k in (list(fns) if r % 2 == 0 else list(fns)[::-1]):
      if before and k in before: before[k]()
      f, n, st = fns[k], 0, time.perf_counter()
      while (el := time.perf_counter() - st) < seconds or n == 0:
        f()
        n += 1
      rounds[k].append(n / el)
  return rounds

def ratio_stats(rounds: dict[str, list[float]], ref: str) -> dict[str, tuple[float, float, float, float]]:
  """Per fn, its rate against `ref`'s: (median of the per-round ratios, ratio of the median rates, lower and upper quartile of
  the per-round ratios). The two medians differ when the load changed between rounds; the quartiles show how much rounds swing."""
  out = {}
  for k, v in rounds.items():
    rs = sorted(a / b for a, b in zip(v, rounds[ref]))
    q = statistics.quantiles(rs, n=4) if len(rs) > 1 else [rs[0]] * 3
    out[k] = (statistics.median(rs), statistics.median(v) / statistics.median(rounds[ref]), q[0], q[2])
  return out

def bench_model(name: str, seconds: float, repeat: int, ort_threads: int) -> dict[str, Any]:
  import onnxruntime as ort
  from core import Jit, Tensor
  from core.onnx import OnnxRunner, compile_model, load_compiled
  from core.onnx.testing import MODELS
  model, shape = MODELS[name]()
  out = model.graph.output[0].name
  x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
  opts = ort.SessionOptions()
  if ort_threads: opts.intra_op_num_threads = ort_threads
  sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
  runner = OnnxRunner(model)
  step = Jit(lambda t: runner({"x": t})[out])
  with tempfile.TemporaryDirectory() as d:
    compile_model(model).save(path := os.path.join(d, "m.core"))
    compiled, queued = load_compiled(path), load_compiled(path, queues=True)
  fns: dict[str, Callable[[], np.ndarray]] = {
    "onnxruntime": lambda: sess.run(None, {"x": x})[0],
    "eager": lambda: runner({"x": Tensor(x)})[out].numpy(),
    "Jit": lambda: step(Tensor(x)).numpy(),
    "Jit(ndarray)": lambda: step(x).numpy(),   # the array itself as the input: copied into the Jit's own input buffer
    "compiled": lambda: compiled({"x": x})[out],
    "compiled+queues": lambda: queued({"x": x})[out],
  }
  want = fns["onnxruntime"]()
  for k in ("eager", "Jit", "Jit", "Jit", "Jit(ndarray)", "compiled", "compiled+queues"):   # the Jit's first calls run eagerly and capture: checked too
    np.testing.assert_allclose(fns[k](), want, rtol=1e-4, atol=1e-5, err_msg=f"{name}: {k} differs from onnxruntime")
  batch = shape[0]
  load = os.getloadavg()[0]
  rounds = interleaved_rates(fns, seconds, repeat, {"onnxruntime": _park_our_pool()})
  return {"model": name, "shape": shape, "nodes": len(model.graph.node), "kernels": len(step.items),
          "load": (load + os.getloadavg()[0]) / 2, **{k: batch * statistics.median(v) for k, v in rounds.items()},
          "stats": ratio_stats(rounds, "onnxruntime"), "ratio": {k: v[0] for k, v in ratio_stats(rounds, "onnxruntime").items()}}

def _park_our_pool() -> Callable[[], None]:
  """Puts the CPU pool's idle threads to sleep before onnxruntime's turn (they poll for a while after our last kernel and would
  take a core from its threads); nothing on other devices."""
  from core import Device
  if Device.DEFAULT.split(":")[0] != "CPU": return lambda: None
  from plugin_cpu.native import park_pool
  return park_pool

COLS = ("eager", "Jit", "Jit(ndarray)", "compiled", "compiled+queues")

def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
  from core.onnx.testing import MODELS
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--quick", action="store_true", help="short rounds (a smoke run, not a measurement)")
  p.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of {','.join(MODELS)}")
  p.add_argument("--seconds", type=float, default=0.1, help="how long each runner is timed in one round")
  p.add_argument("--repeat", type=int, default=21, help="timing rounds (the medians are printed)")
  p.add_argument("--ort-threads", type=int, default=0, help="onnxruntime's intra-op threads (0: its default, all cores)")
  a = p.parse_args(argv)
  seconds, repeat = (0.05, 1) if a.quick else (a.seconds, a.repeat)
  from core import Device
  print(f"device {Device.DEFAULT}, onnxruntime intra-op threads {a.ort_threads or 'default'}, {os.cpu_count()} CPUs; "
        f"inferences/s (median of {repeat} interleaved rounds of {seconds} s) and the ratio to onnxruntime (median of the rounds' "
        "ratios); under it the ratio of the median rates [the rounds' ratios' quartiles]; load: the 1-minute load average while measuring")
  print(f"{'model':12s} {'input':10s} {'nodes':>5s} {'kernels':>7s} {'load':>5s} {'onnxruntime':>11s} " +
        " ".join(f"{c:>22s}" for c in COLS))
  rows = []
  for name in a.models.split(","):
    r = bench_model(name, seconds, repeat, a.ort_threads)
    rows.append(r)
    ref = r["onnxruntime"]
    print(f"{name:12s} {'x'.join(map(str, r['shape'])):10s} {r['nodes']:5d} {r['kernels']:7d} {r['load']:5.1f} {ref:11.1f} " +
          " ".join(f"{r[c]:15.1f} {r['ratio'][c]:5.2f}x" for c in COLS))
    print(f"{'':12s} {'':10s} {'':5s} {'':7s} {'':5s} {'ratios:':>11s} " +
          " ".join(f"{'{:.2f} [{:.2f}-{:.2f}]'.format(*r['stats'][c][1:]):>22s}" for c in COLS))
  return rows

if __name__ == "__main__": main()
