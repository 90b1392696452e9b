"""What the machine itself can do, measured in the same run as the rows that are judged against it: the float32 FMA peak (a
loop of independent vector FMAs, compiled for this CPU by core's host JIT) and memory bandwidth (STREAM-like copy and
triad loops and a read-only sum over arrays far larger than the caches), on one thread and on every core the process may use.
A reduction reads and hardly writes: its ceiling is the read bandwidth, which a copy's (half writes) understates.
A bandwidth row is judged against the same loop over its own footprint (`footprints`), timed as often as a row is: what of
its arrays stays cached between calls then counts for both (on a Zen 3 VM reporting 32 MiB of L3, the 2-thread sum of 64 MiB
ran at 185% of the 128 MiB read loop's best of 3, and 2.8x its own 1-thread figure).
Run alone: python bench/machine.py"""
from __future__ import annotations
import ctypes, os, threading, time
from dataclasses import dataclass, field
from typing import Iterable
import numpy as np

ACCUMULATORS = 12          # independent FMA chains: more than FMA latency x pipes (4 cycles x 2 on Zen), so the pipes stay full
FMA_ITERS = 30_000_000     # per thread: 6 cycles each (12 FMAs, 2 pipes), ~40 ms at 4.5 GHz: long against starting threads
                           # (at 2M, ~3 ms, two threads measured only 1.4x one)
STREAM_FLOATS = 1 << 25    # 128 MiB per array: well past any L3 here

TRIAD = """  %t = call float @llvm.fma.f32(float %c.v, float 3.0, float %b.v)
  store float %t, ptr %a.p"""

def _stream(name: str, arrays: list[str], body: str) -> str:
  """A loop over n floats of `arrays` (the first is written): `body` reads %<array>.v and stores through %<array>.p."""
  geps = "\n".join(f"  %{a}.p = getelementptr inbounds float, ptr %{a}, i64 %i" for a in arrays)
  loads = "\n".join(f"  %{a}.v = load float, ptr %{a}.p" for a in arrays[1:])
  return f"""define void @{name}({", ".join(f"ptr noalias %{a}" for a in arrays)}, i64 %n) {{
entry:
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%i.next, %loop]
{geps}
{loads}
{body}
  %i.next = add i64 %i, 1
  %done = icmp eq i64 %i.next, %n
  br i1 %done, label %exit, label %loop
exit:
  ret void
}}"""

READ_ACCUMULATORS = 8   # vector partial sums in the read loop: more than add latency x pipes, so the loads, not the adds, limit it

def _read(width: int) -> str:
  """A read-only loop: sums n floats (n a multiple of width x READ_ACCUMULATORS) into vector partial sums and stores their
  total to %out, so nothing is written per element and the loads cannot be optimized away."""
  v, k = f"<{width} x float>", READ_ACCUMULATORS
  phis = "\n".join(f"  %s{j} = phi {v} [zeroinitializer, %entry], [%t{j}, %loop]" for j in range(k))
  body = "\n".join(f"  %q{j} = add i64 %base, {j}\n  %p{j} = getelementptr inbounds {v}, ptr %src, i64 %q{j}\n"
                   f"  %x{j} = load {v}, ptr %p{j}, align 4\n  %t{j} = fadd {v} %s{j}, %x{j}" for j in range(k))
  total = "\n".join(f"  %u{j} = fadd {v} {'%t0' if j == 1 else f'%u{j - 1}'}, %t{j}" for j in range(1, k))
  return f"""define void @read(ptr noalias %src, ptr noalias %out, i64 %n) {{
entry:
  %groups = udiv i64 %n, {width * k}
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%i.next, %loop]
{phis}
  %base = mul i64 %i, {k}
{body}
  %i.next = add i64 %i, 1
  %done = icmp eq i64 %i.next, %groups
  br i1 %done, label %exit, label %loop
exit:
{total}
  store {v} %u{k - 1}, ptr %out, align 4
  ret void
}}"""

