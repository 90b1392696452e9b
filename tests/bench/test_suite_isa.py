"""bench/suite.py --isa avx2: the whole run held to AVX2 on a CPU that has more. Ours renders for an AVX2 CPU model (DEV), each
peer is held by its own switches set before it loads (a child process), the machine's loops use 8-lane vectors, and the header
says what each one reports. Speeds are never asserted."""
from __future__ import annotations
import os, platform
from types import SimpleNamespace
import pytest
from bench_scripts import load_bench

@pytest.fixture(scope="module")
def suite():
  return load_bench("suite")

def test_isa_dev_puts_the_model_on_devs_cpu_target(suite):
  assert suite.isa_dev(None, "znver3") == "CPU:LLVM:znver3"   # unset DEV: the CPU plugin's default renderer
  assert suite.isa_dev("CPU", "znver3") == "CPU:LLVM:znver3"
  assert suite.isa_dev("cpu:c", "znver3") == "CPU:C:znver3"
  assert suite.isa_dev("DIRECT+CPU:LLVM", "haswell") == "DIRECT+CPU:LLVM:haswell"
  for dev in ("NV", "CPU:LLVM:haswell", "CPU;CPU:C"):   # not a CPU, an arch already named, two targets
    with pytest.raises(ValueError, match="DEV must be one CPU target"): suite.isa_dev(dev, "znver3")

def test_isa_env_holds_the_peers(suite):
  env = suite.isa_env("avx2", {"OPENBLAS_CORETYPE": "SkylakeX", "OPENBLAS_L2_SIZE": "512", "DEV": "CPU:C", "HOME": "/h"})
  assert env == {"HOME": "/h", "OPENBLAS_CORETYPE": "Haswell", "ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2",
                 "MKL_ENABLE_INSTRUCTIONS": "AVX2", "BENCH_ISA": "avx2", "DEV": "CPU:C:znver3"}

def test_only_the_isa_child_keeps_openblas_coretype(monkeypatch):
  # the suite drops OPENBLAS_CORETYPE as it loads (peers at their best), except in --isa's child, whose parent set it
  monkeypatch.setenv("OPENBLAS_CORETYPE", "Haswell")
  monkeypatch.setenv("BENCH_ISA", "avx2")
  load_bench("suite")
  assert os.environ.get("OPENBLAS_CORETYPE") == "Haswell"
  monkeypatch.delenv("BENCH_ISA")
  load_bench("suite")
  assert "OPENBLAS_CORETYPE" not in os.environ

def test_isa_report_says_what_each_runs(suite):
  ours = SimpleNamespace(renderer=SimpleNamespace(simd_width=64))   # AVX-512 code where AVX2 was asked for
  torch = SimpleNamespace(capability="AVX2", onednn_isa="Intel AVX2")
  head, held = suite.isa_report("avx2", {"ours": ours, "torch": torch})
  assert "AVX2 code on this host, NOT an AVX2 host" in head and "8-lane vectors" in head and "ATEN_CPU_CAPABILITY=avx2" in head
  assert held == "held to AVX2: ours: vector bytes 64 (NO: not 32); torch: ATen capability AVX2 (yes); oneDNN isa Intel AVX2 (yes)"

def test_bad_isa_settings_are_refused(suite, monkeypatch):
  monkeypatch.setenv("DEV", "NV")
  with pytest.raises(SystemExit): suite.main(["--isa", "avx2", "--quick", "--rows", "sum"])
  monkeypatch.delenv("DEV")
  monkeypatch.setenv("BENCH_ISA", "avx2")   # --isa's own variable, set by hand for a native run
  with pytest.raises(SystemExit): suite.main(["--quick", "--rows", "sum"])

def _avx2_model_runs() -> bool:
  if platform.machine().lower() not in ("x86_64", "amd64"): return False
  from core.device.compiler import CompileError
  from plugin_cpu.compiler import arch_flags
  try: return {"avx2", "fma"} <= arch_flags("znver3")   # the compiler knows the model and this CPU runs its code
  except CompileError: return False

def test_avx2_run_end_to_end(suite, monkeypatch, capfd):
  if not _avx2_model_runs(): pytest.skip("needs an x86-64 CPU with AVX2+FMA and a compiler that knows -march=znver3")
  monkeypatch.delenv("DEV", raising=False)
  rc = suite.main(["--isa", "avx2", "--quick", "--rows", "matmul1024,matmul_bf16,sum", "--repeat", "1", "--budget", "0",
                   "--peers", "numpy,torch", "--threads"])
  text = capfd.readouterr().out
  assert rc == 0, text
  assert "ours DEV=CPU:LLVM:znver3" in text and "simd_width 32" in text and "AVX2 code on this host, NOT an AVX2 host" in text, text
  assert "ours: vector bytes 32 (yes)" in text and "numpy: OpenBLAS kernel Haswell (yes)" in text, text
  try: import torch  # noqa: F401
  except ImportError: pass
  else: assert "torch: ATen capability AVX2 (yes)" in text and "oneDNN isa Intel AVX2 (yes)" in text, text
  assert "8-wide vectors" in text and "matmul_bf16: ours n/a (no avx512_bf16)" in text, text
  # the one-thread child of --threads ran under the same ISA (a native child would refuse the child's BENCH_ISA)
  assert "thread scaling: ours on 1 thread" in text and "the 1-thread run failed" not in text, text
