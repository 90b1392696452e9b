"""Execute schedule items on devices: compile-once runners, copies, DEBUG=2 kernel lines."""
from __future__ import annotations
import time
from typing import Any
from core.ir.ops import UOp, Ops
from core.device.buffer import Buffer
from core.device.counters import GlobalCounters
from core.codegen.program import get_program, compile_program, program_binary, program_source, program_uops, ProgramSpec
from core.helpers import DEBUG, colored, prod

# the Buffer behind a BUFFER uop lives in the node's own __dict__ under this name: it dies with the node (like a
# WeakKeyDictionary entry) but costs no weak reference to set or to drop (every eager op makes one)
_BUF = "_buffer"

def buffer_of(u: UOp) -> Buffer:
  """The device Buffer behind a BUFFER uop (created, not yet allocated, on first ask)."""
  if (b := u.__dict__.get(_BUF)) is not None: return b
  if u.op is not Ops.BUFFER: raise TypeError(f"buffer_of needs a BUFFER uop, got {u.op.name}")
  b = u.__dict__[_BUF] = Buffer(u.src[1].arg, u.arg, u.dtype)
  return b

def has_buffer(u: UOp) -> bool: return _BUF in u.__dict__

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
    by_arg = {v.arg: val for v, val in (var_vals or {}).items()}
    try: vals = tuple(by_arg[v.arg] for v in self.spec.vars)
    except KeyError as e: raise RuntimeError(f"kernel {self.spec.name} needs a value for variable {e.args[0][0]!r}") from None
    return self.prg(*[b._buf for b in bufs], global_size=self.spec.global_size, local_size=self.spec.local_size, vals=vals, wait=wait)

_runners: dict[tuple[UOp, str], CompiledRunner] = {}

def get_runner(ast: UOp, device_name: str) -> CompiledRunner:
  """Compile once per (kernel, device): the AST is hash-consed, so equal kernels share a runner (eager op cache)."""
  key = (ast, device_name)
  if (r := _runners.get(key)) is None:
    from core.device.registry import Device
    dev = Device[device_name]
    r = _runners[key] = CompiledRunner(get_program(ast, dev.renderer), dev)
  return r

def _ensure(b: Buffer) -> Buffer:
  if not b.is_allocated(): b.allocate()
  return b

def run_copy(dest: Buffer, src: Buffer) -> None:
  if dest.nbytes == 0: return
  if (mv := src.host_view()) is not None: dest.copyin(mv)
  else:
    tmp = memoryview(bytearray(src.nbytes))
    src.copyout(tmp)
    dest.copyin(tmp)

def run_item(ast: UOp, bufs: list[Buffer], var_vals: dict[UOp, int] | None = None) -> None:
  for b in bufs: _ensure(b)
  if ast.op is Ops.COPY:
    run_copy(bufs[0], bufs[1])
    if DEBUG >= 2: print(f"*** {bufs[0].device:8s} copy {bufs[0].nbytes:10d} bytes {bufs[1].device} -> {bufs[0].device}")
    return
  runner = get_runner(ast, bufs[0].device)
  if bufs[0].size == 0: return
  t = runner(bufs, var_vals, wait=DEBUG >= 2)
  GlobalCounters.kernel_count += 1
  GlobalCounters.global_ops += runner.spec.estimates.get("ops", 0)
  GlobalCounters.global_mem += runner.spec.estimates.get("mem", 0)
  if t is not None: GlobalCounters.time_sum_s += t
  if DEBUG >= 2:
    shape = [u.src[0].arg for u in program_uops(runner.program) if u.op in (Ops.RANGE, Ops.SPECIAL) and u.src[0].op is Ops.CONST]
    tm = t or 0.0
    gflops = runner.spec.estimates.get("ops", 0) / tm * 1e-9 if tm else 0.0
    gbs = runner.spec.estimates.get("mem", 0) / tm * 1e-9 if tm else 0.0
    print(f"*** {bufs[0].device:8s} {GlobalCounters.kernel_count:5d} {colored(runner.spec.name, 'cyan'):30s} "
          f"shape {str(shape):20s} tm {tm*1e6:9.2f}us ({gflops:8.2f} GFLOP/s {gbs:7.2f} GB/s)")

