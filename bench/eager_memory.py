"""Issue 22.3's memory row: N eager ops (default 20,000) that each need new kernels (a new shape every op), from a cold compile
cache (an empty CORE_CACHE_DIR in a temp folder), printing the process's RSS before and after, the time, and where the LLVM
compiles ran (this process up to CORE_LLVM_INPROC, then the compile worker, replaced every CORE_LLVM_WORKER_COMPILES). The goal:
RSS growth under 300 MB. `--compile-cost` instead times one LLVM compile in this process and in the worker (ms each).
Run: DEV=CPU python bench/eager_memory.py [--ops 20000] [--compile-cost]"""
from __future__ import annotations
import argparse, os, sys, tempfile, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))   # core from a checkout

def rss(pid: int | str = "self") -> int:
  with open(f"/proc/{pid}/statm") as f: return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

def mb(n: int) -> str: return f"{n / 2**20:.1f} MB"

def loop_ir(n: int) -> str:
  """An elementwise loop over 1000 floats like a small eager kernel; its constant makes every compile new."""
  return (f"define void @k{n}(ptr noalias %a) {{\nentry:\n  br label %loop\nloop:\n  %i = phi i64 [ 0, %entry ], [ %i1, %loop ]\n"
          f"  %p = getelementptr inbounds float, ptr %a, i64 %i\n  %x = load float, ptr %p\n  %y = fmul float %x, {float(n):e}\n"
          f"  store float %y, ptr %p\n  %i1 = add i64 %i, 1\n  %d = icmp eq i64 %i1, 1000\n  br i1 %d, label %exit, label %loop\n"
          f"exit:\n  ret void\n}}\n")

def compile_cost(count: int) -> None:
  from core.device.compiler import llvm_compile_here, llvm_object
  from core.device.hostjit import host_compiler
  from core.helpers import Context
  target = host_compiler().target
  with Context(CORE_LLVM_INPROC=0): llvm_object(target, loop_ir(0))   # the worker's start is not what is timed
  here = there = 0.0
  for n in range(1, count + 1):   # interleaved, so a change in the machine's load falls on both alike
    t0 = time.perf_counter()
    llvm_compile_here(target, loop_ir(n))
    t1 = time.perf_counter()
    with Context(CORE_LLVM_INPROC=0): llvm_object(target, loop_ir(n))
    here, there = here + t1 - t0, there + time.perf_counter() - t1
  print(f"LLVM compile of a small loop kernel, {count} each: in process {here / count * 1e3:.2f} ms, in the worker "
        f"{there / count * 1e3:.2f} ms (load {os.getloadavg()[0]:.1f})")

def eager_ops(ops: int) -> None:
  from core import Tensor
  from core.device import compiler, llvm_worker
  (Tensor([1.0]) + 1).realize()
  start, t0 = rss(), time.perf_counter()
  for i in range(ops):
    (Tensor.ones(8 + i) * 2 + 1).sum().realize()   # a new shape every op: new kernels every op
    if (i + 1) % 2000 == 0: print(f"  {i + 1} ops: RSS {mb(rss())}, {time.perf_counter() - t0:.0f} s", flush=True)
  end, secs = rss(), time.perf_counter() - t0
  assert (Tensor.ones(ops) * 2 + 1).sum().item() == 3 * ops
  pid = llvm_worker.worker_pid()
  print(f"{ops} eager ops, each a new shape, cold compile cache: RSS {mb(start)} -> {mb(end)} (grew {mb(end - start)}; goal < 300 MB) "
        f"in {secs:.0f} s ({secs / ops * 1e3:.1f} ms per op, load {os.getloadavg()[0]:.1f})")
  print(f"LLVM compiles: {compiler.inproc_compiles} in this process (CORE_LLVM_INPROC={compiler.LLVM_INPROC.value}), "
        f"{llvm_worker.worker_compiles} in {llvm_worker.worker_starts} worker(s) (CORE_LLVM_WORKER_COMPILES="
        f"{compiler.LLVM_WORKER_COMPILES.value}); the worker's RSS now {mb(rss(pid)) if pid else '-'}")

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
  ap.add_argument("--ops", type=int, default=20000)
  ap.add_argument("--compile-cost", type=int, nargs="?", const=200, default=0, metavar="N", help="time N compiles each way instead")
  args = ap.parse_args()
  if args.compile_cost: return compile_cost(args.compile_cost)
  with tempfile.TemporaryDirectory(prefix="core-cache-") as d:
    os.environ["CORE_CACHE_DIR"] = d   # read when a cache path is needed: a cold compile cache
    eager_ops(args.ops)

if __name__ == "__main__": main()
