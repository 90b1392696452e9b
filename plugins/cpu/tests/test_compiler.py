"""The CPU compilers: C and LLVM source to shared-object bytes, the disk cache, and errors that name the compiler."""
import os, shutil, subprocess
import pytest
from plugin_cpu import elfload, compiler
from core.device.compiler import CompileError
from plugin_cpu.compiler import CCompiler, LLVMCompiler, cc_supports, find_cc
from plugin_cpu.native import NativeCompiler
from plugin_cpu.c_renderer import CPUCRenderer

GOOD_C = "void k(int* restrict data0) { data0[0] = 42; }\n"
GOOD_LL = "define void @k(ptr noalias %data0) #0 {\nentry:\n  store i32 42, ptr %data0, align 4\n  ret void\n}\nattributes #0 = { nounwind }\n"

@pytest.fixture(scope="module")
def compilers():
  return {"C": (CCompiler(), GOOD_C), "LLVM": (LLVMCompiler(), GOOD_LL)}

@pytest.mark.parametrize("which", ["C", "LLVM"])
def test_compile_gives_a_loadable_elf(compilers, which):
  comp, src = compilers[which]
  lib = comp.compile(src)
  # C: a shared object (ET_DYN); LLVM on x86-64: an object file (ET_REL) the runtime relocates itself (plugin_cpu.elfload)
  assert lib[:4] == b"\x7fELF" and lib[16] == (1 if which == "LLVM" and elfload.supported() else 3)

@pytest.mark.parametrize("which", ["C", "LLVM"])
def test_second_compile_hits_the_cache(compilers, which, tmp_path, monkeypatch):
  monkeypatch.setenv("CORE_CACHE_DIR", str(tmp_path))
  comp, src = compilers[which]
  hits, misses = comp.cache_hits, comp.cache_misses
  src = src.replace("42", "43")   # a source no other test compiled
  first = comp.compile_cached(src)
  assert (comp.cache_hits, comp.cache_misses) == (hits, misses + 1)
  calls = []
  monkeypatch.setattr(comp, "compile", lambda s: calls.append(s) or b"")
  second = comp.compile_cached(src)
  assert second == first and calls == [] and comp.cache_hits == hits + 1
  assert any(p.is_file() for p in tmp_path.rglob("*"))

def test_cachekeys_name_compiler_and_version(compilers):
  c, ll = compilers["C"][0], compilers["LLVM"][0]
  assert c.cachekey.startswith("cpu_c_") and os.path.basename(c.cc) in c.cachekey and "-march=native" in c.flags
  import llvmlite.binding as llvm
  assert ll.cachekey.startswith("cpu_llvm_") and ".".join(map(str, llvm.llvm_version_info)) in ll.cachekey and ll.cpu in ll.cachekey
  assert c.cachekey != ll.cachekey

def test_no_fast_math(compilers):
  assert "-ffast-math" not in compilers["C"][0].flags and "-O2" in compilers["C"][0].flags

def test_c_syntax_error_names_the_compiler(compilers):
  comp = compilers["C"][0]
  with pytest.raises(CompileError) as e: comp.compile("void k(int* data0) { data0[0] = ; }\n")
  msg = str(e.value)
  assert os.path.basename(comp.cc) in msg and "error" in msg and "data0[0] = ;" in msg

def test_llvm_syntax_error_names_the_compiler(compilers):
  with pytest.raises(CompileError) as e: compilers["LLVM"][0].compile("define void @k( {\n")
  assert "llvmlite" in str(e.value) and "define void @k(" in str(e.value)

def test_llvm_invalid_ir_is_a_compile_error(compilers):
  # parses, but the verifier rejects it: the value is used with the wrong type
  with pytest.raises(CompileError):
    compilers["LLVM"][0].compile("define void @k(ptr %p) {\nentry:\n  %x = add i32 1, 2\n  store i64 %x, ptr %p\n  ret void\n}\n")

def test_missing_compiler_is_a_compile_error(monkeypatch):
  monkeypatch.setenv("CC", "/nonexistent/cc")
  monkeypatch.setenv("PATH", "/nonexistent")
  from plugin_cpu.compiler import find_cc
  with pytest.raises(CompileError, match="no C compiler"): find_cc()

def test_cc_picks_the_compiler_and_a_missing_one_is_an_error(monkeypatch):
  name = os.path.basename(find_cc())
  monkeypatch.setenv("CC", name)
  assert find_cc() == shutil.which(name) and CCompiler().cc == NativeCompiler().cc == shutil.which(name)
  # a CC that names no program is not quietly replaced by another compiler
  monkeypatch.setenv("CC", "no-such-cc-4711")
  with pytest.raises(CompileError, match="no C compiler at CC='no-such-cc-4711'"): find_cc()

def test_cache_keys_keep_compilers_apart(tmp_path):
  # a wrapper around the same compiler prints the same --version, but is another program: its own cache entries
  cc = find_cc()
  wrapper = tmp_path / "cc-wrapper"
  wrapper.write_text(f'#!/bin/sh\nexec {cc} "$@"\n')
  wrapper.chmod(0o755)
  assert CCompiler(str(wrapper)).cachekey != CCompiler(cc).cachekey
  assert NativeCompiler(str(wrapper)).cachekey != NativeCompiler(cc).cachekey
  if (gcc := shutil.which("gcc")) and (clang := shutil.which("clang")):
    assert CCompiler(gcc).cachekey != CCompiler(clang).cachekey and NativeCompiler(gcc).cachekey != NativeCompiler(clang).cachekey

def test_float16_probe_runs_once_and_says_what_the_compiler_builds(monkeypatch):
  cc = find_cc()
  compiler._probe.cache_clear()
  probes, real_run = [], subprocess.run
  monkeypatch.setattr(subprocess, "run", lambda cmd, *a, **k: (probes.append(cmd) if "-Wl,-z,defs" in cmd else None, real_run(cmd, *a, **k))[1])
  has = cc_supports(cc, "_Float16")
  assert cc_supports(cc, "_Float16") is has and CPUCRenderer(cc).native_half is has and len(probes) == 1
  try: built = bool(CCompiler(cc).compile("_Float16 h(_Float16 a, double d) { return a * a + (_Float16)d; }\n"))
  except CompileError: built = False
  assert built is has
