"""bench/suite.py in --quick mode on the default device: every row is printed, the check catches a wrong result, and a
missing peer is reported, not raised. Peers are limited to numpy (torch/tinygrad, when installed, are never needed)."""
from __future__ import annotations
import io, math, os, re, statistics, sys
import pytest
from bench_scripts import load_bench

BLAS_VARS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")

@pytest.fixture(scope="module")
def suite():
  saved = {k: os.environ.get(k) for k in BLAS_VARS}
  os.environ.update({k: "1" for k in BLAS_VARS})   # as some machines set them: the suite must drop them before numpy loads
  try: mod = load_bench("suite")
  finally:
    dropped = [k for k in BLAS_VARS if k not in os.environ]
    for k, v in saved.items():
      if v is None: os.environ.pop(k, None)
      else: os.environ[k] = v
  mod.dropped = dropped
  return mod

def test_peers_run_their_best_blas(suite):
  assert suite.dropped == list(BLAS_VARS)

def _table_rows(text: str) -> dict[str, list[str]]:
  """The table's lines by row key (first column), split on runs of 2+ spaces."""
  lines = text.splitlines()
  start = next(i for i, l in enumerate(lines) if l.startswith("row "))
  return {(cols := re.split(r"\s{2,}", l.strip()))[0]: cols for l in lines[start + 2:] if l and not l.startswith(" ") and ":" not in l}

def test_quick_every_row(suite):
  out = io.StringIO()
  results = suite.run(quick=True, repeat=1, budget_s=0.0, peers=["numpy"], out=out)
  text = out.getvalue()
  rows = _table_rows(text)
  assert list(rows) == suite.ROW_KEYS, text
  assert [r.row.key for r in results] == suite.ROW_KEYS
  from suite_libs import host_bf16_dot
  from core import Device
  # on the CPU device, a CPU without the bf16 dot product or code rendered for one (DEV=CPU:LLVM:znver3): the row says so
  bf16 = (Device.DEFAULT.split(":")[0] != "CPU" or
          host_bf16_dot() and "avx512_bf16" in getattr(Device[Device.DEFAULT].renderer, "flags", ()))
  for r in results:
    ours = r.cells["ours"]
    if r.row.key == "matmul_bf16" and not bf16:
      assert ours.status == "n/a" and "matmul_bf16: ours n/a (no avx512_bf16)" in text, text
      continue
    assert ours.status == "" and ours.value is not None and ours.value > 0, (r.row.key, ours, text)
    assert ours.first_s is not None and ours.first_s > 0
  # numpy runs the rows it has, and says n/a for the rest
  by_key = {r.row.key: r for r in results}
  for key in ("matmul1024", "matmul2048", "nchw_nhwc", "nhwc_nchw", "mul_add", "sum", "softmax", "layernorm", "transpose", "tiny_op"): assert (by_key[key].cells["numpy"].value or 0) > 0, key
  for key in ("matmul_bf16", "conv2d", "conv_stem", "conv_dw", "conv_dw_s2", "conv1x1", "mlp", "resnet18", "resnet18_train", "gpt2_block", "sdpa", "jit_replay",
              "first_compile"):
    assert by_key[key].cells["numpy"].status == "n/a", key
  # the layout rows are judged against the copy loop sampled beside them (tests/bench/test_suite_pairs.py)
  perm = by_key["nchw_nhwc"]
  assert perm.machine is not None and perm.ratio == pytest.approx(statistics.median(s["ours"] / s["loop"] for s in perm.samples))
  # ... measured over the row's own footprint (bytes moved per call), as every bandwidth row's ceiling is
  assert perm.footprint == 2 * 4 * math.prod(perm.size["shape"]) and ("copy", perm.footprint) in perm.machine.sized
  assert ("read", by_key["sum"].footprint) in perm.machine.sized and ("triad", by_key["mul_add"].footprint) in perm.machine.sized
  # the matmul ratio is taken against numpy, and a figure appears for it
  assert by_key["matmul1024"].ratio == pytest.approx(by_key["matmul1024"].cells["ours"].value / by_key["matmul1024"].cells["numpy"].value)
  # the bf16 row is judged against our float32 row of the same run
  bf = by_key["matmul_bf16"]
  if bf.cells["ours"].value: assert bf.ratio == pytest.approx(bf.cells["ours"].value / by_key["matmul1024"].cells["ours"].value)
  assert rows["matmul1024"][-4].endswith("x"), rows["matmul1024"]
  assert "machine:" in text and "renderer" in text and "cores" in text and "BLAS:" in text
  # the machine's own figures, and the rows as shares of them
  m = re.search(r"FMA peak (\d+) GFLOP/s on (\d+) threads \((\d+) on 1.*copy ([\d.]+) GB/s.*triad ([\d.]+) GB/s.*read ([\d.]+) GB/s", text)
  assert m and all(float(x) > 0 for x in m.groups()), text
  assert rows["matmul1024"][-5].endswith("% peak") and rows["tiny_op"][-5] == "-", text
  # each bandwidth row names the bandwidth it is a share of: a reduction's is the read bandwidth, a layout change's the copy's
  assert rows["sum"][-5].endswith("% read bw") and rows["transpose"][-5].endswith("% copy bw") and rows["mul_add"][-5].endswith("% triad bw"), text
  m_all = by_key["sum"].machine
  assert m_all is not None and m_all.bandwidth("read") == m_all.read_all > 0

