"""bench/suite.py's paired bandwidth rows: each row's frameworks and the machine's loop at its footprint are sampled in turn, and
every ratio is the median of the per-sample ratios with their range. Pure functions and fakes; no speed is asserted."""
from __future__ import annotations
import dataclasses, io, statistics
import pytest
from bench_scripts import load_bench

@pytest.fixture(scope="module")
def suite():
  return load_bench("suite")

def _row(suite, key):
  return next(r for r in suite.ROWS if r.key == key)

def test_only_bandwidth_rows_are_paired(suite):
  assert [r.key for r in suite.ROWS if suite.paired(r)] == ["nchw_nhwc", "nhwc_nchw", "mul_add", "sum", "softmax", "layernorm", "transpose"]

def test_sample_order_rotates(suite):
  names = ["ours", "torch", "loop"]
  orders = [suite.sample_order(names, i) for i in range(4)]
  assert orders == [["ours", "torch", "loop"], ["torch", "loop", "ours"], ["loop", "ours", "torch"], ["ours", "torch", "loop"]]
  assert suite.sample_order([], 3) == []

def test_paired_ratios_take_each_sample_alone(suite):
  # a slow spell (first sample) and a fast one: the per-sample ratio is 1.2 in both; a ratio of separate medians would not be
  samples = [{"ours": 60.0, "torch": 50.0}, {"ours": 120.0, "torch": 100.0}, {"ours": 120.0}, {"torch": 80.0, "ours": 0.0}]
  assert suite.paired_ratios(samples, "ours", "torch") == pytest.approx([1.2, 1.2])   # only samples with both figures
  assert suite.spread([3.0, 1.0, 2.0, 10.0]) == (2.5, 1.0, 10.0) and suite.spread([]) is None

def _spells(suite):
  """mul_add sampled in a slow spell, then twice in a fast one: ours 1.2x torch and 94% of the triad loop in each sample."""
  row = _row(suite, "mul_add")
  samples = [{"ours": 60.0, "torch": 50.0, "numpy": 20.0, "loop": 64.0, "loop 1 thread": 62.0},
             {"ours": 120.0, "torch": 100.0, "numpy": 25.0, "loop": 128.0, "loop 1 thread": 60.0},
             {"ours": 120.0, "torch": 100.0, "numpy": 25.0, "loop": 128.0, "loop 1 thread": 64.0}]
  cells = {k: suite.Cell(statistics.median([s[k] for s in samples]), values=[s[k] for s in samples]) for k in ("ours", "torch", "numpy")}
  # the loop measured with the machine's other figures (best of 10, another spell) is not what the row is judged by
  m = suite.machine_bench.Machine(16, 2, 200.0, 400.0, 60.0, 60.0, 60.0, 60.0, 60.0, 60.0, {("triad", 3 * 4 * row.sizes[0]["n"]): 200.0})
  return suite.Result(row, row.sizes[0], cells, m, samples)

def test_a_paired_row_is_judged_by_its_samples(suite):
  r = _spells(suite)
  assert r.ratio == pytest.approx(1.2) and r.bw_share == pytest.approx(120 / 128)
  assert r.met is True   # 1.2x torch, 94% of the loop sampled beside it (60% of the machine's best-of-10 figure)
  assert suite._share(r, r.machine) == "94% triad bw"   # every sample the same share: no range
  r.samples[0]["ours"] = 50.0   # one sample's ours slower: ratios 1.0, 1.2, 1.2 and shares 78%, 94%, 94%
  assert r.ratio == pytest.approx(1.2) and suite._ratio_text(r) == "1.20x [1.00-1.20]"
  assert suite._share(r, r.machine) == "94% triad bw [78-94]"
  r.samples[1]["ours"] = r.samples[2]["ours"] = 110.0   # now the median share is 86%: a miss of the 0.9x bandwidth target
  assert r.bw_share == pytest.approx(110 / 128) and r.met is False
  # no torch in any sample: no ratio, so the target is unknown (as a missing peer is)
  for s in r.samples: del s["torch"]
  assert r.ratio is None and r.met is None and suite._ratio_text(r) == "-"

def test_a_permute_row_is_judged_against_the_sampled_loop(suite):
  row = _row(suite, "transpose")
  perm = dataclasses.replace(row, ref="copy", target=0.8)
  samples = [{"ours": 40.0, "loop": 50.0}, {"ours": 90.0, "loop": 100.0}, {"ours": 45.0, "loop": 60.0}]
  r = suite.Result(perm, perm.sizes[0], {"ours": suite.Cell(45.0, values=[40.0, 90.0, 45.0])}, None, samples)
  assert r.ratio == pytest.approx(0.8) and r.met is True and r.bw_share == pytest.approx(0.8)