def _ir(width: int) -> str:
  v = f"<{width} x float>"
  init = "\n".join(f"  %a{i}.0 = insertelement {v} zeroinitializer, float {i + 1}.0, i32 0" for i in range(ACCUMULATORS))
  phis = "\n".join(f"  %a{i} = phi {v} [%a{i}.0, %entry], [%n{i}, %loop]" for i in range(ACCUMULATORS))
  # a = a * 0.5 + 0.25 converges to 0.5: no overflow, no denormals to slow it down
  m, c = (f"<{', '.join([f'float {x}'] * width)}>" for x in ("0.5", "0.25"))
  fmas = "\n".join(f"  %n{i} = call {v} @llvm.fma.v{width}f32({v} %a{i}, {v} {m}, {v} {c})" for i in range(ACCUMULATORS))
  sums = [f"%n{i}" for i in range(ACCUMULATORS)]
  adds, k = [], 0
  while len(sums) > 1:
    a, b, *sums = sums
    adds.append(f"  %s{k} = fadd {v} {a}, {b}")
    sums.append(f"%s{k}")
    k += 1
  return f"""declare {v} @llvm.fma.v{width}f32({v}, {v}, {v})
define void @fma_loop(i64 %iters, ptr %out) {{
entry:
{init}
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%i.next, %loop]
{phis}
{fmas}
  %i.next = add i64 %i, 1
  %done = icmp eq i64 %i.next, %iters
  br i1 %done, label %exit, label %loop
exit:
{chr(10).join(adds)}
  store {v} {sums[0]}, ptr %out, align 4
  ret void
}}
{_stream("copy", ["dst", "src"], "  store float %src.v, ptr %dst.p")}
{_stream("triad", ["a", "b", "c"], TRIAD)}
{_read(width)}
declare float @llvm.fma.f32(float, float, float)
"""

def vector_width() -> int:
  """float32 lanes of the widest vectors this CPU has (the FMA loop's vector type)."""
  import llvmlite.binding as llvm
  feats = llvm.get_host_cpu_features()
  return 16 if feats.get("avx512f") else 8 if feats.get("avx2") or feats.get("avx") else 4

def _array(n: int) -> np.ndarray:
  """n float32 ones in the memory CPU buffers get (big ones on huge pages: ~5% more bandwidth than numpy's 4 KiB pages, which
  would understate what the kernels can reach), touched now so first-touch page faults are not timed."""
  try: from plugin_cpu.hostmem import alloc_host
  except ImportError: return np.full(n, 1.0, np.float32)
  x = np.frombuffer(alloc_host(4 * n), np.float32)
  x[:] = 1.0
  return x

def cores() -> int:
  """The cores this process may run on (an affinity mask or a container's cpuset can allow fewer than the machine has)."""
  return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1

def _parallel(threads: int, work: list) -> float:
  """Seconds for `threads` threads to run their calls at once (ctypes releases the GIL while each call runs)."""
  start = threading.Barrier(threads + 1)
  def go(fn: object, args: tuple) -> None:
    start.wait()
    fn(*args)  # type: ignore[operator]
  ts = [threading.Thread(target=go, args=w) for w in work]
  for t in ts: t.start()
  start.wait()
  st = time.perf_counter()
  for t in ts: t.join()
  return time.perf_counter() - st

@dataclass
class Machine:
  width: int
  threads: int
  peak_1: float        # GFLOP/s float32, one thread
  peak_all: float      # GFLOP/s float32, every core
  copy_1: float        # GB/s read + written
  copy_all: float
  triad_1: float
  triad_all: float
  read_1: float        # GB/s read (a sum: nothing written per element)
  read_all: float
  sized: dict[tuple[str, int], float] = field(default_factory=dict)   # (kind, bytes moved per call): all-core GB/s at that footprint
  def bandwidth(self, kind: str, nbytes: int | None = None) -> float:
    """The all-core bandwidth of one access pattern: "read" (a reduction), "copy" (read one, write one), "triad" (read two,
    write one); over `nbytes` moved per call when that footprint was measured, else over memory-sized arrays."""
    if nbytes is not None and (kind, nbytes) in self.sized: return self.sized[(kind, nbytes)]
    return {"read": self.read_all, "copy": self.copy_all, "triad": self.triad_all}[kind]
  def text(self) -> str:
    at = ", ".join(f"{kind} {nbytes / 2**20:.3g} MiB {bw:.1f}" for (kind, nbytes), bw in sorted(self.sized.items()))
    return (f"measured: float32 FMA peak {self.peak_all:.0f} GFLOP/s on {self.threads} threads ({self.peak_1:.0f} on 1; {self.width}-wide "
            f"vectors); memory copy {self.copy_all:.1f} GB/s ({self.copy_1:.1f} on 1), triad {self.triad_all:.1f} GB/s ({self.triad_1:.1f} on 1), read {self.read_all:.1f} GB/s ({self.read_1:.1f} on 1)" +
            (f"; at the rows' footprints (bytes moved per call), GB/s on {self.threads} threads: {at}" if at else ""))