def test_conv_reference(suite):
  """The float64 reference the conv rows are checked against, on cases worked out by hand (not by another conv)."""
  import numpy as np
  ref = suite.conv_reference
  x = np.arange(2 * 4 * 5 * 5, dtype=np.float32).reshape(2, 4, 5, 5)
  # a 1x1 kernel is a matmul over channels
  w1 = np.arange(3 * 4, dtype=np.float32).reshape(3, 4, 1, 1) - 5
  np.testing.assert_allclose(ref(x, w1, padding=0), np.einsum("nchw,oc->nohw", x, w1[:, :, 0, 0]))
  # depthwise (groups = channels) with a kernel of ones: each channel's 3x3 window sums, zero padding at the border
  ones = np.ones((4, 1, 3, 3), np.float32)
  got = ref(x, ones, padding=1, groups=4)
  xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
  assert got[1, 2, 0, 0] == xp[1, 2, 0:3, 0:3].sum() and got[0, 3, 2, 4] == xp[0, 3, 2:5, 4:7].sum()
  # stride 2 keeps every second output of stride 1
  np.testing.assert_allclose(ref(x, ones, stride=2, padding=1, groups=4), got[:, :, ::2, ::2])
  # two groups: the outputs of the second group see only the second half of the channels
  w2 = np.zeros((2, 2, 1, 1), np.float32); w2[1, 1] = 1
  np.testing.assert_allclose(ref(x, w2, padding=0, groups=2)[:, 1], x[:, 3])

def test_model_references(suite):
  """The float64 references of the model rows: numpy's ResNet forward (used where torch is missing) against torch's, and
  causal attention against a loop over the query rows."""
  import numpy as np
  models = suite.models
  d = models.resnet_data({"batch": 2, "hw": 32, "width": 4, "classes": 5, "blocks": (1, 2)}, np.random.default_rng(1))
  got = models.numpy_resnet(d)
  assert got.shape == (2, 5) and np.isfinite(got).all()
  a = models.sdpa_data({"batch": 1, "heads": 2, "seq": 5, "width": 6}, np.random.default_rng(2))
  ref = models.sdpa_reference(a)
  for i in range(5):   # row i attends to keys 0..i
    s = np.einsum("bhe,bhje->bhj", a["q"][..., i, :].astype(np.float64), a["k"][..., : i + 1, :]) / np.sqrt(3)
    w = np.exp(s - s.max(-1, keepdims=True))
    np.testing.assert_allclose(ref[..., i, :], np.einsum("bhj,bhje->bhe", w / w.sum(-1, keepdims=True), a["v"][..., : i + 1, :]), rtol=1e-12)
  pytest.importorskip("torch")
  want = models.resnet_reference(d)   # torch's float64 form
  np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)

def test_wrong_result_is_caught(suite):
  out = io.StringIO()
  results = suite.run(rows=["sum", "tiny_op"], quick=True, repeat=1, budget_s=0.0, peers=["numpy"], wrong={"sum"}, out=out)
  text = out.getvalue()
  by_key = {r.row.key: r for r in results}
  assert by_key["sum"].cells["ours"].status == "WRONG" and by_key["sum"].cells["ours"].value is None
  assert by_key["sum"].met is False and by_key["sum"].ratio is None
  assert by_key["tiny_op"].cells["ours"].status == "" and by_key["tiny_op"].cells["ours"].value > 0
  assert _table_rows(text)["sum"][3] == "WRONG", text
  assert "sum: ours is WRONG" in text
  # the command line says so in its exit status
  assert suite.main(["--quick", "--rows", "sum", "--repeat", "1", "--peers", "", "--inject-wrong", "sum"]) == 1

