"""What the machine itself can do, measured in the same run as the rows that are judged against it: the float32 FMA peak (a
loop of independent vector FMAs, compiled for this CPU by core's host JIT) and memory bandwidth (STREAM-like copy and triad
loops in vectors with streaming stores, as kernels writing big outputs use, and a read-only vector sum, over arrays far larger
than the caches), on one thread and on every core the process may use.
A reduction reads and hardly writes: its ceiling is the read bandwidth, which a copy's (half writes) understates.
A bandwidth row is also judged against the same loop over its own footprint (`footprints`), timed as often as a row is, so
what of its arrays stays cached between calls counts for both (on a Zen 3 VM reporting 32 MiB of L3, the 2-thread sum of
64 MiB ran at 2.8x its own 1-thread figure).
Run alone: python bench/machine.py"""
from __future__ import annotations
import ctypes, os, platform, statistics, threading, time
from dataclasses import dataclass, field, fields
from typing import Callable, Iterable
import numpy as np

ACCUMULATORS = 12          # independent FMA chains: more than FMA latency x pipes (4 cycles x 2 on Zen), so the pipes stay full
FMA_ITERS = 30_000_000     # per thread: 6 cycles each (12 FMAs, 2 pipes), ~40 ms at 4.5 GHz: long against starting threads
                           # (at 2M, ~3 ms, two threads measured only 1.4x one)
STREAM_FLOATS = 1 << 25    # 128 MiB per array: well past any L3 here

GROUP = 4   # vectors per iteration of the copy and triad loops; every chunk a thread gets is a multiple of GROUP x width floats

