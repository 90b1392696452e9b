"""DEV=CPU:<renderer>:<arch> builds kernels for an older CPU model than the host's (a GCC/LLVM -march name): the renderers take that
model's SIMD width, registers, FMA and bf16 dot product, the compilers its instruction set, so the code and the tiles an AVX2 CPU
gets run and are tested on an AVX-512 one. An unknown name, or a model with features this CPU lacks, is refused."""
from __future__ import annotations
import platform
import numpy as np
import pytest
from core.device.compiler import CompileError
from plugin_cpu import compiler, make_c, make_llvm

pytestmark = pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="x86-64 CPU model names")
needs_avx2 = pytest.mark.skipif(not {"avx2", "fma"} <= compiler.host_flags(), reason="this CPU has no AVX2+FMA to run haswell code")

def test_arch_flags_come_from_the_compilers_march():
  assert compiler.arch_flags("x86-64") == frozenset()   # the baseline: SSE2 only
  if {"avx2", "fma"} <= compiler.host_flags():
    assert compiler.arch_flags("haswell") == {"avx", "avx2", "fma"}
  if {"avx512f", "avx512vl"} <= compiler.host_flags():   # 4- and 8-lane AVX-512 forms (renderer.scalef_lanes) need avx512vl
    assert {"avx512f", "avx512vl"} <= compiler.arch_flags("skylake-avx512")
  assert compiler.arch_flags(None) == compiler.host_flags()

def test_a_model_this_cpu_lacks_is_refused_unless_only_rendered(monkeypatch):
  # an AVX2 host (this CPU's flags without AVX-512): x86-64-v4 can't run here, but its flags render the tests' AVX-512 sources
  monkeypatch.setattr(compiler, "host_flags", lambda: frozenset({"avx", "avx2", "fma"}))
  compiler.arch_flags.cache_clear()
  try:
    with pytest.raises(CompileError, match="which this CPU lacks"): compiler.arch_flags("x86-64-v4")
    assert {"avx512f", "avx512vl", "avx512dq"} <= compiler.arch_flags("x86-64-v4", runs_here=False)
  finally: compiler.arch_flags.cache_clear()

@needs_avx2
@pytest.mark.parametrize("make", [make_llvm, make_c], ids=["LLVM", "C"])
def test_renderers_take_the_models_simd_facts(make):
  rnd, comp = make("haswell")
  assert (rnd.simd_width, rnd.simd_regs, rnd.arch) == (32, 16, "haswell")
  if make is make_llvm:
    assert comp.cpu == "haswell" and comp.features == "" and rnd.vector_dtypes == frozenset()
    assert "prefer-vector-width" not in rnd.kernel_attrs
  else: assert "-march=haswell" in comp.flags
  base, _ = make("x86-64")
  assert (base.simd_width, base.simd_regs) == (16, 16)

@needs_avx2
@pytest.mark.parametrize("dev", ["CPU:LLVM:haswell", "CPU:C:haswell", "CPU:LLVM:x86-64"])
def test_kernels_for_an_older_model_give_numpys_results(dev):
  import os, subprocess, sys
  code = ("import numpy as np\nfrom core import Tensor\nfrom core.device.registry import Device\n"
          "r = np.random.default_rng(0); a, b = r.standard_normal((67, 130), dtype=np.float32), r.standard_normal((130, 45), dtype=np.float32)\n"
          "x = r.standard_normal((3, 8, 17, 19), dtype=np.float32)\n"
          "mm = (Tensor(a) @ Tensor(b)).numpy(); s = (Tensor(x).exp() * 2 + 1).sum(axis=(2, 3)).numpy()\n"
          "np.testing.assert_allclose(mm, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)\n"
          "np.testing.assert_allclose(s, (np.exp(x.astype(np.float64)) * 2 + 1).sum(axis=(2, 3)), rtol=1e-4)\n"
          "print(Device[Device.DEFAULT].renderer.simd_width)\n")
  r = subprocess.run([sys.executable, "-c", code], env={**os.environ, "DEV": dev}, capture_output=True, text=True, timeout=600)
  assert r.returncode == 0, r.stderr[-3000:]
  assert int(r.stdout.split()[-1]) == (16 if dev.endswith("x86-64") else 32)

def test_unknown_or_unrunnable_models_are_refused(monkeypatch):
  with pytest.raises(CompileError, match="knows no -march=not-a-cpu"): compiler.arch_flags.__wrapped__("not-a-cpu")
  monkeypatch.setattr(compiler, "host_flags", lambda: frozenset({"avx", "avx2", "fma"}))   # an AVX2 host asked for AVX-512 code
  with pytest.raises(CompileError, match="avx512f, avx512vl, which this CPU lacks"): compiler.arch_flags.__wrapped__("skylake-avx512")
  assert np.array_equal(sorted(compiler.arch_flags.__wrapped__("haswell")), ["avx", "avx2", "fma"])
