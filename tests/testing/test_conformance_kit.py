"""The conformance kit itself: capability skips and their reasons in the summary line, the summary's counts, the plugin being
inactive unless asked for, `--pyargs core.testing`, and CORE_TEST_SCALE changing shapes."""
from __future__ import annotations
import os, re, subprocess, sys, textwrap
from types import SimpleNamespace
import pytest
from core.ir.dtype import dtypes
from core.testing import capabilities
from core.testing.helpers import scale_factor, scaled
from core.testing.pytest_plugin import summary_line

# a pytest plugin (loaded with -p) that changes what the device under test declares, as a backend's renderer would
FAKE_CAPS = textwrap.dedent('''
  import os
  def pytest_configure(config):
    from core.device.registry import Device
    from core.ir.dtype import dtypes
    r = Device[Device.DEFAULT].renderer
    names = lambda var: {getattr(dtypes, n) for n in os.environ.get(var, "").split(",") if n}
    r.supported_dtypes = frozenset((set(r.supported_dtypes) - names("FAKE_DROP")) | names("FAKE_ADD"))
    if os.environ.get("FAKE_MAX_BUFFER"): r.max_buffer_size = int(os.environ["FAKE_MAX_BUFFER"])
''')

def run_pytest(tmp_path, *args: str, **env: str) -> tuple[str, dict[str, int]]:
  """Runs pytest in a fresh process on the PYTHON device from an empty folder; returns its output and pytest's own counts."""
  (tmp_path / "fake_caps.py").write_text(FAKE_CAPS)
  full_env = {k: v for k, v in os.environ.items() if k not in ("DEV", "CORE_TEST_SCALE", "CORE_CONFORMANCE", "PYTEST_XDIST_WORKER",
                                                               "PYTEST_ADDOPTS")}
  full_env.update({"DEV": "PYTHON", "PYTHONPATH": os.pathsep.join([str(tmp_path)] + sys.path), **env})
  p = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "0", "-q", *args], cwd=tmp_path, env=full_env,
                     capture_output=True, text=True, timeout=600)
  out = p.stdout + p.stderr
  # pytest's own result line: "3 passed, 1 skipped, 5 deselected in 1.23s"
  finals = [ln for ln in out.splitlines() if re.search(r"^=*\s*\d+ (passed|failed|skipped|deselected|error).* in [\d.]+s", ln)]
  final = finals[-1] if finals else ""
  counts = {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|skipped|deselected|error)", final)}
  return out, counts

def conformance_line(out: str) -> str:
  lines = [ln for ln in out.splitlines() if ln.startswith("conformance DEV=")]
  assert len(lines) == 1, out
  return lines[0]

def test_dropped_dtype_is_skipped_with_reason_in_summary(tmp_path):
  out, counts = run_pytest(tmp_path, "-p", "fake_caps", "--core-conformance", "-k", "test_comparisons", "-rs", FAKE_DROP="float16")
  # test_comparisons runs float32, int32, uint8, float16, int8: the float16 one is skipped
  assert counts == {"passed": 4, "skipped": 1, "deselected": counts["deselected"]}, out
  assert conformance_line(out) == "conformance DEV=PYTHON: 4 passed, 0 failed, 1 skipped (unsupported: float16)"
  assert "unsupported: float16" in out.split("short test summary")[1]   # pytest's own -rs list names it too

def test_every_fp8_test_skips(tmp_path):
  out, counts = run_pytest(tmp_path, "--core-conformance", "-k", "fp8")
  # 3 tests in test_dtypes run every dtype; no renderer lists fp8 today
  assert counts == {"skipped": 6, "deselected": counts["deselected"]}, out
  assert conformance_line(out) == "conformance DEV=PYTHON: 0 passed, 0 failed, 6 skipped (unsupported: fp8e4m3 x3, fp8e5m2 x3)"

def test_summary_counts_match_pytest_with_xdist(tmp_path):
  # a mix of passes and capability skips, run on two workers: only reports reach the controller that writes the line
  out, counts = run_pytest(tmp_path, "-p", "fake_caps", "--core-conformance", "-k", "test_dtypes or test_comparisons", "-n", "2",
                           FAKE_DROP="float16,uint16")
  m = re.fullmatch(r"conformance DEV=PYTHON: (\d+) passed, (\d+) failed, (\d+) skipped \(unsupported: (.*)\)", conformance_line(out))
  assert m, out
  assert (int(m[1]), int(m[2]), int(m[3])) == (counts["passed"], counts.get("failed", 0), counts["skipped"]), out
  assert counts["passed"] > 20 and m[4] == "float16 x5, fp8e4m3 x3, fp8e5m2 x3, uint16 x3", out

