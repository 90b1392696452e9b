"""Run the nine HCQ stages over a schedule, cache the lowered submission, and run it: patch inputs, submit, wait."""
from __future__ import annotations
import ctypes, struct, sys, time
from typing import Any, Callable
from core.ir.ops import UOp, Ops
from core.hcq import HCQError
from core.hcq.queue_ir import device_of, command_kind
from core.hcq.state import HCQState
from core.device.hcq import HCQDevice, handle_addr
from core.device.compiled import BindableProgram
from core.device.registry import Device
from core.hcq.prep import schedule_linear, prep_runtime
from core.hcq.lower import lower_to_queues
from core.hcq.deps import dependencies
from core.hcq.merge import merge_submits
from core.hcq.encode import encode
from core.hcq.pack import pack
from core.hcq.bufferize import bufferize
from core.hcq.patches import resolve_patches
from core.hcq.callify import SubmitProgram, callify, host_timeline
from core.helpers import HCQ_TIMEOUT, SPEC

def add_timestamps(linear: UOp, ctx: HCQState) -> UOp:
  # imported here: only timed submissions (DEBUG>=2, PROFILE) run this stage, and a start that times nothing skips its module
  from core.hcq.timestamps import add_timestamps as add
  return add(linear, ctx)

def _verify(linear: UOp) -> None:
  from core.ir.spec import type_verify, queue_spec   # SPEC only: the spec's matchers are not part of a plain start
  type_verify(linear, queue_spec)

STAGES: list[tuple[str, Callable[[UOp, HCQState], UOp]]] = [
  ("prep runtime", prep_runtime), ("lower to queues", lower_to_queues), ("timestamps", add_timestamps), ("dependencies", dependencies),
  ("merge", lambda x, ctx: merge_submits(x)), ("encode", encode), ("pack", pack), ("bufferize", bufferize),
  ("resolve patches", resolve_patches),
]

def _slots(items: list) -> list[UOp]:
  """The schedule's buffers in order of first use: what a cached submission is patched with on each run."""
  return list(dict.fromkeys(b for it in items for b in it.bufs))