def test_missing_peer_is_reported(suite, monkeypatch):
  # None in sys.modules makes `import torch` raise ImportError, as if it were not installed
  monkeypatch.setitem(sys.modules, "torch", None)
  monkeypatch.setitem(sys.modules, "tinygrad", None)
  out = io.StringIO()
  results = suite.run(rows=["mul_add"], quick=True, repeat=1, budget_s=0.0, peers=["numpy", "torch", "tinygrad"], out=out)
  text = out.getvalue()
  assert text.count("torch: - (not installed") == 1 and text.count("tinygrad: - (not installed") == 1, text
  r = results[0]
  assert r.cells["torch"].status == "-" and r.cells["tinygrad"].status == "-"
  assert r.cells["ours"].value and r.cells["numpy"].value
  # mul_add's target is against torch: without it the ratio is unknown, not a failure
  assert r.ratio is None and r.met is None
  assert _table_rows(text)["mul_add"][5:7] == ["-", "-"], text

def test_unknown_row_is_an_error(suite, capsys):
  with pytest.raises(SystemExit): suite.main(["--rows", "nope"])
  assert "matmul1024" in capsys.readouterr().err

def test_first_call_bench_runs(tmp_path):
  mod = load_bench("first_call")
  # one new process, one layer: the script's step trains (a finite loss is printed) and its time is measured
  got = mod.first_call("ours", 1, str(tmp_path))
  assert isinstance(got, float) and got > 0, got
  assert any(tmp_path.iterdir()), "the compile cache folder given was not used"

def test_thread_scaling_table(suite, capsys):
  # --threads: each throughput row of ours again in a child on one thread (CPU_THREADS=1), beside the all-core figure
  assert suite.main(["--quick", "--rows", "matmul1024,sum,tiny_op", "--repeat", "1", "--budget", "0", "--peers", "", "--no-machine", "--threads"]) == 0
  text = capsys.readouterr().out
  lines = text[text.index("thread scaling:"):].splitlines()
  rows = {(cols := l.split())[0]: cols for l in lines[3:] if l.strip()}
  cores = len(os.sched_getaffinity(0))
  if cores < 2:
    assert "one core" in lines[0], text
    return
  assert list(rows) == ["matmul1024", "sum"], text   # tiny_op is a latency row: no scaling figure
  for key, cols in rows.items():
    assert float(cols[2]) > 0 and float(cols[3]) > 0, (key, text)
    assert float(cols[4].rstrip("x")) == pytest.approx(float(cols[3]) / float(cols[2]), rel=0.02, abs=0.01), (key, text)

def test_thread_scaling_pairs_each_one_thread_cell_with_an_all_core_one(suite, capsys, monkeypatch):
  # with rounds, each 1-thread cell follows an all-core cell of the same row (a pair per round): the figures are the medians
  # of their rounds and the speedup the median of the pairs' ratios, printed with their range
  if len(os.sched_getaffinity(0)) < 2: pytest.skip("one core: no scaling table")
  seen: list[str] = []
  real = suite._measure_ours
  monkeypatch.setattr(suite, "_measure_ours", lambda lib, row, *a: seen.append(row.key) or real(lib, row, *a))
  assert suite.main(["--quick", "--rows", "sum", "--repeat", "1", "--budget", "0", "--peers", "", "--no-machine", "--threads", "--rounds", "3"]) == 0
  assert seen == ["sum"] * 3   # the parent's all-core cells: one per round (the 1-thread ones are the child's)
  text = capsys.readouterr().out
  line = next(l for l in text[text.index("thread scaling:"):].splitlines() if l.startswith("sum "))
  m = re.fullmatch(r"sum\s+GB/s\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)x \[([\d.]+)-([\d.]+)\]\s+-", line.strip())
  assert m, line
  speed, lo, hi = (float(m.group(i)) for i in (3, 4, 5))
  assert 0 < lo <= speed <= hi, line

