"""Issue 24's speed rows: the three ONNX models the tests use (core/onnx/testing.py: ResNet-style, MobileNet-style with depthwise
convolutions, a transformer encoder) on core against onnxruntime in the same process. Prints inferences per second of each and
the ratio core / onnxruntime (the goal: >= 0.8x) for core's eager runner, its Jit replay and a compiled file's replay
(core.onnx.load_compiled: direct launches, CPU's default, and through the command queues), with each model's ONNX node and kernel
counts and the machine's load.
Every runner's output is checked against onnxruntime's before it is timed. Timing is the median of `--repeat` rounds, each as many
calls as fill `--seconds`; copies in and out are included on both sides.
Run: DEV=CPU python bench/onnx_models.py [--quick] [--models resnet,transformer] [--ort-threads 1]"""
from __future__ import annotations
import argparse, os, statistics, sys, tempfile, time
from typing import Any, Callable
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))   # core from a checkout
import numpy as np  # noqa: E402

def per_second(fn: Callable[[], Any], seconds: float, repeat: int) -> float:
  """Calls per second: the median over `repeat` rounds of as many calls as fill `seconds` (one warm-up call first)."""
  fn()
  rates = []
  for _ in range(repeat):
    n, st = 0, time.perf_counter()
    while (el := time.perf_counter() - st) < seconds or n == 0:
      fn()
      n += 1
    rates.append(n / el)
  return statistics.median(rates)

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
    "compiled": lambda: compiled({"x": x})[out],
    "compiled+queues": lambda: queued({"x": x})[out],
  }
  want = fns["onnxruntime"]()
  for k in ("eager", "Jit", "Jit", "Jit", "compiled", "compiled+queues"):   # the Jit's first calls run eagerly and capture: checked too
    np.testing.assert_allclose(fns[k](), want, rtol=1e-4, atol=1e-5, err_msg=f"{name}: {k} differs from onnxruntime")
  batch = shape[0]
  load = os.getloadavg()[0]
  # eager calls take milliseconds: fewer rounds of them
  rates = {k: batch * per_second(f, seconds, repeat if k != "eager" else max(1, repeat // 2)) for k, f in fns.items()}
  return {"model": name, "shape": shape, "nodes": len(model.graph.node), "kernels": len(step.items),
          "load": (load + os.getloadavg()[0]) / 2, **rates}

COLS = ("eager", "Jit", "compiled", "compiled+queues")

def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
  from core.onnx.testing import MODELS
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--quick", action="store_true", help="short rounds (a smoke run, not a measurement)")
  p.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of {','.join(MODELS)}")
  p.add_argument("--seconds", type=float, default=1.0, help="length of one timing round")
  p.add_argument("--repeat", type=int, default=5, help="timing rounds (the median is printed)")
  p.add_argument("--ort-threads", type=int, default=0, help="onnxruntime's intra-op threads (0: its default, all cores)")
  a = p.parse_args(argv)
  seconds, repeat = (0.05, 1) if a.quick else (a.seconds, a.repeat)
  from core import Device
  print(f"device {Device.DEFAULT}, onnxruntime intra-op threads {a.ort_threads or 'default'}, {os.cpu_count()} CPUs; "
        f"inferences/s (median of {repeat}) and the ratio to onnxruntime; load: the 1-minute load average while measuring")
  print(f"{'model':12s} {'input':10s} {'nodes':>5s} {'kernels':>7s} {'load':>5s} {'onnxruntime':>11s} " +
        " ".join(f"{c:>22s}" for c in COLS))
  rows = []
  for name in a.models.split(","):
    r = bench_model(name, seconds, repeat, a.ort_threads)
    rows.append(r)
    ref = r["onnxruntime"]
    print(f"{name:12s} {'x'.join(map(str, r['shape'])):10s} {r['nodes']:5d} {r['kernels']:7d} {r['load']:5.1f} {ref:11.1f} " +
          " ".join(f"{r[c]:15.1f} {r[c] / ref:5.2f}x" for c in COLS))
  return rows

if __name__ == "__main__": main()
