"""The EXAMPLE compiler: C source -> shared object bytes with the host C compiler (results cached by core's Compiler)."""
from __future__ import annotations
import os, shutil, subprocess, tempfile
from core.device.compiler import CompileError, Compiler

class HostCCompiler(Compiler):
  def __init__(self) -> None:
    self.cc = next((c for c in ([os.environ["CC"]] if os.getenv("CC") else []) + ["cc", "gcc", "clang"] if shutil.which(c)), "cc")
    version = subprocess.run([self.cc, "--version"], capture_output=True, text=True).stdout.split("\n")[0]
    super().__init__(f"example-{self.cc}-{version}")   # the cache key names the compiler and its version

  def compile(self, src: str) -> bytes:
    with tempfile.TemporaryDirectory() as d:
      out = os.path.join(d, "kernel.so")
      # no -ffast-math: results must match numpy's IEEE arithmetic
      p = subprocess.run([self.cc, "-O2", "-fPIC", "-shared", "-fno-math-errno", "-x", "c", "-", "-o", out], input=src.encode(), capture_output=True)
      if p.returncode != 0: raise CompileError(f"{self.cc} failed:\n{p.stderr.decode()}\nsource:\n{src}")
      with open(out, "rb") as f: return f.read()