def test_measure_ours_computes_the_reference_before_the_threads_settle(suite, monkeypatch):
  # the float64 reference runs on numpy's BLAS, whose threads then poll for work (OpenBLAS: ~0.1 s): made after settle(), it
  # left them spinning through the timed calls (the --threads table's all-core conv1x1 cells ran at one-thread speed, 1.00x)
  import dataclasses, suite_libs
  events: list[str] = []
  row = next(r for r in suite.ROWS if r.key == "sum")
  real_ref, real_settle = row.reference, suite_libs.settle
  row = dataclasses.replace(row, reference=lambda d: events.append("reference") or real_ref(d))
  monkeypatch.setattr(suite_libs, "settle", lambda *a, **k: events.append("settle") or real_settle(*a, **k))
  cell = suite._measure_ours(suite.LOADERS["ours"](), row, row.sizes[1], 1, 0.0, "min")
  assert events == ["reference", "settle"] and cell.value > 0, events

def test_measure_lets_the_checked_result_go_before_the_warm_up(suite):
  # a zero-copy result holds the first call's output: kept through the timed calls, the first of them allocated (and
  # page-faulted) a fresh output instead of the warm-up call, which is there to take such costs
  import weakref, numpy as np, suite_libs
  row = next(r for r in suite.ROWS if r.key == "sum")
  data = row.data(row.sizes[1], np.random.default_rng(0))
  refs: list[weakref.ref] = []
  alive: list[bool] = []   # per call after the check: whether the checked result still exists
  def run() -> None:
    if refs: alive.append(refs[0]() is not None)
  def result() -> np.ndarray:
    got = np.array(data["a"].astype(np.float64).sum())
    refs.append(weakref.ref(got))
    return got
  cell, off = suite.measure(suite_libs.Case(run, result), row, row.reference(data), row.sizes[1], 3, 10.0, "min")
  assert off is None and cell.value > 0, off
  assert alive == [False] * 4, alive   # the warm-up call and the 3 timed ones

def test_serve_answers_one_cell_per_row_key(suite):
  # the 1-thread child's protocol: a row key per line in, 'value KEY FIGURE' out (or 'error KEY why'), in order
  out = io.StringIO()
  suite.serve(True, 1, 0.0, "min", io.StringIO("sum\nmul_add\n"), out)
  lines = out.getvalue().splitlines()
  assert [l.split()[:2] for l in lines] == [["value", "sum"], ["value", "mul_add"]], lines
  assert all(float(l.split()[2]) > 0 for l in lines), lines

def test_bf16_row_without_the_instruction(suite, monkeypatch):
  # on a CPU without AVX512_BF16 the row is n/a for ours, and says why
  import suite_libs
  monkeypatch.setattr(suite_libs, "host_bf16_dot", lambda: False)
  out = io.StringIO()
  results = suite.run(rows=["matmul_bf16"], quick=True, repeat=1, budget_s=0.0, peers=[], out=out, measure_machine=False)
  assert results[0].cells["ours"].status == "n/a" and "matmul_bf16: ours n/a (no avx512_bf16)" in out.getvalue(), out.getvalue()

def test_bandwidth_rows_are_judged_at_their_own_footprint(suite):
  # a row whose arrays stay partly cached between calls is judged against the loop over the same bytes, not memory-sized ones
  row = next(r for r in suite.ROWS if r.key == "sum")
  size = row.sizes[1]
  fp = int(row.work(size))
  m = suite.machine_bench.Machine(16, 2, 200.0, 400.0, 30.0, 40.0, 30.0, 40.0, 30.0, 40.0, {("read", fp): 80.0})
  def result(ours: float, torch: float):
    return suite.Result(row, size, {"ours": suite.Cell(ours), "torch": suite.Cell(torch)}, m)
  assert result(60.0, 50.0).footprint == fp and m.bandwidth("read", fp) == 80.0 and m.bandwidth("read") == 40.0
  assert result(60.0, 50.0).met is False   # 1.2x torch and 150% of the memory-sized loop, but 75% of the loop at 64 MiB
  assert result(75.0, 50.0).met is True
  assert suite._share(result(60.0, 50.0), m) == "75% read bw"
  assert f"read {fp / 2**20:.3g} MiB 80.0" in m.text()

