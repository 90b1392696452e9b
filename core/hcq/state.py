"""The pipeline's context: plugin hooks, device lookups, and what stages record on the side (placeholder contents)."""
from __future__ import annotations
import os, sys, threading
from dataclasses import field
from typing import Any, Callable, Protocol
from core.ir.ops import UOp
from core.device.hcq import HCQDevice
from core.device.registry import Device
from core.helpers import BEAM, DEBUG, LRUCache, mutable_record
from core.codegen.program import binary_nbytes
from core.device.compiler import off_process as llvm_off_process

# compiled kernels of HCQ schedules by (kernel, device), bounded by count and by their binaries' bytes
_compiled: LRUCache = LRUCache("hcq_programs", 512, 256 << 20, binary_nbytes)
Device.on_change(_compiled.clear)

def compile_kernel(ast: UOp, device: str) -> UOp:
  """The compiled PROGRAM(SINK, DEVICE, LINEAR, SOURCE, BINARY) of a kernel for `device`, once per (kernel, device)."""
  if (hit := _compiled.get((ast, device))) is None:
    from core.codegen.program import get_program, compile_program, program_source
    from core.device import profiler
    dev = Device[device]
    with profiler.compiling(device, str(ast.arg)): hit = _compiled[(ast, device)] = compile_program(get_program(ast, dev.renderer), dev.compiler)
    if DEBUG >= 4: print(program_source(hit))
  return hit

def _cores() -> int:
  """The cores this process may run on."""
  try: return len(os.sched_getaffinity(0))
  except AttributeError: return os.cpu_count() or 1   # no affinity call on macOS

COMPILE_SWITCH_INTERVAL = 1e-4   # seconds: the GIL's switch interval while compile_kernels overlaps codegen and compiles
COMPILE_BACKLOG = 4   # compiles waiting for the compile thread when compile_kernels starts a second one (off-process LLVM)

def compile_kernels(kernels: list[tuple[UOp, str]]) -> None:
  """compile_kernel of each (kernel, device) not compiled yet, each kernel's compile (LLVM, a C compiler) in a second thread
  while this one generates the next kernel's code: codegen is Python and holds the GIL, the compilers mostly run outside
  it, so on two cores a first call's codegen hides behind its compiles. The same programs as compile_kernel's, in order."""
  todo = [k for k in dict.fromkeys(kernels) if k not in _compiled]
  from core.device import profiler
  # one at a time: nothing to overlap, no second core to overlap on, compile events to time one by one, or BEAM's timed
  # candidates (run beside a compile on the other core, they would time slower)
  if len(todo) < 2 or _cores() < 2 or profiler.PROFILE or BEAM: return
  from _queue import SimpleQueue   # queue's C part: concurrent.futures would import logging, ~5 ms of a first call
  from core.codegen.program import get_program, compile_program, program_source, _binaries
  jobs: SimpleQueue = SimpleQueue()
  done: SimpleQueue = SimpleQueue()
  # the threads run only the compilers: the UOps, the in-memory caches and their counts stay with this thread
  def work(off_process: bool) -> None:
    if off_process: llvm_off_process.on = True   # this thread's LLVM compiles run in the worker process
    while (job := jobs.get()) is not None:
      src, compiler = job
      try: done.put((job, compiler.compile_cached(src), None))
      except Exception as e: done.put((job, None, e))
  # the compile thread takes the GIL back after each of its ~26 calls into LLVM a compile; while codegen runs, each wait is a
  # switch interval (5 ms by default: 130 ms a compile, longer than the compile), so the interval is short while both run
  interval = sys.getswitchinterval()
  sys.setswitchinterval(min(interval, COMPILE_SWITCH_INTERVAL))
  threads = [threading.Thread(target=work, args=(False,), name="compile", daemon=True)]
  threads[0].start()
  progs: list[tuple[UOp, Any]] = []
  queued: set[tuple[str, Any]] = set()   # (source, compiler): kernels that differ only in lifted literals share a source
  try:
    try:
      for ast, device in todo:
        dev = Device[device]
        progs.append((prog := get_program(ast, dev.renderer), dev.compiler))
        if (job := (program_source(prog), dev.compiler)) in queued or (dev.compiler, job[0]) in _binaries: continue
        queued.add(job)
        jobs.put(job)
        # compiles fall behind codegen: a second thread compiles too, its LLVM compiles in the worker process (llvmlite runs
        # one call at a time in a process; a C compiler is a process already), so two run at once; the worker's start
        # (~0.3 s) pays only where this many wait
        if len(threads) == 1 and jobs.qsize() >= COMPILE_BACKLOG:
          threads.append(threading.Thread(target=work, args=(True,), name="compile-worker", daemon=True))
          threads[1].start()
    finally:
      for _ in threads: jobs.put(None)
    got: dict[tuple[str, Any], tuple[bytes | None, Exception | None]] = {}
    for key, (prog, compiler) in zip(todo, progs):   # in the kernels' order, whichever thread compiled them
      binary = None
      if (job := (program_source(prog), compiler)) in queued:
        while job not in got:
          j, out, err = done.get()
          got[j] = (out, err)
        binary, err = got[job]
        if err is not None: raise err
      _compiled[key] = hit = compile_program(prog, compiler, binary)
      if DEBUG >= 4: print(program_source(hit))
  finally:
    for t in threads: t.join()
    sys.setswitchinterval(interval)