class Submission:
  """A lowered schedule: the pipeline's own buffers, the host patches that depend on the schedule's buffers or variables,
  and the compiled submit program. `run(bufs, var_vals)` patches what changed since the last run and submits."""
  def __init__(self, items: list, ctx: HCQState, timed: bool = False):
    self.ctx, self.slots = ctx, _slots(items)
    linear = schedule_linear(items)
    self.stage_graphs: dict[str, UOp] = {}
    for name, stage in STAGES:
      if name == "timestamps" and not timed: continue   # only profiled submissions time their commands
      linear = stage(linear, ctx)
      if SPEC: _verify(linear)
      self.stage_graphs[name] = linear
    self.commands = dict(ctx.commands)   # encoded submit -> [(kind, offset)], for errors
    self.submits = [u for u in linear.src if u.op is Ops.CUSTOM_FUNCTION]
    self.final, self.prg, self.args = callify(linear, ctx)
    # the submit program's arguments never change: a runtime that can bind them once skips the per-call conversion
    self._launch = self.prg.bind(*self.args) if isinstance(self.prg, BindableProgram) else (lambda: self.prg(*self.args))
    self.keep = [ctx.buffer_of(b) for b in ctx.internal]   # the pipeline's buffers live as long as the submission
    slot_index = {b: i for i, b in enumerate(self.slots)}
    # per-run host patches: (slot index, target Buffer, byte offset, width, addend, shift, reading device) and (variable, target,
    # offset, width); an address patch writes ((address + addend) >> shift) truncated to its width (shift: the high dword of an
    # address a command takes as two 32-bit fields, upper first)
    self.addr_patches: list[tuple[int, Any, int, int, int, int, str]] = []
    self.var_patches: list[tuple[Any, Any, int, int]] = []
    for p in self.final.src:
      if p.op is not Ops.HOST_PATCH: continue
      target, v, width = ctx.buffer_of(p.src[0]), p.src[1], p.src[1].dtype.itemsize
      addend, shift = 0, 0
      while v.op is Ops.CAST: v = v.src[0]
      if v.op is Ops.SHR and v.src[1].op is Ops.CONST: v, shift = v.src[0], v.src[1].arg
      while v.op is Ops.CAST: v = v.src[0]
      if v.op is Ops.ADD and v.src[1].op is Ops.CONST: v, addend = v.src[0], v.src[1].arg
      while v.op is Ops.CAST: v = v.src[0]
      if v.op is Ops.GETADDR and v.src[0] in slot_index:
        self.addr_patches.append((slot_index[v.src[0]], target, p.arg, width, addend, shift, v.src[1].arg))
      elif v.op is Ops.DEFINE_VAR and not (addend or shift): self.var_patches.append((v.arg, target, p.arg, width))
      else: raise RuntimeError(f"HCQ: can't patch {v.op.name} per run (a host patch must be (GETADDR(buffer)+c) >> k or a variable)")
    # the per-run patches as (slot, host view of the target or None, target, offset, struct format, mask, addend, shift, width, the
    # reading device's addr() when it has its own view of addresses, else None: the handle's address): a view written with
    # pack_into costs a fraction of write_value's lookups (the targets live as long as the submission)
    self._fast_patches = [(i, _host_view(t), t, off, "<Q" if w == 8 else "<I", (1 << 8 * w) - 1, add, sh, w, _own_addr(ctx.hcq_of(d)))
                          for i, t, off, w, add, sh, d in self.addr_patches]
    # the same patches by slot: a run looks only at the slots whose address changed (a Jit's replay: usually none or its inputs)
    self._slot_patches: list[list[tuple]] = [[] for _ in self.slots]
    for fp in self._fast_patches: self._slot_patches[fp[0]].append(fp)
    # per slot, when each of its patches stores the plain 64-bit address into a host view: one-item 'Q' views that run_slots
    # writes the address into by item assignment (an eager op's result alternates between two pooled buffers, so its slot is
    # patched every run: _patch_slot's frame and pack_into were 3.2k of x + 1's 70k instructions); else None
    self._slot_words = [_address_words(ps) for ps in self._slot_patches]
    self.last_addrs: list[int | None] = [None] * len(self.slots)
    self.last_vars: dict[Any, int] = {}
    self.runs = 0   # submits so far: an owner that saw its own run last knows which slots still hold its buffers (run_slots)
    # the variable patches the same way: (variable arg, host view of the target or None, target, offset, format, mask, width);
    # an eager op with a new scalar patches one each run (core/engine/realize.py)
    self._fast_vars = [(arg, _host_view(t), t, off, "<Q" if w == 8 else "<I", (1 << 8 * w) - 1, w) for arg, t, off, w in self.var_patches]
    # the queues this submission signals, and the real signal buffer of every queue it touches (for waits and errors)
    self.queues = sorted({(device_of(u.src[0]), u.src[0].tag[1]) for u in self.stage_graphs["dependencies"].src
                          if u.op is Ops.ADVANCE})
    self.signal_bufs = {(device_of(ph), ph.tag[1]): ctx.buffer_of(r) for ph, r in ctx.bufmap.items() if ph.tag[0] == "timeline_signal"}
    self._timelines = [(key, host_timeline(*key)) for key in self.signal_bufs]
    self._waits = [(dev, q, self.signal_bufs[(dev, q)], host_timeline(dev, q)) for dev, q in self.queues]
    # _waits with each device's wait_signal looked up (Device[...] and its hcq: ~0.2 us a wait), again after a device change
    self._waiters: list[tuple[Callable[..., None], Any, Any, str, str]] = []
    self._waiters_epoch = -1
    self._submit_wait: Callable[[float], int] | None = None   # the device's submit and wait in one step (_load_waiters)

  def run(self, bufs: list[Any], var_vals: dict[Any, int] | None = None, wait: bool = True) -> None:
    # the buffers' handle addresses (allocated now if they are not yet), inlined: it runs for every buffer of every eager op
    addrs: list[int | None] = []
    for b in bufs:
      try: h = b._buf
      except AttributeError: h = b.allocate()._buf
      addrs.append(_addressof(h) if isinstance(h, _CArray) else handle_addr(b))
    if addrs != (last := self.last_addrs):
      for i, a in enumerate(addrs):
        # a slot whose memory changed: its patches get its address as the reading device sees it
        if a is not None and a != last[i]: self._patch_slot(i, bufs[i], a)
      self.last_addrs = addrs
    if self._fast_vars: self._patch_vars(var_vals)
    self.resubmit(wait)

  def run_slots(self, changed: list[tuple[int, int]], inputs: list[Any], var_vals: dict[Any, int] | None = None, wait: bool = True) -> None:
    """run() where only the slots in `changed` ((slot index, index into `inputs`) pairs) may hold other buffers than in the
    previous run of this submission; the caller knows the rest did not change (a Jit replay that ran it last: only its inputs
    are new)."""
    last = self.last_addrs
    for i, s in changed:
      b = inputs[s]
      try: a = _addressof(b._buf)
      except (AttributeError, TypeError): a = handle_addr(b)   # not allocated yet, or a handle that is not a ctypes object
      if a is not None and a != last[i]:   # as in run(): a slot with no address keeps what it had
        if (words := self._slot_words[i]) is not None:
          for w in words: w[0] = a
        else: self._patch_slot(i, b, a)
        last[i] = a
    if self._fast_vars: self._patch_vars(var_vals)
    self.resubmit(wait)

  def _patch_slot(self, i: int, buf: Any, a: int) -> None:
    """Writes slot i's new address `a` (its Buffer `buf`) into every patch that reads it, as the reading device sees it."""
    for _, view, target, off, fmt, mask, addend, shift, width, own_addr in self._slot_patches[i]:
      v = a if own_addr is None else own_addr(buf)
      if view is not None: _pack_into(fmt, view, off, ((v + addend) >> shift) & mask)
      else:
        from core.hcq.patches import write_value
        write_value(target, off, (v + addend) >> shift, width)

  def _patch_vars(self, var_vals: dict[Any, int] | None) -> None:
    by_arg = {v.arg: val for v, val in (var_vals or {}).items()}
    # compared with the previous run's values, not updated in the loop: one variable may have a patch in several kernels
    last_v, now = self.last_vars, {}
    for arg, view, target, off, fmt, mask, width in self._fast_vars:
      if (val := by_arg.get(arg)) is None: raise RuntimeError(f"HCQ: the schedule needs a value for variable {arg[0]!r}")
      if last_v.get(arg) != val:
        if view is not None: _pack_into(fmt, view, off, val & mask)
        else:
          from core.hcq.patches import write_value
          write_value(target, off, val, width)
      now[arg] = val
    self.last_vars = now

  def resubmit(self, wait: bool = True) -> None:
    """Submits again with the buffers and variable values of the last run, no patch looked at: for the one owner of a
    submission whose buffers never change (a compiled file's replay), after its first run()."""
    for key, tl in self._timelines: _start[key] = tl[0]
    self.runs += 1
    if wait:
      if self._waiters_epoch != _device_epoch[0]: self._load_waiters()
      # the device submits and takes its wait's fast path in one step: done (0), or its general wait goes on (1)
      if self._submit_wait is not None and (r := self._submit_wait(float(HCQ_TIMEOUT.value))) != 2:
        if r: self.wait()
        return
    self._launch()
    if wait: self.wait()
    else:   # nobody waits to run it now: each device hears that its doorbells rang
      for dev in dict.fromkeys(d for d, *_ in self._waits): self.ctx.hcq_of(dev).submitted_without_wait()

  def times(self) -> list[tuple[Any, int, int]]:
    """(timestamps.Timed, start ns, duration ns) of each launch and copy of the latest run ([] unless built with timed=True)."""
    if not self.ctx.timed: return []
    from core.hcq.timestamps import read_times
    return read_times(self.ctx.timed, self.ctx)

  def wait(self, timeout_s: float | None = None) -> None:
    """Block until every queue of this submission reached its final timeline value (HCQ_TIMEOUT seconds at most)."""
    timeout = float(HCQ_TIMEOUT.value if timeout_s is None else timeout_s)
    if self._waiters_epoch != _device_epoch[0]: self._load_waiters()
    for wait_signal, sig, tl, dev, q in self._waiters:
      expected = tl[0]
      try: wait_signal(sig, expected, timeout)
      except (HCQError, TimeoutError) as e: raise self._failure(dev, q, expected, e) from e

  def _load_waiters(self) -> None:
    """_waits with each device's wait_signal looked up; with one queue to wait for, its device's submit-and-wait step (when it
    has one) over this submission's program."""
    hcq_of = self.ctx.hcq_of
    self._waiters = [(hcq_of(dev).wait_signal, sig, tl, dev, q) for dev, q, sig, tl in self._waits]
    self._submit_wait = None
    if len(self._waits) == 1 and isinstance(self.prg, SubmitProgram):
      dev, _, sig, tl = self._waits[0]
      self._submit_wait = hcq_of(dev).bind_submit_wait(self.prg.untyped, self.args, sig, tl)
    self._waiters_epoch = _device_epoch[0]

  def _failure(self, dev: str, q: str, expected: int, cause: BaseException) -> HCQError:
    """An HCQError naming the queue, the command it is stuck at or failed in, and the signal value seen versus expected."""
    hcq = self.ctx.hcq_of(dev)
    seen = read_signal(self.signal_bufs[(dev, q)])
    report = hcq.error()
    if report is None and isinstance(cause, HCQError) and "timed out" not in str(cause) and "fault" in str(cause): report = str(cause)
    where = None
    # the submits of this queue, before encoding (abstract commands), in order
    subs = [u for u in self.stage_graphs["merge"].src if u.op is Ops.CUSTOM_FUNCTION and u.src[1].arg == dev and u.arg[1] == q]
    for n, s in enumerate(subs):
      for i, c in enumerate(s.src[0].src):
        if c.op is Ops.WAIT:
          key = (device_of(c.src[0]), c.src[0].tag[1])
          need, have = _eval_timeline(c.src[1]), read_signal(self.signal_bufs[key])
          if have < need:
            where = f"command {i} (wait on {key[0]} {key[1]} signal >= {need}, seen {have}) of submit {n}"
            break
        if c.op is Ops.SIGNAL and _eval_timeline(c.src[1]) > seen:
          # the first signal not reached: the failing command is in this submit, before it
          where = f"submit {n} (commands: {', '.join(command_kind(x) for x in s.src[0].src)}), before command {i} (signal {_eval_timeline(c.src[1])})"
          break
      if where is not None: break
    if where is None and subs:
      where = f"submit {len(subs) - 1} (commands: {', '.join(command_kind(x) for x in subs[-1].src[0].src)})"
    kind = "fault" if report else "timeout"
    msg = (f"HCQ {kind} on {dev} queue {q}: {where or 'unknown command'}; its timeline signal is {seen}, expected {expected}"
           + (f"; the device reports: {report}" if report else f" after {HCQ_TIMEOUT.value} s (HCQ_TIMEOUT)") + f" ({cause})")
    self.recover()
    return HCQError(msg, dev, q, where, seen, expected)

  def recover(self) -> None:
    """After a failure, make the timelines consistent so later schedules don't wait on values never written: every signal
    behind its host value is set to it (this also releases WAITs that could never complete), then the queues get a moment
    to drain."""
    for (d, q), sig in self.signal_bufs.items():
      if read_signal(sig) < (v := host_timeline(d, q)[0]): sig.copyin(struct.pack("<Q", v))
    time.sleep(0.01)

