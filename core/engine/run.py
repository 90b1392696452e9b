"""Execute schedule items on devices: compile-once runners, copies, and what DEBUG=2 and PROFILE=1 report of them."""
from __future__ import annotations
import time
from typing import Any
from core.ir.ops import UOp, Ops
from core.device import profiler
from core.device.buffer import Buffer
from core.device.counters import tallies
from core.device.registry import Device
from core.codegen.program import get_program, compile_program, binary_nbytes, launch_vals, program_binary, program_source, program_shape, ProgramSpec
from core.helpers import DEBUG, LRUCache, prod
from core.engine.lock import engine_lock
from core.engine.state import facts

def buffer_of(u: UOp) -> Buffer:
  """The device Buffer behind a BUFFER uop (created, not yet allocated, on first ask; it lives as long as the node)."""
  if (f := facts.get_id(id(u))) is not None and f.buffer is not None: return f.buffer
  if u.op is not Ops.BUFFER: raise TypeError(f"buffer_of needs a BUFFER uop, got {u.op.name}")
  return set_buffer(u, Buffer(u.src[1].arg, u.arg, u.dtype))

def set_buffer(u: UOp, buf: Buffer) -> Buffer:
  """Makes `buf` the Buffer of the BUFFER node `u` unless it has one; returns the one it has."""
  f = facts.of(u)
  with engine_lock:
    if f.buffer is None: f.buffer = buf
  return f.buffer

class CompiledRunner:
  """A compiled kernel for one device: call it with Buffers. `program` is its compiled PROGRAM uop, `spec` that PROGRAM's arg."""
  def __init__(self, program: UOp, device: Any):
    st = time.perf_counter()
    self.program = compile_program(program, device.compiler)
    self.spec: ProgramSpec = program.arg
    self.device = device
    self.prg = device.runtime(self.spec.name, program_binary(self.program))
    self.compile_s = time.perf_counter() - st
    if DEBUG >= 4: print(program_source(program))
  def __call__(self, bufs: list[Buffer], var_vals: dict[UOp, int] | None = None, wait: bool = False) -> float | None:
    # kernel variables were narrowed to int32/int64 by codegen: match them by (name, min, max)
    vals = launch_vals(self.spec, {v.arg: val for v, val in (var_vals or {}).items()})
    return self.prg(*[b._buf for b in bufs], global_size=self.spec.global_size, local_size=self.spec.local_size, vals=vals, wait=wait)

# compiled kernels by (kernel, device): a bounded LRU, so a long run of new shapes does not keep every kernel it ever made
_runners: LRUCache = LRUCache("runners", 512, 256 << 20, lambda r: binary_nbytes(r.program))
Device.on_change(_runners.clear)   # a name may now mean another device object

def get_runner(ast: UOp, device_name: str) -> CompiledRunner:
  """Compile once per (kernel, device): the AST is hash-consed, so equal kernels share a runner (eager op cache)."""
  key = (ast, device_name)
  if (r := _runners.get(key)) is None:
    dev = Device[device_name]
    with profiler.compiling(device_name, str(ast.arg)): r = _runners[key] = CompiledRunner(get_program(ast, dev.renderer), dev)
  return r

def _ensure(b: Buffer) -> Buffer:
  if not b.is_allocated(): b.allocate()
  return b

def run_copy(dest: Buffer, src: Buffer) -> None:
  if dest.nbytes == 0: return
  if (mv := src.host_view()) is not None: dest.copyin(mv)
  # a source without a host view (a file, a GPU) is read straight into host-visible destination memory: no staging copy
  elif (dv := dest.host_view()) is not None and not dv.readonly: src.copyout(dv)
  else:
    tmp = memoryview(bytearray(src.nbytes))
    src.copyout(tmp)
    dest.copyin(tmp)