class HCQHooks(Protocol):
  """The plugin hooks the pipeline asks, each of the plugin that declared the device (core.device.plugins.PluginManager)."""
  def pm_prep_program(self, device: str) -> Any: ...
  def pm_lower(self, device: str) -> Any: ...
  def pm_bufferize(self, device: str) -> Any: ...

# tests set this to an HCQHooks object that stands in for the plugin manager
HOOKS: HCQHooks | None = None

@mutable_record
class HCQState:
  """Everything a stage may need besides the graph. Tests build one with a fake plugin; the engine uses `default()`."""
  hooks: HCQHooks
  hcq_of: Callable[[str], HCQDevice]           # device name -> its HCQ object
  buffer_of: Callable[[UOp], Any]              # real BUFFER uop -> Buffer
  compile: Callable[[UOp, str], UOp] = compile_kernel
  contents: dict[UOp, bytes] = field(default_factory=dict)      # placeholder -> bytes to upload into it
  internal: dict[UOp, None] = field(default_factory=dict)       # real buffers owned by the pipeline or plugin (not schedule slots)
  commands: dict[UOp, list[tuple[str, int]]] = field(default_factory=dict)  # encoded submit -> [(command kind, byte offset)]
  bufmap: dict[UOp, UOp] = field(default_factory=dict)          # placeholder -> the real buffer bufferize gave it
  timed: list[Any] = field(default_factory=list)                # timestamps.Timed of each timed command (profiling only)

  @staticmethod
  def default(buffer_of: Callable[[UOp], Any]) -> HCQState:
    from core.device.plugins import get_plugins
    def hcq_of(device: str) -> HCQDevice:
      if (h := Device[device].hcq) is None: raise RuntimeError(f"{device} has no command queues (its Compiled device has no hcq)")
      return h
    def lookup(u: UOp) -> Any:
      # buffers a plugin's pm_bufferize made are the plugin's (its HCQ object's buffer_of), the rest the engine's
      hcq = Device[u.src[1].arg].hcq
      return b if hcq is not None and (b := hcq.buffer_of(u)) is not None else buffer_of(u)
    return HCQState(HOOKS if HOOKS is not None else get_plugins(), hcq_of, lookup)

  def addr(self, buf_uop: UOp, device: str) -> int:
    """The address of the buffer behind `buf_uop` as `device` sees it."""
    return self.hcq_of(device).addr(self.buffer_of(buf_uop))