def test_machine_measures_footprints(suite):
  # the sized loops run for real: each (kind, bytes) asked for gets its own positive figure
  m = suite.machine_bench.measure(repeat=1, quick=True, footprints=[("copy", 1 << 20), ("read", 1 << 20), ("triad", 3 << 20), ("copy", 1 << 20)])
  assert set(m.sized) == {("copy", 1 << 20), ("read", 1 << 20), ("triad", 3 << 20)} and all(v > 0 for v in m.sized.values())
  assert m.bandwidth("triad", 3 << 20) == m.sized[("triad", 3 << 20)] and m.bandwidth("copy", 123) == m.copy_all

def test_machine_splits_every_footprint_among_all_its_threads(suite, monkeypatch):
  # 8 cores and an 18 KiB copy (6 of the loops' 16-lane groups): each thread gets a chunk, or the start barrier waits forever
  import threading
  monkeypatch.setattr(suite.machine_bench, "cores", lambda: 8)
  got: list = []
  t = threading.Thread(target=lambda: got.append(suite.machine_bench.measure(repeat=1, quick=True, footprints=[("copy", 18 << 10)], width=16)), daemon=True)
  t.start()
  t.join(120)
  assert got and got[0].threads == 8 and got[0].sized[("copy", 18 << 10)] > 0