ARRAYS = {"read": 1, "copy": 2, "triad": 3}   # arrays each bandwidth loop streams through

def measure(repeat: int = 10, quick: bool = False, footprints: Iterable[tuple[str, int]] = ()) -> Machine:
  """Best of `repeat` runs of each loop (as many as a row's timed calls: on a shared machine the best of 3 came out at a third
  of the best of 10), on one thread and on every core (`quick`: small sizes, a smoke test; the bandwidth
  then measures the caches, not memory); `footprints`: (kind, bytes moved per call) of rows, each also measured on every core
  with arrays of that size (at most the memory-sized ones)."""
  from core.device.hostjit import host_library
  width, n = vector_width(), cores()
  iters, floats = (FMA_ITERS // 100, STREAM_FLOATS >> 8) if quick else (FMA_ITERS, STREAM_FLOATS)
  lib = host_library(_ir(width))
  fma = lib.function("fma_loop", None, ctypes.c_int64, ctypes.c_void_p)
  copy = lib.function("copy", None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)
  triad = lib.function("triad", None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)
  read = lib.function("read", None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)
  sink = np.zeros((max(n, 1), width), np.float32)
  def peak(threads: int) -> float:
    flops = 2 * width * ACCUMULATORS * iters * threads
    return max(flops / _parallel(threads, [(fma, (iters, sink[t].ctypes.data)) for t in range(threads)]) for _ in range(repeat)) / 1e9
  a, b, c = (_array(floats) for _ in range(3))
  def chunks(threads: int, count: int, *arrays: np.ndarray) -> list[tuple[int, ...]]:
    step = -(-count // threads)
    return [tuple(x.ctypes.data + 4 * lo for x in arrays) + (min(step, count - lo),) for lo in range(0, count, step)]
  def stream(fn: object, threads: int, arrays: tuple[np.ndarray, ...], count: int = floats) -> float:
    moved = 4 * count * len(arrays)
    return max(moved / _parallel(threads, [(fn, args) for args in chunks(threads, count, *arrays)]) for _ in range(repeat)) / 1e9
  def reads(threads: int, count: int = floats) -> float:
    # each thread's partial sum goes to its own row of `sink`; its chunk must be a multiple of the loop's group
    count -= count % (threads * width * READ_ACCUMULATORS)
    work = [(read, (args[0], sink[t].ctypes.data, args[1])) for t, args in enumerate(chunks(threads, count, a))]
    return max(4 * count / _parallel(threads, work) for _ in range(repeat)) / 1e9
  loops = {"copy": (copy, (a, b)), "triad": (triad, (a, b, c))}
  def at(kind: str, nbytes: int) -> float:
    count = max(min(nbytes // (4 * ARRAYS[kind]), floats), n * width * READ_ACCUMULATORS)
    if kind == "read": return reads(n, count)
    fn, arrays = loops[kind]
    return stream(fn, n, arrays, count)
  return Machine(width, n, peak(1), peak(n), stream(copy, 1, (a, b)), stream(copy, n, (a, b)),
                 stream(triad, 1, (a, b, c)), stream(triad, n, (a, b, c)), reads(1), reads(n),
                 {fp: at(*fp) for fp in dict.fromkeys(footprints)})

if __name__ == "__main__":
  import sys
  sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
  print(measure().text())
