"""Seeing what ran. DEBUG=2: a line per kernel and copy (device, queue, shape, time, GFLOP/s, GB/s) and a total at exit.
PROFILE=1: every kernel, copy and compile as a Chrome trace event, written at exit to PROFILE_PATH (default ./profile.json),
one track per device and queue; Perfetto (ui.perfetto.dev) and chrome://tracing open it.

Times come from where the work ran: the direct path times each call on the host; HCQ devices get a TIMESTAMP command before
and after each launch and copy (core/hcq/timestamps.py), read back after the run and converted with HCQDevice.timestamp_ns."""
from __future__ import annotations
import atexit, os, threading, time
from dataclasses import field
from typing import Any
from core.device.counters import GlobalCounters, tallies
from core.helpers import ContextVar, DEBUG, LRUCache, colored, frozen_record

PROFILE = ContextVar("PROFILE", 0)

def timing() -> bool:
  """Whether per-kernel times are wanted (DEBUG>=2 or PROFILE): the direct path then waits for each kernel, and HCQ
  submissions carry timestamps."""
  return DEBUG.value >= 2 or bool(PROFILE.value)   # the values, not the settings' operators: every eager op asks twice

@frozen_record
class Event:
  """One span of work: kind "kernel", "copy" or "compile"; `track` is the queue (or "host" for compiles and direct calls)."""
  kind: str
  name: str
  device: str
  track: str
  start_ns: int
  dur_ns: int
  args: dict[str, Any] = field(default_factory=dict)

_lock = threading.Lock()
_events: list[Event] = []
_at_exit = False

def _register_exit() -> None:
  global _at_exit
  with _lock:
    if _at_exit: return
    _at_exit = True
  atexit.register(_finish)

def record(ev: Event) -> None:
  """Keeps `ev` for the trace when PROFILE is on (written at exit)."""
  if not PROFILE: return
  _register_exit()
  with _lock: _events.append(ev)

def events() -> list[Event]:
  with _lock: return list(_events)

def clear() -> None:
  with _lock: _events.clear()

def _rate(n: float, seconds: float) -> float: return n / seconds * 1e-9 if seconds > 0 else 0.0

def kernel(device: str, track: str, name: str, shape: list[int], start_ns: int, dur_ns: int, ops: int, mem: int, seq: int) -> None:
  """Reports a kernel that ran: its DEBUG=2 line, the running time total, and a trace event."""
  tallies.time_sum_s += dur_ns * 1e-9
  if DEBUG >= 2:
    _register_exit()
    s = dur_ns * 1e-9
    print(f"*** {device:8s} {track:10s} {seq:5d} {colored(name, 'cyan'):40s} shape {str(shape):22s} tm {s * 1e6:10.2f}us "
          f"({_rate(ops, s):8.2f} GFLOP/s {_rate(mem, s):8.2f} GB/s)")
  record(Event("kernel", name, device, track, start_ns, dur_ns, {"shape": shape, "ops": ops, "bytes": mem}))

def copy(device: str, track: str, src: str, nbytes: int, start_ns: int, dur_ns: int) -> None:
  """Reports a copy into `device` from `src` (`dur_ns` 0 when it was not timed)."""
  if DEBUG >= 2:
    _register_exit()
    s = dur_ns * 1e-9
    print(f"*** {device:8s} {track:10s} copy {nbytes:12d} bytes from {src:8s}" + (f" tm {s * 1e6:10.2f}us ({_rate(nbytes, s):8.2f} GB/s)" if dur_ns else ""))
  record(Event("copy", f"copy {src} -> {device}", device, track, start_ns, dur_ns, {"bytes": nbytes}))

class compiling:
  """`with compiling(device, name):` records the block as a compile event (codegen and the compiler, or a cache hit)."""
  def __init__(self, device: str, name: str): self.device, self.name = device, name
  def __enter__(self) -> None: self.st = time.perf_counter_ns()
  def __exit__(self, *exc: object) -> None:
    if PROFILE: record(Event("compile", self.name, self.device, "compile", self.st, time.perf_counter_ns() - self.st))

def summary() -> str:
  """The totals since the counters were last reset: kernels, time, work and memory traffic."""
  g = GlobalCounters
  return (f"*** total: {g.kernel_count} kernels, {g.time_sum_s * 1e3:.2f} ms, {g.global_ops * 1e-9:.3f} GFLOP, {g.global_mem * 1e-9:.3f} GB"
          + (f" ({_rate(g.global_ops, g.time_sum_s):.2f} GFLOP/s {_rate(g.global_mem, g.time_sum_s):.2f} GB/s)" if g.time_sum_s else ""))

def chrome_trace(evs: list[Event]) -> dict[str, Any]:
  """The trace-event JSON object: a process per device, a thread per track, a complete ("X") event per span, in microseconds."""
  pids = {d: i + 1 for i, d in enumerate(sorted({e.device for e in evs}))}
  tids = {k: i + 1 for i, k in enumerate(sorted({(e.device, e.track) for e in evs}))}
  out: list[dict[str, Any]] = [{"name": "process_name", "ph": "M", "pid": p, "args": {"name": d}} for d, p in pids.items()]
  out += [{"name": "thread_name", "ph": "M", "pid": pids[d], "tid": t, "args": {"name": k}} for (d, k), t in tids.items()]
  out += [{"name": e.name, "cat": e.kind, "ph": "X", "pid": pids[e.device], "tid": tids[(e.device, e.track)], "ts": e.start_ns / 1e3,
           "dur": e.dur_ns / 1e3, "args": e.args} for e in evs]
  return {"traceEvents": out, "displayTimeUnit": "ns"}

def write_trace(path: str | None = None) -> str:
  """Writes the recorded events as a Chrome trace (temp file + rename, so a reader never sees half of one); returns the path."""
  path = path or os.getenv("PROFILE_PATH") or "profile.json"
  tmp = f"{path}.{os.getpid()}.tmp"
  import json   # only PROFILE=1 writes a trace: every other process skips json's import
  with open(tmp, "w") as f: json.dump(chrome_trace(events()), f)
  os.replace(tmp, path)
  return path

def _finish() -> None:
  if DEBUG >= 2:
    print(summary())
    print("*** caches: " + "; ".join(c.stats() for c in LRUCache.all.values()))
  if PROFILE and events(): print(f"*** profile: {len(events())} events written to {write_trace()}")