_addressof, _CArray, _pack_into = ctypes.addressof, ctypes.Array, struct.pack_into

# counts device changes (Device.on_change: a name may now mean another device object): a submission looks its HCQ objects up again
_device_epoch = [0]
def _device_changed() -> None: _device_epoch[0] += 1
Device.on_change(_device_changed)

def _own_addr(hcq: HCQDevice) -> Callable[[Any], int] | None:
  """The device's addr() when it overrides HCQDevice.addr (its addresses differ from the allocator handles'), else None."""
  return hcq.addr if type(hcq).addr is not HCQDevice.addr else None

def _host_view(buf: Any) -> memoryview | None:
  """A writable byte view of an allocated Buffer's memory when its allocator maps it (None: write through copyin)."""
  mv = buf.host_view()
  return mv if mv is not None and not mv.readonly else None

def _address_words(patches: list[tuple]) -> list[memoryview] | None:
  """For one slot's fast patches: a native unsigned 64-bit view of each target's 8 bytes when every patch writes the address
  itself ('<Q', no addend, shift or own addr()) into a host view and the host is little-endian (native 'Q' is '<Q'), else None
  (_patch_slot writes them). An address is below 2**64, so the mask changes nothing."""
  if sys.byteorder != "little" or not patches: return None
  words = []
  for _, view, _, off, fmt, _, addend, shift, _, own_addr in patches:
    if view is None or fmt != "<Q" or addend or shift or own_addr is not None or view.ndim != 1 or view.format not in ("B", "b", "c"):
      return None
    words.append(view[off:off + 8].cast("Q"))
  return words

def _eval_timeline(v: UOp) -> int:
  from core.ir.ops import exec_uop_tree
  tvs = {u: _start[(u.arg[2], u.arg[1])] if (u.arg[2], u.arg[1]) in _start else host_timeline(u.arg[2], u.arg[1])[0]
         for u in v.toposort() if u.op is Ops.DEFINE_VAR}
  return int(exec_uop_tree(v, tvs))

# timeline values at the start of the latest run (what the symbolic `timeline` values meant in it)
_start: dict[tuple[str, str], int] = {}

def read_signal(buf: Any) -> int:
  mv = memoryview(bytearray(8))
  buf.copyout(mv)
  return struct.unpack("<Q", mv)[0]