def sizes(u: UOp) -> int: return prod(u.shape or ())

# *** HCQ: devices with command queues run whole schedules through core/hcq (lowered once per schedule shape) ***

def is_hcq(device: str) -> bool:
  from core.device.registry import Device
  return Device[device].hcq is not None

def _item_hcq(ast: UOp, bufs: tuple[UOp, ...]) -> bool:
  # a copy runs through HCQ only when both ends are HCQ devices; otherwise the direct copy does it
  return all(is_hcq(b.src[1].arg) for b in bufs) if ast.op is Ops.COPY else is_hcq(bufs[0].src[1].arg)

class _SubmissionCache(dict):
  """The cached submissions; `gen` counts removals, so a holder of one (an eager plan) checks it is still current cheaply."""
  gen = 0
  def clear(self) -> None:
    self.gen += 1
    super().clear()
  def pop(self, *args: Any) -> Any:
    self.gen += 1
    return super().pop(*args)
  def popitem(self) -> Any:
    self.gen += 1
    return super().popitem()
  def __delitem__(self, key: Any) -> None:
    self.gen += 1
    super().__delitem__(key)

_submissions: _SubmissionCache = _SubmissionCache()
SUBMISSION_CACHE_SIZE = 512

def _schedule_key(items: list) -> tuple[tuple, list[UOp]]:
  """A key equal for schedules that differ only in which buffers they use (the submission is patched with those), and the buffers."""
  slots = list(dict.fromkeys(b for it in items for b in it.bufs))
  idx = {b: i for i, b in enumerate(slots)}
  return (tuple((it.ast, tuple(idx[b] for b in it.bufs)) for it in items), tuple((b.src[1].arg, b.arg, b.dtype) for b in slots)), slots

def hcq_submission(items: list) -> tuple[Any, list[UOp]]:
  """The cached (or newly lowered) Submission of an all-HCQ schedule, and the buffers to run it with."""
  key, slots = _schedule_key(items)
  if (sub := _submissions.get(key)) is None:
    from core.hcq.pipeline import Submission
    from core.hcq.state import HCQState
    sub = Submission(items, HCQState.default(buffer_of))
    if len(_submissions) >= SUBMISSION_CACHE_SIZE: _submissions.pop(next(iter(_submissions)))
    _submissions[key] = sub
  return sub, slots

def run_hcq(items: list, var_vals: dict[UOp, int] | None = None) -> None:
  sub, slots = hcq_submission(items)
  for b in slots:
    if (buf := buffer_of(b)).is_allocated() is False: buf.allocate()
  sub.run([buffer_of(b) for b in slots], var_vals)
  GlobalCounters.kernel_count += sum(1 for it in items if it.ast.op is not Ops.COPY)
  if DEBUG >= 2:
    for it in items: print(f"*** {it.bufs[0].src[1].arg:8s} hcq {'copy' if it.ast.op is Ops.COPY else it.ast.arg}")

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
    self.sub, slots = hcq_submission(items)
    self.gen = _submissions.gen
    pos = {b: i for i, b in enumerate(input_bufs)}
    self.slots = [pos.get(b, -1) for b in slots]
    self.fixed = [None if b in pos else _ensure(buffer_of(b)) for b in slots]
    self.kernels = sum(1 for it in items if it.ast.op is not Ops.COPY)
    # the inputs are exactly the submission's slots, in order (the eager fast path): passed through as they are
    self.identity = self.slots == list(range(len(input_bufs)))
  def valid(self) -> bool:
    """Its submission is still the cached one (tests drop the cache when they swap devices)."""
    return _submissions.gen == self.gen
  def __call__(self, inputs: list[Buffer], var_vals: dict[UOp, int] | None) -> None:
    self.sub.run(inputs if self.identity else [inputs[s] if s >= 0 else f for s, f in zip(self.slots, self.fixed)], var_vals)
    GlobalCounters.kernel_count += self.kernels

def hcq_replay_for(items: list, input_bufs: list[UOp]) -> HCQReplay | None:
  """The HCQ replay of a Jit capture whose items all run on HCQ devices, else None (the direct replay runs it)."""
  return HCQReplay(items, input_bufs) if items and all(_item_hcq(it.ast, it.bufs) for it in items) else None