def _stream(name: str, arrays: list[str], width: int, nt: bool) -> str:
  """A loop over n floats of `arrays`, `width`-wide vectors, GROUP per iteration: copy (dst = src) or triad (a = c*3 + b). The
  first array is written with streaming stores where `nt` (x86-64): a plain store reads each destination line in first, which
  a kernel writing a big output avoids the same way (plugin_cpu.streaming), so a plain-store loop would understate its ceiling."""
  v = f"<{width} x float>"
  three = f"<{', '.join(['float 3.0'] * width)}>"
  body = []
  for j in range(GROUP):
    body.append(f"  %q{j} = add i64 %base, {j}")
    body += [f"  %{a}.p{j} = getelementptr inbounds {v}, ptr %{a}, i64 %q{j}" for a in arrays]
    body += [f"  %{a}.v{j} = load {v}, ptr %{a}.p{j}, align {4 * width}" for a in arrays[1:]]
    val = f"%src.v{j}" if name == "copy" else f"%t{j}"
    if name == "triad": body.append(f"  %t{j} = call {v} @llvm.fma.v{width}f32({v} %c.v{j}, {v} {three}, {v} %b.v{j})")
    body.append(f"  store {v} {val}, ptr %{arrays[0]}.p{j}, align {4 * width}" + (", !nontemporal !0" if nt else ""))
  lines = "\n".join(body)
  return f"""define void @{name}({", ".join(f"ptr noalias %{a}" for a in arrays)}, i64 %n) {{
entry:
  %groups = udiv i64 %n, {width * GROUP}
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%i.next, %loop]
  %base = mul i64 %i, {GROUP}
{lines}
  %i.next = add i64 %i, 1
  %done = icmp eq i64 %i.next, %groups
  br i1 %done, label %exit, label %loop
exit:
{"  call void @llvm.x86.sse.sfence()" if nt else ""}
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

def _ir(width: int, nt: bool) -> str:
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
{_stream("copy", ["dst", "src"], width, nt)}
{_stream("triad", ["a", "b", "c"], width, nt)}
{_read(width)}
{"declare void @llvm.x86.sse.sfence()" if nt else ""}
!0 = !{{i32 1}}
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
  except ImportError:
    raw = np.empty(n + 16, np.float32)   # 64-byte aligned: the loops' vector loads and streaming stores declare it
    x = raw[(-raw.ctypes.data % 64) // 4:][:n]
  else: x = np.frombuffer(alloc_host(4 * n), np.float32)
  x[:] = 1.0
  return x

def cores() -> int:
  """The cores this process may run on (an affinity mask or a container's cpuset can allow fewer than the machine has)."""
  return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1

def _parallel(threads: int, work: list) -> float:
  """Seconds from the first of `threads` threads starting its call to the last one finishing, all released at once (ctypes
  releases the GIL while each call runs). Timed inside the threads: waking them and joining them (46-131 us for no work on a
  2-core Zen 4) is Python's cost, not the machine's, and was a few % of a 64 MiB read. About half of it stays: a later thread
  starts once it gets the GIL the first let go (2 threads, no work, 2-core Zen 4, load 6: 18-20 us best, 26-30 median, against
  39-43 and 53-58 timed around the release and join)."""
  start, spans = threading.Barrier(threads + 1), [(0.0, 0.0)] * threads
  def go(i: int, fn: object, args: tuple) -> None:
    start.wait()
    st = time.perf_counter()
    fn(*args)  # type: ignore[operator]
    spans[i] = (st, time.perf_counter())
  ts = [threading.Thread(target=go, args=(i, *w)) for i, w in enumerate(work)]
  for t in ts: t.start()
  start.wait()
  for t in ts: t.join()
  return max(e for _, e in spans) - min(s for s, _ in spans)

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

def median(ms: list[Machine]) -> Machine:
  """Each figure the median of several measurements of the same machine (bench/suite.py --rounds measures it every round, so
  the rows' ratios compare figures taken over the same spells of load)."""
  rates = [f.name for f in fields(Machine) if f.type == "float"]
  return Machine(ms[0].width, ms[0].threads, *(statistics.median(getattr(m, k) for m in ms) for k in rates),
                 {fp: statistics.median(m.sized[fp] for m in ms) for fp in ms[0].sized})

ARRAYS = {"read": 1, "copy": 2, "triad": 3}   # arrays each bandwidth loop streams through

def _library(width: int) -> object:
  """The loops in `width`-lane vectors, compiled for this CPU by core's host JIT (once per process)."""
  from core.device.hostjit import host_library
  return host_library(_ir(width, platform.machine().lower() in ("x86_64", "amd64")))

def _chunks(threads: int, count: int, width: int, *arrays: np.ndarray) -> tuple[int, list[tuple[int, ...]]]:
  """(floats covered, each thread's (addresses, floats)): every chunk a whole number of the loops' groups, so aligned too."""
  grain = width * max(GROUP, READ_ACCUMULATORS)
  count -= count % grain
  # the loops run their body once before testing the count: a thread given no group would run past its arrays
  if count < threads * grain: raise ValueError(f"{count} floats are fewer than a group of {grain} for each of {threads} threads")
  # exactly `threads` chunks, within a grain of each other (a ceil-sized step left 18 KiB copies 6 chunks for 8 threads)
  cut = [count // grain * t // threads * grain for t in range(threads + 1)]
  return count, [tuple(x.ctypes.data + 4 * lo for x in arrays) + (hi - lo,) for lo, hi in zip(cut, cut[1:])]

def _loop_work(lib: object, kind: str, threads: int, count: int, width: int, arrays: tuple[np.ndarray, ...],
               sink: np.ndarray) -> tuple[int, list]:
  """(bytes one call moves, each thread's (function, arguments)) of one bandwidth loop over `count` floats of `arrays`."""
  count, work = _chunks(threads, count, width, *arrays)
  if kind == "read":
    read = lib.function("read", None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)  # type: ignore[attr-defined]
    return 4 * count, [(read, (p, sink[t].ctypes.data, m)) for t, (p, m) in enumerate(work)]   # each thread's sum to its own row
  fn = lib.function(kind, None, *[ctypes.c_void_p] * ARRAYS[kind], ctypes.c_int64)  # type: ignore[attr-defined]
  return 4 * count * len(arrays), [(fn, args) for args in work]

def sampler(kind: str, nbytes: int, width: int | None = None) -> Callable[[int], float]:
  """One bandwidth loop ("read", "copy", "triad") over `nbytes` moved per call, its arrays allocated once: each call of the
  result with a thread count runs the loop once on that many threads and returns its GB/s. bench/suite.py times it between a
  row's frameworks, so the row and the loop it is judged against share each spell of the machine."""
  width = width or vector_width()
  count = max(nbytes // (4 * ARRAYS[kind]), cores() * width * READ_ACCUMULATORS)
  arrays = tuple(_array(count) for _ in range(ARRAYS[kind]))
  sink = np.zeros((cores(), width), np.float32)
  lib, plans = _library(width), {}
  def run(threads: int) -> float:
    if threads not in plans: plans[threads] = _loop_work(lib, kind, threads, count, width, arrays, sink)
    moved, work = plans[threads]
    return moved / _parallel(threads, work) / 1e9
  return run

def measure(repeat: int = 10, quick: bool = False, footprints: Iterable[tuple[str, int]] = (), width: int | None = None) -> Machine:
  """Best of `repeat` runs of each loop (as many as a row's timed calls: on a shared machine the best of 3 came out at a third
  of the best of 10), on one thread and on every core (`quick`: small sizes, a smoke test; the bandwidth
  then measures the caches, not memory); `footprints`: (kind, bytes moved per call) of rows, each also measured on every core
  with arrays of that size (at most the memory-sized ones); `width`: float32 lanes of every loop's vectors (default this CPU's
  widest; 8 measures what AVX2 code gets on an AVX-512 CPU: bench/suite.py --isa avx2)."""
  width, n = width or vector_width(), cores()
  iters, floats = (FMA_ITERS // 100, STREAM_FLOATS >> 8) if quick else (FMA_ITERS, STREAM_FLOATS)
  lib = _library(width)
  fma = lib.function("fma_loop", None, ctypes.c_int64, ctypes.c_void_p)  # type: ignore[attr-defined]
  sink = np.zeros((max(n, 1), width), np.float32)
  def peak(threads: int) -> float:
    flops = 2 * width * ACCUMULATORS * iters * threads
    return max(flops / _parallel(threads, [(fma, (iters, sink[t].ctypes.data)) for t in range(threads)]) for _ in range(repeat)) / 1e9
  a, b, c = (_array(floats) for _ in range(3))
  loops = {"read": (a,), "copy": (a, b), "triad": (a, b, c)}
  def best(kind: str, threads: int, count: int = floats) -> float:
    moved, work = _loop_work(lib, kind, threads, count, width, loops[kind], sink)
    return max(moved / _parallel(threads, work) for _ in range(repeat)) / 1e9
  def at(kind: str, nbytes: int) -> float:
    return best(kind, n, max(min(nbytes // (4 * ARRAYS[kind]), floats), n * width * READ_ACCUMULATORS))
  return Machine(width, n, peak(1), peak(n), best("copy", 1), best("copy", n), best("triad", 1), best("triad", n), best("read", 1),
                 best("read", n), {fp: at(*fp) for fp in dict.fromkeys(footprints)})

if __name__ == "__main__":
  import sys
  sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
  print(measure().text())