def test_declared_but_broken_dtype_fails_instead_of_skipping(tmp_path):
  # claiming fp8 support on a device that can't compute it must show up as failures, never as passes or skips
  out, counts = run_pytest(tmp_path, "-p", "fake_caps", "--core-conformance", "-k", "test_load_store_and_cast_to_float32 and fp8",
                           FAKE_ADD="fp8e4m3,fp8e5m2")
  assert counts.get("failed") == 2 and "skipped" not in counts and "passed" not in counts, out
  assert conformance_line(out) == "conformance DEV=PYTHON: 0 passed, 2 failed, 0 skipped"

def test_max_buffer_size_skips_large_buffer_test(tmp_path):
  out, counts = run_pytest(tmp_path, "-p", "fake_caps", "--core-conformance", "-k", "test_large_buffer_round_trip", FAKE_MAX_BUFFER="4096",
                           CORE_TEST_SCALE="0.01")
  assert counts.get("skipped") == 1, out
  assert re.search(r"1 skipped \(unsupported: buffers of \d+ bytes \(max_buffer_size=4096\)\)$", conformance_line(out)), out

def test_scale_below_one_reports_other_skip(tmp_path):
  out, counts = run_pytest(tmp_path, "--core-conformance", "-k", "test_large_reduction", CORE_TEST_SCALE="0.5")
  assert counts.get("skipped") == 1, out
  assert conformance_line(out) == ("conformance DEV=PYTHON: 0 passed, 0 failed, 1 skipped "
                                   "(other skips: the > 2^24 element reduction only runs at CORE_TEST_SCALE >= 1)")

def test_smoke_subset_runs_each_test_function_once(tmp_path):
  # test_comparisons has 5 dtype parametrizations and test_where one: smoke keeps the first of each
  def collected(**env: str) -> list[str]:
    out, _ = run_pytest(tmp_path, "--core-conformance", "-k", "test_comparisons or test_where", "--collect-only", **env)
    return [ln for ln in out.splitlines() if "::" in ln]
  full, smoke = collected(), collected(CORE_CONFORMANCE="smoke")
  firsts: dict[str, str] = {}
  for nid in full: firsts.setdefault(nid.split("[")[0], nid)
  assert len(full) > len(firsts) >= 2 and smoke == list(firsts.values()), (full, smoke)
  out, counts = run_pytest(tmp_path, "--core-conformance", "-k", "test_comparisons or test_where", CORE_CONFORMANCE="smoke")
  assert counts["passed"] == len(firsts), out
  assert conformance_line(out) == (f"conformance DEV=PYTHON (smoke: each test function at its first parametrization): "
                                   f"{len(firsts)} passed, 0 failed, 0 skipped")

def test_unknown_subset_is_a_usage_error(tmp_path):
  out, _ = run_pytest(tmp_path, "--core-conformance", "-k", "test_comparisons", CORE_CONFORMANCE="quick")
  assert "CORE_CONFORMANCE='quick': expected 'full' or 'smoke'" in out, out

def test_plugin_inactive_unless_asked(tmp_path):
  (tmp_path / "test_mine.py").write_text("def test_one():\n  assert 1 + 1 == 2\n")
  out, counts = run_pytest(tmp_path, "test_mine.py")
  assert counts == {"passed": 1} and "conformance DEV=" not in out, out

def test_pyargs_collects_the_suite(tmp_path):
  out, _ = run_pytest(tmp_path, "--pyargs", "core.testing", "--collect-only")
  collected = [ln for ln in out.splitlines() if "::" in ln]
  files = {ln.split("::")[0].rsplit("/", 1)[-1] for ln in collected}
  assert {"test_ops_elementwise.py", "test_dtypes.py", "test_jit.py", "test_multi.py", "test_random.py", "test_errors.py"} <= files, out
  assert len(collected) > 400, out

