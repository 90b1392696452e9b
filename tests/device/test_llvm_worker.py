"""The LLVM compile worker (core/device/llvm_worker.py): past CORE_LLVM_INPROC compiles, llvm_object runs in a child process
that is replaced every CORE_LLVM_WORKER_COMPILES compiles, so llvmlite's ~63 KB leak per compile stays bounded. The bytes and
the CompileError text are the same as in process; a killed worker is replaced; nothing is left behind."""
from __future__ import annotations
import inspect, os, signal, subprocess, sys, textwrap, threading, time
import pytest
from core.device import compiler, llvm_worker
from core.device.compiler import CompileError, llvm_compile_here, llvm_object
from core.device.hostjit import host_compiler
from core.helpers import Context

def kernel_ir(n: int) -> str:
  """a[i] = a[i] * n + i over 1000 floats: a loop LLVM vectorizes, different for every n."""
  return textwrap.dedent(f"""\
    define void @scale_{n}(ptr noalias %a) {{
    entry:
      br label %loop
    loop:
      %i = phi i64 [ 0, %entry ], [ %i1, %loop ]
      %p = getelementptr inbounds float, ptr %a, i64 %i
      %x = load float, ptr %p
      %fi = uitofp i64 %i to float
      %y = fmul float %x, {float(n):e}
      %z = fadd float %y, %fi
      store float %z, ptr %p
      %i1 = add i64 %i, 1
      %done = icmp eq i64 %i1, 1000
      br i1 %done, label %exit, label %loop
    exit:
      ret void
    }}
    """)

def tiny_ir(n: int) -> str:
  """One multiply: a compile of a few ms that still leaks the whole pass builder when run in process."""
  return f"define float @f{n}(float %x) {{\n  %y = fmul float %x, {float(n):e}\n  ret float %y\n}}\n"

def in_worker(src: str, **kw) -> bytes:
  with Context(CORE_LLVM_INPROC=0): return llvm_object(host_compiler().target, src, "the host", **kw)

def gone(pid: int) -> bool:
  """True when `pid` has exited and been reaped (or is a zombie of a parent that is gone: init reaps it)."""
  try:
    with open(f"/proc/{pid}/stat") as f: return f.read().rsplit(")", 1)[1].split()[0] == "Z"
  except FileNotFoundError: return True

def test_worker_gives_the_same_bytes_as_this_process():
  target = host_compiler().target
  for n in (3, 5):
    assert in_worker(kernel_ir(n)) == llvm_compile_here(target, kernel_ir(n), "the host")
    assert in_worker(kernel_ir(n), assembly=True) == llvm_compile_here(target, kernel_ir(n), "the host", assembly=True)
  assert llvm_worker.worker_pid() is not None

def test_worker_compiled_kernel_runs(tmp_path):
  # the whole path on the CPU device: every LLVM compile (kernels and HCQ submit programs) in the worker, results against numpy
  prog = textwrap.dedent("""
    import numpy as np
    from core import Tensor
    from core.device import compiler, llvm_worker
    rng = np.random.default_rng(0)
    for n in (5, 7, 9):
      a, b = rng.standard_normal((n, n + 1)).astype(np.float32), rng.standard_normal((n + 1, 3)).astype(np.float32)
      np.testing.assert_allclose((Tensor(a) @ Tensor(b)).exp().numpy(), np.exp(a @ b), rtol=1e-5)
      np.testing.assert_allclose(Tensor(a).max(1).numpy(), a.max(1))
    print(compiler.inproc_compiles, llvm_worker.worker_compiles)
    """)
  env = {**os.environ, "DEV": "CPU:LLVM", "CORE_LLVM_INPROC": "0", "CORE_CACHE_DIR": str(tmp_path)}
  r = subprocess.run([sys.executable, "-c", prog], env=env, capture_output=True, text=True, timeout=300)
  assert r.returncode == 0, r.stderr
  inproc, remote = map(int, r.stdout.split())
  assert inproc == 0 and remote >= 6

def test_compile_error_text_is_the_same():
  bad = "define void @f() {\n  %x = fadd float 1.0, undefined_name\n  ret void\n}\n"
  with pytest.raises(CompileError) as here: llvm_compile_here(host_compiler().target, bad, "the host")
  with pytest.raises(CompileError) as there: in_worker(bad)
  assert str(there.value) == str(here.value) and "rejected the IR for the host" in str(there.value)
  assert in_worker(kernel_ir(4))   # the worker still answers

def test_killed_worker_is_replaced():
  in_worker(kernel_ir(6))
  pid = llvm_worker.worker_pid()
  assert pid is not None
  os.kill(pid, signal.SIGKILL)
  deadline = time.monotonic() + 10
  while not gone(pid) and time.monotonic() < deadline: time.sleep(0.01)
  assert in_worker(kernel_ir(7)) == llvm_compile_here(host_compiler().target, kernel_ir(7), "the host")
  assert (new := llvm_worker.worker_pid()) is not None and new != pid and gone(pid)

def test_worker_that_keeps_dying_is_a_clear_error(monkeypatch):
  llvm_worker.shutdown()
  monkeypatch.setattr(llvm_worker, "worker_argv", lambda: [sys.executable, "-c", "import sys; sys.exit(3)"])
  starts = llvm_worker.worker_starts
  with pytest.raises(CompileError, match=r"died twice compiling for the host: .*exited with status 3"): in_worker(kernel_ir(8))
  assert llvm_worker.worker_starts == starts + 2 and llvm_worker.worker_pid() is None
  monkeypatch.undo()
  assert in_worker(kernel_ir(8))   # a working worker again

