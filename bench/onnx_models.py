"""Issue 24's speed rows: the three ONNX models the tests use (core/onnx/testing.py: ResNet-style, MobileNet-style with depthwise
convolutions, a transformer encoder) on core against onnxruntime in the same process. Prints inferences per second of each and
the ratio core / onnxruntime (the goal: >= 0.8x) for core's eager runner, its Jit replay (called with Tensor(x), and with the numpy
array itself) and a compiled file's replay
(core.onnx.load_compiled: direct launches, CPU's default, and through the command queues), with each model's ONNX node and kernel
counts and the machine's load.
Every runner's output is checked against onnxruntime's before it is timed. Each of `--repeat` rounds times every runner in turn for
`--seconds` (so a busy machine's swings fall on all alike); printed are the median rate and the median of the per-round ratios.
Copies in and out are included on both sides.
Run: DEV=CPU python bench/onnx_models.py [--quick] [--models resnet,transformer] [--ort-threads 1]"""
from __future__ import annotations
import argparse, os, statistics, sys, tempfile, time
from typing import Any, Callable
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))   # core from a checkout
import numpy as np  # noqa: E402

def interleaved_rates(fns: dict[str, Callable[[], Any]], seconds: float, repeat: int) -> tuple[dict[str, float], dict[str, float]]:
  """Calls per second of each fn and its ratio to the first fn: `repeat` rounds, each timing every fn in turn for `seconds` (one
  warm-up call first), so a change in the machine's load falls on all of them alike; the medians over the rounds, the ratio taken
  within each round."""
  for f in fns.values(): f()
  rounds: dict[str, list[float]] = {k: [] for k in fns}
  for _ in range(repeat):
    for k, f in fns.items():
      n, st = 0, time.perf_counter()
      while (el := time.perf_counter() - st) < seconds or n == 0:
        f()
        n += 1
      rounds[k].append(n / el)
  ref = next(iter(rounds.values()))
  return ({k: statistics.median(v) for k, v in rounds.items()},
          {k: statistics.median(a / b for a, b in zip(v, ref)) for k, v in rounds.items()})

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
  rates, ratios = interleaved_rates(fns, seconds, repeat)
  return {"model": name, "shape": shape, "nodes": len(model.graph.node), "kernels": len(step.items),
          "load": (load + os.getloadavg()[0]) / 2, **{k: batch * v for k, v in rates.items()}, "ratio": ratios}

COLS = ("eager", "Jit", "Jit(ndarray)", "compiled", "compiled+queues")

def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
  from core.onnx.testing import MODELS
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--quick", action="store_true", help="short rounds (a smoke run, not a measurement)")
  p.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of {','.join(MODELS)}")
  p.add_argument("--seconds", type=float, default=0.25, help="how long each runner is timed in one round")
  p.add_argument("--repeat", type=int, default=9, help="timing rounds (the medians are printed)")
  p.add_argument("--ort-threads", type=int, default=0, help="onnxruntime's intra-op threads (0: its default, all cores)")
  a = p.parse_args(argv)
  seconds, repeat = (0.05, 1) if a.quick else (a.seconds, a.repeat)
  from core import Device
  print(f"device {Device.DEFAULT}, onnxruntime intra-op threads {a.ort_threads or 'default'}, {os.cpu_count()} CPUs; "
        f"inferences/s (median of {repeat} interleaved rounds) and the ratio to onnxruntime (median of the rounds' ratios); "
        "load: the 1-minute load average while measuring")
  print(f"{'model':12s} {'input':10s} {'nodes':>5s} {'kernels':>7s} {'load':>5s} {'onnxruntime':>11s} " +
        " ".join(f"{c:>22s}" for c in COLS))
  rows = []
  for name in a.models.split(","):
    r = bench_model(name, seconds, repeat, a.ort_threads)
    rows.append(r)
    ref = r["onnxruntime"]
    print(f"{name:12s} {'x'.join(map(str, r['shape'])):10s} {r['nodes']:5d} {r['kernels']:7d} {r['load']:5.1f} {ref:11.1f} " +
          " ".join(f"{r[c]:15.1f} {r['ratio'][c]:5.2f}x" for c in COLS))
  return rows

if __name__ == "__main__": main()