def run_item(ast: UOp, bufs: list[Buffer], var_vals: dict[UOp, int] | None = None) -> None:
  for b in bufs: _ensure(b)
  if ast.op is Ops.COPY:
    st = time.perf_counter_ns()
    run_copy(bufs[0], bufs[1])
    if profiler.timing(): profiler.copy(bufs[0].device, "direct", bufs[1].device, bufs[0].nbytes, st, time.perf_counter_ns() - st)
    return
  runner = get_runner(ast, bufs[0].device)
  if bufs[0].size == 0: return
  timed = profiler.timing()
  st = time.perf_counter_ns()
  t = runner(bufs, var_vals, wait=timed)
  tallies.kernel_count += 1
  tallies.global_ops += runner.spec.estimates.get("ops", 0)
  tallies.global_mem += runner.spec.estimates.get("mem", 0)
  if timed:
    # the runtime's own measure of the kernel when it returns one, else the host's around the waited call
    dur = int(t * 1e9) if t is not None else time.perf_counter_ns() - st
    profiler.kernel(bufs[0].device, "direct", runner.spec.name, program_shape(runner.program), st, dur, runner.spec.estimates.get("ops", 0),
                    runner.spec.estimates.get("mem", 0), tallies.kernel_count)

def sizes(u: UOp) -> int: return prod(u.shape or ())

# *** HCQ: devices with command queues run whole schedules through core/hcq (lowered once per schedule shape) ***

def is_hcq(device: str) -> bool:
  return Device[device].hcq is not None

def _item_hcq(ast: UOp, bufs: tuple[UOp, ...]) -> bool:
  # a copy runs through HCQ only when both ends are HCQ devices; otherwise the direct copy does it
  return all(is_hcq(b.src[1].arg) for b in bufs) if ast.op is Ops.COPY else is_hcq(bufs[0].src[1].arg)

_submissions: LRUCache = LRUCache("submissions", 512)
Device.on_change(_submissions.clear)

def _schedule_key(items: list) -> tuple[tuple, list[UOp]]:
  """A key equal for schedules that differ only in which buffers they use (the submission is patched with those), and the buffers."""
  slots = list(dict.fromkeys(b for it in items for b in it.bufs))
  idx = {b: i for i, b in enumerate(slots)}
  return (tuple((it.ast, tuple(idx[b] for b in it.bufs)) for it in items), tuple((b.src[1].arg, b.arg, b.dtype) for b in slots)), slots

def hcq_submission(items: list, timed: bool = False) -> tuple[Any, list[UOp]]:
  """The cached (or newly lowered) Submission of an all-HCQ schedule, and the buffers to run it with. `timed`: its launches
  and copies carry timestamps (a submission of its own: the commands differ)."""
  key, slots = _schedule_key(items)
  key = key + (timed,)
  if (sub := _submissions.get(key)) is None:
    from core.hcq.pipeline import Submission
    from core.hcq.state import HCQState, compile_kernels
    from core.schedule.kernelize import ScheduleItem, placeholder
    compile_kernels([(it.ast, it.bufs[0].src[1].arg) for it in items if it.ast.op is not Ops.COPY])
    # lowered over stand-ins of the schedule's buffers: every run passes its own Buffers, and a cached submission must not
    # keep the memory of the run that built it alive (a deleted 256 MiB tensor stayed allocated that way)
    stand = {b: placeholder(b, i, "hcq slot") for i, b in enumerate(slots)}
    sub = Submission([ScheduleItem(it.ast, tuple(stand[b] for b in it.bufs)) for it in items], HCQState.default(buffer_of), timed=timed)
    _submissions[key] = sub
  return sub, slots

def run_hcq(items: list, var_vals: dict[UOp, int] | None = None) -> None:
  sub, slots = hcq_submission(items, timed := profiler.timing())
  for b in slots:
    if (buf := buffer_of(b)).is_allocated() is False: buf.allocate()
  sub.run([buffer_of(b) for b in slots], var_vals)
  if timed: report_hcq(sub, items)
  else: tallies.kernel_count += sum(1 for it in items if it.ast.op is not Ops.COPY)