def test_summary_line_counts_and_groups_reasons():
  reasons = ["unsupported: float16", "unsupported: float16", "unsupported: has_local", "needs a GPU"]
  assert summary_line("X", 7, 1, reasons) == \
    "conformance DEV=X: 7 passed, 1 failed, 4 skipped (unsupported: float16 x2, has_local) (other skips: needs a GPU)"
  assert summary_line("CPU:C", 3, 0, []) == "conformance DEV=CPU:C: 3 passed, 0 failed, 0 skipped"

def fake_renderer(**kw):
  base = dict(supported_dtypes=frozenset({dtypes.bool, dtypes.int32, dtypes.float32}), has_local=False, has_shared=False,
              has_images=False, has_atomics=False, supports_float4=False, max_buffer_size=None)
  return SimpleNamespace(**{**base, **kw})

def test_capability_queries(monkeypatch):
  monkeypatch.setattr(capabilities, "renderer", lambda: fake_renderer(has_local=True, max_buffer_size=1024))
  assert capabilities.supports_dtype(dtypes.float32) and not capabilities.supports_dtype(dtypes.float16)
  assert capabilities.supports_dtype(dtypes.bfloat16)   # emulated by core wherever it is not listed
  assert not capabilities.supports_dtype(dtypes.fp8e4m3)
  assert capabilities.supports("has_local") and not capabilities.supports("has_atomics")
  assert capabilities.fits_buffer(1024) and not capabilities.fits_buffer(1025)
  assert capabilities.missing([dtypes.float16, dtypes.int32], ["has_local", "has_images"], 2048) == \
    ["float16", "has_images", "buffers of 2048 bytes (max_buffer_size=1024)"]
  with pytest.raises(pytest.skip.Exception, match="^unsupported: float16, has_atomics$"):
    capabilities.skip_unless(dtypes.float16, flags=["has_atomics"])
  capabilities.skip_unless(dtypes.int32, flags=["has_local"], nbytes=100)   # everything there: no skip
  with pytest.raises(ValueError, match="has_lokal"): capabilities.requires("has_lokal")

def test_dtype_params_carry_marks_and_ids():
  ps = capabilities.dtype_params([dtypes.float16, dtypes.int8])
  assert [p.id for p in ps] == ["float16", "int8"]
  assert [m.kwargs["dtypes"] for p in ps for m in p.marks] == [(dtypes.float16,), (dtypes.int8,)]

def test_scale_changes_shapes(monkeypatch):
  monkeypatch.delenv("CORE_TEST_SCALE", raising=False)
  assert scale_factor() == 1.0 and scaled(1000) == 1000 and scaled(7) == 7
  monkeypatch.setenv("CORE_TEST_SCALE", "0.25")
  assert scale_factor() == 0.25 and scaled(1000) == 250 and scaled(1000, 300) == 300 and scaled(2) == 1
  monkeypatch.setenv("CORE_TEST_SCALE", "2")
  assert scaled(1000) == 2000

def test_scale_reaches_the_suite_shapes(tmp_path):
  # the suite's random-number test draws scaled(1000, 16) + 1 numbers: its module constant follows CORE_TEST_SCALE
  code = "import core.testing.suite.test_random as m; print(m.N)"
  env = {k: v for k, v in os.environ.items() if k != "CORE_TEST_SCALE"}
  sizes = [subprocess.run([sys.executable, "-c", code], env={**env, **({"CORE_TEST_SCALE": s} if s else {})}, capture_output=True, text=True,
                          check=True).stdout.strip() for s in ("", "0.25", "0.001")]
  assert sizes == ["1001", "251", "17"]

def test_null_device_runs_the_suite_compile_only(tmp_path):
  # DEV=NULL:PYTHON renders every kernel with the PYTHON renderer and runs nothing: value checks can't hold, compiling can
  out, counts = run_pytest(tmp_path, "--core-conformance", "-k", "test_comparisons", DEV="NULL:PYTHON")
  assert counts.get("passed", 0) == 5 and not counts.get("failed"), out
  assert "(compile-only: kernels compiled, values not checked)" in conformance_line(out)

def test_compile_only_mode_leaves_tests_outside_the_suite_alone(tmp_path):
  (tmp_path / "test_broken.py").write_text("def test_raises():\n  raise RuntimeError('compile error stand-in')\n")
  # only the suite's value checks are waived on NULL: a failure anywhere else still fails
  out, counts = run_pytest(tmp_path, "test_broken.py", DEV="NULL:PYTHON")
  assert counts.get("failed") == 1, out