def test_machine_loops_move_what_they_say(suite):
  # the copy and triad loops (vectors, streaming stores on x86-64) and the read loop compute their results over a whole chunk
  import ctypes, platform
  import numpy as np
  from core.device.hostjit import host_library
  mb = suite.machine_bench
  w = mb.vector_width()
  lib = host_library(mb._ir(w, platform.machine().lower() in ("x86_64", "amd64")))
  n = 4 * w * mb.READ_ACCUMULATORS
  a, b, c = (mb._array(n) for _ in range(3))
  b[:], c[:] = np.arange(n, dtype=np.float32), np.arange(n, dtype=np.float32)[::-1]
  lib.function("triad", None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(a.ctypes.data, b.ctypes.data, c.ctypes.data, n)
  np.testing.assert_array_equal(a, c * 3 + b)
  lib.function("copy", None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(a.ctypes.data, b.ctypes.data, n)
  np.testing.assert_array_equal(a, b)
  out = np.zeros(w, np.float32)
  lib.function("read", None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(b.ctypes.data, out.ctypes.data, n)
  assert out.sum() == b.sum()

def test_matmul_is_judged_against_numpy_and_the_peak(suite):
  # issue 23.4: >= 1.0x numpy and >= 85% of the measured FMA peak; either miss is a miss
  m = suite.machine_bench.Machine(16, 2, 200.0, 400.0, 30.0, 40.0, 30.0, 40.0, 30.0, 40.0)
  row = next(r for r in suite.ROWS if r.key == "matmul1024")
  def result(ours: float, numpy: float):
    return suite.Result(row, row.sizes[1], {"ours": suite.Cell(ours), "numpy": suite.Cell(numpy)}, m)
  assert result(350.0, 340.0).met is True
  assert result(330.0, 300.0).met is False    # 1.1x numpy, 82% of peak
  assert result(350.0, 360.0).met is False    # 87% of peak, 0.97x numpy
  out = io.StringIO()
  suite.print_table([result(350.0, 340.0)], ["numpy"], out, m)
  assert ">= 1.0x numpy, 85% peak" in out.getvalue()

def test_rounds_report_median_and_range(suite):
  # --rounds: the rows run round after round; a cell's figure is the median of its rounds, shown with their range
  import statistics
  out = io.StringIO()
  results = suite.run(rows=["sum", "tiny_op"], quick=True, repeat=1, budget_s=0.0, peers=["numpy"], out=out, rounds=3)
  text = out.getvalue()
  rows = _table_rows(text)
  for r in results:
    for name in ("ours", "numpy"):
      c = r.cells[name]
      assert len(c.values) == 3 and all(v > 0 for v in c.values) and c.value == statistics.median(c.values), (r.row.key, name, c)
    c = r.cells["ours"]
    assert rows[r.row.key][3] == f"{suite._fmt(c.value)} [{suite._fmt(min(c.values))}-{suite._fmt(max(c.values))}]", text
  assert "the median of 3 rounds" in text
  # the machine's loops ran every round too: the row is judged against their medians
  assert "the machine, each figure the median of its 3 rounds" in text and results[0].machine is results[1].machine
  assert ("read", results[0].footprint) in results[0].machine.sized

def test_machine_median(suite):
  M = suite.machine_bench.Machine
  ms = [M(16, 2, p, 2 * p, 30.0 + p, 40.0, 30.0, 40.0, 30.0, 40.0, {("read", 64): p}) for p in (100.0, 300.0, 200.0)]
  m = suite.machine_bench.median(ms)
  assert (m.width, m.threads, m.peak_1, m.peak_all, m.copy_1, m.copy_all, m.sized) == (16, 2, 200.0, 400.0, 230.0, 40.0, {("read", 64): 200.0})

def test_a_wrong_round_fails_the_cell(suite):
  c = suite.Cell(5.0, first_s=0.1)
  c.add_round(suite.Cell(7.0))
  c.add_round(suite.Cell(status="n/a"))   # nothing to add
  assert c.values == [5.0, 7.0] and c.value == 6.0 and c.first_s == 0.1
  c.add_round(suite.Cell(status="WRONG"))
  assert c.status == "WRONG" and c.value is None
  c.add_round(suite.Cell(9.0))
  assert c.status == "WRONG" and c.value is None
  out = io.StringIO()
  results = suite.run(rows=["sum"], quick=True, repeat=1, budget_s=0.0, peers=[], wrong={"sum"}, out=out, measure_machine=False, rounds=2)
  assert results[0].cells["ours"].status == "WRONG" and out.getvalue().count("sum: ours is WRONG") == 1, out.getvalue()
  with pytest.raises(SystemExit): suite.main(["--rounds", "0"])

@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="threads' CPU time is read from /proc")
def test_settle_counts_the_other_threads(suite):
  # what settle() watches: the CPU time of the process's threads other than the calling one
  import threading, time
  import suite_libs
  def spin(s: float) -> None:
    end = time.thread_time() + s
    while time.thread_time() < end: pass
  spun, done = threading.Event(), threading.Event()
  def worker() -> None:
    spin(0.05)
    spun.set()
    done.wait()   # stays alive: an ended thread leaves /proc/self/task, and its time with it
  before = suite_libs._other_threads_cpu_ns()
  t = threading.Thread(target=worker)
  t.start()
  spun.wait()
  mid = suite_libs._other_threads_cpu_ns()
  spin(0.05)   # the caller's own time is not counted
  after = suite_libs._other_threads_cpu_ns()
  done.set(); t.join()
  assert mid - before >= 45e6 and after - mid < 40e6, (before, mid, after)

def test_settle_waits_for_quiet_threads(suite, monkeypatch):
  # settle() parks our pool, then returns once the other threads' CPU time stops growing, or gives up after max_s
  import suite_libs
  step = suite_libs.SETTLE_STEP_S * 1e9
  samples = iter([0, step, 2 * step, 2 * step + 1])   # busy for two windows, then quiet
  clock = [0.0]
  monkeypatch.setattr(suite_libs, "_other_threads_cpu_ns", lambda: next(samples))
  monkeypatch.setattr(suite_libs.time, "sleep", lambda s: clock.__setitem__(0, clock[0] + s))
  monkeypatch.setattr(suite_libs.time, "perf_counter", lambda: clock[0])
  parked = []
  assert suite_libs.settle(lambda: parked.append(1)) is True and parked == [1]
  assert clock[0] == pytest.approx(3 * suite_libs.SETTLE_STEP_S)
  busy = iter(range(0, 10**12, int(step)))   # a thread that never stops
  monkeypatch.setattr(suite_libs, "_other_threads_cpu_ns", lambda: next(busy))
  clock[0] = 0.0
  assert suite_libs.settle(max_s=0.5) is False and clock[0] == pytest.approx(0.5, abs=suite_libs.SETTLE_STEP_S)

def test_thread_scaling_says_why_its_child_died(suite, capsys, monkeypatch):
  # a 1-thread child that exits before its first row (here: no script to run) is a failed cell with the child's stderr, not a
  # BrokenPipeError out of the bench
  if len(os.sched_getaffinity(0)) < 2: pytest.skip("one core: no scaling table")
  monkeypatch.setattr(suite, "__file__", "/nonexistent/suite.py")
  assert suite.main(["--quick", "--rows", "sum", "--repeat", "1", "--budget", "0", "--peers", "", "--no-machine", "--threads"]) == 0
  text = capsys.readouterr().out
  assert "the 1-thread run failed" in text and "/nonexistent/suite.py" in text, text