def test_worker_is_replaced_after_its_budget_and_reaped():
  llvm_worker.shutdown()
  pids = []
  with Context(CORE_LLVM_WORKER_COMPILES=2):
    for n in range(10, 15):
      in_worker(kernel_ir(n))
      pids.append(llvm_worker.worker_pid())
  assert len(set(pids)) == 3   # 2 + 2 + 1 compiles
  assert all(gone(p) for p in pids[:-1] if p is not None)

def test_threads_share_the_worker():
  target, results, errors = host_compiler().target, {}, []
  def work(k: int) -> None:
    try:
      for n in range(20 + 5 * k, 25 + 5 * k): results[n] = in_worker(kernel_ir(n))
    except Exception as e: errors.append(e)
  threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
  for t in threads: t.start()
  for t in threads: t.join()
  assert not errors and len(results) == 20
  assert all(lib == llvm_compile_here(target, kernel_ir(n), "the host") for n, lib in results.items())

def test_worker_exits_with_its_parent():
  prog = textwrap.dedent("""
    import os, sys
    from core.helpers import Context
    from core.device import llvm_worker
    from core.device.compiler import llvm_object
    from core.device.hostjit import host_compiler
    with Context(CORE_LLVM_INPROC=0): llvm_object(host_compiler().target, "define void @f() {\\n  ret void\\n}\\n")
    print(llvm_worker.worker_pid(), flush=True)
    os.kill(os.getpid(), 9)   # no atexit, no cleanup: the worker must notice its stdin closing
    """)
  r = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, timeout=120)
  assert r.returncode == -signal.SIGKILL, r.stderr
  pid = int(r.stdout)
  deadline = time.monotonic() + 20
  while not gone(pid) and time.monotonic() < deadline: time.sleep(0.05)
  assert gone(pid)

def test_compiles_in_the_worker_keep_this_process_flat():
  # 1,500 compiles in this process would keep ~85 MB (llvmlite's pass builder, 55-63 KB each, measured); in the worker
  # (replaced every 500) the parent keeps only what the IPC needs
  prog = inspect.getsource(tiny_ir) + textwrap.dedent("""
    from core.device.compiler import llvm_object
    from core.device.hostjit import host_compiler
    from core.device import llvm_worker
    import textwrap
    def rss(): return int(open("/proc/self/statm").read().split()[1]) * 4096
    target = host_compiler().target
    for n in range(100): llvm_object(target, tiny_ir(n))
    before = rss()
    for n in range(100, 1600): llvm_object(target, tiny_ir(n))
    print(rss() - before, llvm_worker.worker_compiles, llvm_worker.worker_starts)
    """)
  env = {**os.environ, "CORE_LLVM_INPROC": "0", "CORE_LLVM_WORKER_COMPILES": "500"}
  r = subprocess.run([sys.executable, "-c", prog], env=env, capture_output=True, text=True, timeout=600)
  assert r.returncode == 0, r.stderr
  grew, compiles, starts = map(int, r.stdout.split())
  assert compiles == 1600 and starts == 4
  assert grew < 1500 * 63 * 1024 // 10, f"RSS grew {grew / 2**20:.1f} MiB over 1,500 compiles in the worker"

def _off_process(src: str) -> bytes:
  # what compile_kernels' second compile thread does: its LLVM compiles go to the worker whatever CORE_LLVM_INPROC says
  out: list = []
  def work() -> None:
    compiler.off_process.on = True
    try: out.append(llvm_object(host_compiler().target, src, "the host"))
    except Exception as e: out.append(e)
  t = threading.Thread(target=work)
  t.start()
  t.join()
  if isinstance(out[0], Exception): raise out[0]
  return out[0]

def test_an_off_process_thread_compiles_in_the_worker_to_the_same_bytes(monkeypatch):
  monkeypatch.setattr(llvm_worker, "_off_process_failed", False)
  before, inproc = llvm_worker.worker_compiles, compiler.inproc_compiles
  assert _off_process(kernel_ir(40)) == llvm_compile_here(host_compiler().target, kernel_ir(40), "the host")
  assert llvm_worker.worker_compiles == before + 1 and compiler.inproc_compiles == inproc
  assert not getattr(compiler.off_process, "on", False)   # this thread still compiles in process
  bad = "define void @f() {\n  %x = fadd float 1.0, undefined_name\n  ret void\n}\n"
  with pytest.raises(CompileError, match="rejected the IR for the host"): _off_process(bad)
  assert not llvm_worker._off_process_failed   # an IR error is the source's, not the worker's

@pytest.mark.parametrize("argv", [["/nonexistent/python"], [sys.executable, "-c", "import sys; sys.exit(3)"]])
def test_an_off_process_thread_compiles_here_when_the_worker_cannot_start(argv, monkeypatch):
  llvm_worker.shutdown()
  monkeypatch.setattr(llvm_worker, "_off_process_failed", False)
  monkeypatch.setattr(llvm_worker, "worker_argv", lambda: argv)
  assert _off_process(kernel_ir(41)) == llvm_compile_here(host_compiler().target, kernel_ir(41), "the host")
  assert llvm_worker._off_process_failed and llvm_worker.worker_pid() is None
  starts = llvm_worker.worker_starts
  assert _off_process(kernel_ir(42)) == llvm_compile_here(host_compiler().target, kernel_ir(42), "the host")
  assert llvm_worker.worker_starts == starts   # no second try at starting it