def test_spell_text_says_where_the_samples_fell(suite):
  r = _spells(suite)
  text = suite.spell_text(r.samples, "triad", 192 << 20)
  assert text == "machine triad 192 MiB 128 GB/s [64-128], 2.00x [1.03-2.13] its 1-thread figure", text
  assert suite.spell_text([{"ours": 1.0}], "copy", 1 << 20) == "no machine loop sampled"

def test_burst_times_after_an_untimed_call(suite, monkeypatch):
  figures = iter([1.0, 5.0, 3.0, 4.0, 99.0])
  calls: list[float] = []
  def call() -> float:
    calls.append(x := next(figures))
    return x
  assert suite.burst(call, "min") == 5.0 and calls == [1.0, 5.0, 3.0, 4.0]   # the first call not counted; stat min: the most GB/s
  figures = iter([1.0, 5.0, 3.0, 4.0])
  assert suite.burst(lambda: next(figures), "median") == 4.0
  # a slow framework: one timed call once SAMPLE_S is spent
  clock = [0.0]
  monkeypatch.setattr(suite.time, "perf_counter", lambda: clock[0])
  def slow() -> float:
    clock[0] += 1.0
    return 2.0
  n = []
  assert suite.burst(lambda: n.append(1) or slow(), "min") == 2.0 and len(n) == 2

def test_sample_pairs_interleaves_and_settles(suite):
  log: list[str] = []
  def fake(name: str, value: float):
    def call() -> float:
      log.append(name)
      return value
    return call
  calls = {"ours": fake("ours", 2.0), "torch": fake("torch", 1.0), "loop": fake("loop", 4.0)}
  samples, failed = suite.sample_pairs(calls, lambda: log.append("settle"), 3, 100.0, "min")
  assert failed == {} and samples == [{"ours": 2.0, "torch": 1.0, "loop": 4.0}] * 3
  bursts = [log[i + 1] for i, x in enumerate(log) if x == "settle"]   # each burst starts after a settle, in rotating order
  assert bursts == ["ours", "torch", "loop", "torch", "loop", "ours", "loop", "ours", "torch"], log
  # a participant that raises is reported and left out of the later samples; the others go on
  def broken() -> float: raise RuntimeError("gone\nmore")
  samples, failed = suite.sample_pairs({"ours": fake("ours", 2.0), "numpy": broken}, lambda: None, 2, 100.0, "min")
  assert samples == [{"ours": 2.0}, {"ours": 2.0}] and failed == {"numpy": "RuntimeError: gone"}
  # no budget: one sample
  assert len(suite.sample_pairs(calls, lambda: None, 10, 0.0, "min")[0]) == 1

def test_a_round_adds_all_its_samples(suite):
  c = suite.Cell(2.0, values=[1.0, 2.0, 3.0])
  c.add_round(suite.Cell(10.0, values=[10.0, 9.0]))
  assert c.values == [1.0, 2.0, 3.0, 10.0, 9.0] and c.value == 3.0

def test_quick_paired_rows(suite):
  # the real thing at --quick sizes: every paired row's samples hold ours and the loop (and numpy's), the cells' figures are
  # the samples' medians, and the table and the spell lines say so
  out = io.StringIO()
  results = suite.run(rows=["sum", "nchw_nhwc", "tiny_op"], quick=True, repeat=3, budget_s=10.0, peers=["numpy"], out=out, rounds=2)
  text = out.getvalue()
  by_key = {r.row.key: r for r in results}
  assert by_key["tiny_op"].samples == []
  for key in ("sum", "nchw_nhwc"):
    r = by_key[key]
    assert len(r.samples) == 6 and all({"ours", "numpy", "loop", "loop 1 thread"} <= set(s) for s in r.samples), r.samples
    assert r.cells["ours"].values == [s["ours"] for s in r.samples] and r.cells["ours"].value == statistics.median(r.cells["ours"].values)
    assert r.bw_share == pytest.approx(statistics.median([s["ours"] / s["loop"] for s in r.samples]))
    assert f"\n{key}: 6 samples; machine {r.row.bw} {r.footprint / 2**20:.3g} MiB " in text, text
  assert by_key["nchw_nhwc"].ratio == by_key["nchw_nhwc"].bw_share
