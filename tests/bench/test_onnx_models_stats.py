"""bench/onnx_models.py's statistic: rounds alternate their order, and the ratios it prints are the median of the per-round ratios,
the ratio of the median rates and the per-round ratios' quartiles."""
from __future__ import annotations
import pytest
from bench_scripts import load_bench

@pytest.fixture(scope="module")
def bench():
  return load_bench("onnx_models")

def test_rounds_alternate_their_order_and_run_the_hooks(bench):
  order: list[str] = []
  fns = {k: (lambda k=k: order.append(k)) for k in "abc"}
  rounds = bench.interleaved_rates(fns, 0.0, 3, before={"b": lambda: order.append("park")})
  assert order == list("abc") + ["a", "park", "b", "c"] + ["c", "park", "b", "a"] + ["a", "park", "b", "c"]
  assert {k: len(v) for k, v in rounds.items()} == {"a": 3, "b": 3, "c": 3}

def test_ratio_stats(bench):
  rounds = {"ref": [10.0, 20.0, 40.0, 10.0, 10.0], "x": [8.0, 10.0, 40.0, 9.0, 5.0]}
  med, of_medians, lo, hi = bench.ratio_stats(rounds, "ref")["x"]
  # per-round ratios 0.8, 0.5, 1.0, 0.9, 0.5: median 0.8; median rates 9 / 10; quartiles (exclusive method) 0.5 and 0.95
  assert (med, of_medians, lo, hi) == pytest.approx((0.8, 0.9, 0.5, 0.95))
  assert bench.ratio_stats({"ref": [4.0], "x": [2.0]}, "ref")["x"] == (0.5, 0.5, 0.5, 0.5)
