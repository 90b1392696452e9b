"""The PTX compiler: LLVM IR -> PTX (llvmlite) -> cubin (ptxas): the PTX's key lines, the cubin's ELF header per arch, errors."""
from __future__ import annotations
import re
import pytest
from core.testing.helpers import ci_run, missing_tool
from core.device.compiler import CompileError
from nv_test_kernels import ARCH_NAMES, cubin_sm, elf_header, have_ptxas, loop_kernel, shared_kernel
from plugin_nv import compiler as nv_compiler
from plugin_nv.compiler import PTXCompiler
from plugin_nv.renderer import PTXRenderer

# skipped off CI only: the job installs the testing extra, so under CI=true a missing ptxas fails these tests with what to install
needs_ptxas = pytest.mark.skipif(not have_ptxas() and not ci_run(),
                                 reason='no ptxas here: pip install "plugin-nv[ptxas]" (the testing extra has it)')

def test_ptx_key_lines():
  ptx = PTXCompiler("sm_90").to_ptx(PTXRenderer("sm_90").render("rev", shared_kernel(threads=128, blocks=8)))
  assert re.search(r"^\.version 8\.0$", ptx, re.M) and re.search(r"^\.target sm_90$", ptx, re.M)
  assert re.search(r"^\.address_size 64$", ptx, re.M)
  assert ".visible .entry rev(" in ptx and ".param .u64 .ptr .global .align 4 rev_param_0" in ptx
  assert re.search(r"^\.reqntid 128, 1, 1$", ptx, re.M)
  assert re.search(r"\.shared \.align 16 \.b8 \S+\[512\];", ptx)   # 128 floats
  assert re.search(r"mov\.u32\s+%r\d+, %tid\.x;", ptx) and re.search(r"mov\.u32\s+%r\d+, %ctaid\.x;", ptx)
  assert ptx.index("st.shared") < ptx.index("bar.sync \t0;") < ptx.index("ld.shared")

def test_ptx_version_follows_the_arch():
  for arch, version in (("sm_80", "8.0"), ("sm_100", "8.6"), ("sm_120", "8.7")):
    ptx = PTXCompiler(arch).to_ptx(PTXRenderer(arch).render("loop", loop_kernel()))
    assert f"\n.version {version}\n.target {arch}\n" in ptx

@needs_ptxas
@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_cubin_elf_header_names_the_arch(arch: str):
  cubin = PTXCompiler(arch).compile(PTXRenderer(arch).render("rev", shared_kernel()))
  h = elf_header(cubin)
  assert (h["class"], h["data"], h["machine"]) == (2, 1, 190)   # ELFCLASS64, little-endian, EM_CUDA
  assert h["abiversion"] in (7, 8) and cubin_sm(cubin) == int(arch[3:])
  assert b"rev\x00" in cubin and b".nv.shared.rev" in cubin

@needs_ptxas
def test_cache_key_names_llvm_ptx_arch_and_ptxas():
  comp = PTXCompiler("sm_86")
  version = nv_compiler.ptxas_version(comp.ptxas)
  assert re.fullmatch(r"\d+\.\d+\.\d+", version)
  assert comp.cachekey is not None and comp.cachekey.startswith("nv_ptx_llvm") and comp.cachekey.endswith(f"_sm_86+ptx80_O3_ptxas{version}")
  assert PTXCompiler("sm_90").cachekey != comp.cachekey

@needs_ptxas
def test_ptxas_error_carries_its_message_and_the_ptx():
  comp = PTXCompiler("sm_90")
  ptx = comp.to_ptx(PTXRenderer("sm_90").render("loop", loop_kernel()))
  bad = ptx.replace("ret;", "frobnicate.b32 %r1;\n\tret;")
  with pytest.raises(CompileError, match=r"(?s)ptxas \d+\.\d+\.\d+ -arch=sm_90 failed \(exit \d+\):\n.*frobnicate.*--- PTX ---\n.*\.entry loop"):
    comp.assemble(bad)
  # a PTX file built for a newer arch does not assemble for an older one
  with pytest.raises(CompileError, match=r"-arch=sm_80 failed"):
    PTXCompiler("sm_80").assemble(PTXCompiler("sm_120").to_ptx(PTXRenderer("sm_120").render("loop", loop_kernel())))

def test_bad_ir_is_a_compile_error_with_the_source():
  with pytest.raises(CompileError, match=r"(?s)rejected the IR for sm_90: .*--- source ---\ndefine ptx_kernel void @k\(\) \{ nonsense"):
    PTXCompiler("sm_90").compile("define ptx_kernel void @k() { nonsense }\n")

def test_missing_ptxas_says_what_to_install(monkeypatch: pytest.MonkeyPatch):
  monkeypatch.setattr(nv_compiler, "find_ptxas", lambda: None)
  comp = PTXCompiler("sm_90")
  assert comp.ptxas is None and comp.cachekey is not None and comp.cachekey.endswith("_ptxasmissing")
  src = PTXRenderer("sm_90").render("loop", loop_kernel())
  assert ".target sm_90" in comp.to_ptx(src)   # the PTX is still made
  with pytest.raises(CompileError, match=r'ptxas \(NVIDIA\'s PTX assembler\) was not found .* pip install "plugin-nv\[ptxas\]" .* CUDA toolkit'):
    comp.compile(src)

def test_find_ptxas_order(monkeypatch: pytest.MonkeyPatch, tmp_path):
  fake = tmp_path / "ptxas"
  fake.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 13.0, V13.0.88'\n")
  fake.chmod(0o755)
  monkeypatch.setenv("PTXAS", str(fake))
  assert nv_compiler.find_ptxas() == str(fake) and nv_compiler.ptxas_version(str(fake)) == "13.0.88"
  monkeypatch.setenv("PTXAS", str(tmp_path / "nope"))
  assert nv_compiler.find_ptxas() is None   # an explicit PTXAS that is not there is not silently replaced
  monkeypatch.delenv("PTXAS")
  monkeypatch.setenv("PATH", str(tmp_path))
  assert nv_compiler.find_ptxas() == str(fake)

def test_ptxas_from_the_pinned_wheel():
  import importlib.metadata
  try: version = importlib.metadata.version("nvidia-cuda-nvcc")
  except importlib.metadata.PackageNotFoundError:
    missing_tool('the nvidia-cuda-nvcc wheel is not installed: pip install "plugin-nv[ptxas]" (the testing extra has it)')
  path = nv_compiler._wheel_ptxas()
  assert version == "13.0.88" and path is not None and path.endswith("nvidia/cu13/bin/ptxas")
  assert nv_compiler.ptxas_version(path) == "13.0.88"