def report_hcq(sub: Any, items: list) -> None:
  """DEBUG=2 lines and trace events of a timed submission's run, from its devices' timestamps: the timed launches are the
  schedule's kernels in order (their ProgramSpec gives shape and work), copies name their source."""
  from core.hcq.state import compile_kernel
  kernels = [compile_kernel(it.ast, it.bufs[0].src[1].arg) for it in items if it.ast.op is not Ops.COPY]
  progs = iter(kernels)
  for t, start, dur in sub.times():
    if t.kind == "copy":
      profiler.copy(t.device, t.queue, t.name, t.nbytes, start, dur)
      continue
    spec: ProgramSpec = (p := next(progs)).arg
    tallies.kernel_count += 1
    tallies.global_ops += spec.estimates.get("ops", 0)
    tallies.global_mem += spec.estimates.get("mem", 0)
    profiler.kernel(t.device, t.queue, spec.name, program_shape(p), start, dur, spec.estimates.get("ops", 0), spec.estimates.get("mem", 0),
                    tallies.kernel_count)

def run_items(items: list, var_vals: dict[UOp, int] | None = None) -> None:
  """Run schedule items in order: runs of consecutive HCQ items go through one HCQ submission, the rest directly."""
  i = 0
  while i < len(items):
    j = i
    while j < len(items) and _item_hcq(items[j].ast, items[j].bufs): j += 1
    if j > i:
      run_hcq(items[i:j], var_vals)
      i = j
    else:
      run_item(items[i].ast, [buffer_of(b) for b in items[i].bufs], var_vals)
      i += 1

class HCQReplay:
  """Jit replay of a captured all-HCQ schedule: the submission lowered once is patched with the changed input buffers and
  variable values and submitted again (no re-encoding). Called like DirectReplay: (inputs, var_vals)."""
  def __init__(self, items: list, input_bufs: list[UOp]):
    self.items = items
    self.sub, slots = hcq_submission(items)
    pos = {b: i for i, b in enumerate(input_bufs)}
    self.slots = [pos.get(b, -1) for b in slots]
    self.fixed = [None if b in pos else _ensure(buffer_of(b)) for b in slots]
    # (submission slot, input index) of the slots the inputs fill: between two runs of this replay only these can change
    self.input_slots = [(i, s) for i, s in enumerate(self.slots) if s >= 0]
    self.seen_runs = -1   # the submission's run count after this replay's latest run (another owner's run since: patch all)
    self.kernels = sum(1 for it in items if it.ast.op is not Ops.COPY)
    # the inputs are exactly the submission's slots, in order (the eager fast path): passed through as they are
    self.identity = self.slots == list(range(len(input_bufs)))
  def __call__(self, inputs: list[Buffer], var_vals: dict[UOp, int] | None) -> None:
    if profiler.timing():
      # reports want each command's time: the same schedule as a timed submission (lowered once, cached like this one)
      sub, _ = hcq_submission(self.items, timed=True)
      sub.run(self._bufs(inputs), var_vals)
      return report_hcq(sub, self.items)
    sub = self.sub
    # the submission ran last for this replay: its captured buffers (kept alive in `fixed`) are patched in still
    if sub.runs == self.seen_runs: sub.run_slots(self.input_slots, inputs, var_vals)
    else: sub.run(self._bufs(inputs), var_vals)
    self.seen_runs = sub.runs
    tallies.kernel_count += self.kernels
  def _bufs(self, inputs: list[Buffer]) -> list[Buffer]:
    return inputs if self.identity else [inputs[s] if s >= 0 else f for s, f in zip(self.slots, self.fixed)]  # type: ignore[misc]

def hcq_replay_for(items: list, input_bufs: list[UOp]) -> HCQReplay | None:
  """The HCQ replay of a Jit capture whose items all run on HCQ devices, else None (the direct replay runs it)."""
  return HCQReplay(items, input_bufs) if items and all(_item_hcq(it.ast, it.bufs) for it in items) else None
