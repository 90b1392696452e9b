"""Stage 2b, timestamps (only when times are wanted: DEBUG>=2 or PROFILE, core.device.profiler.timing()): a TIMESTAMP
before and after every launch and copy, into one "timestamps" placeholder per device (two slots per command, start then
end; a slot is the device's HCQDevice.timestamp_size bytes, the time in its last 8). The plugin lowers TIMESTAMP like any command and maps the placeholder in pm_bufferize; after a run the Submission
reads the values back (`read_times`) and the device converts its ticks (HCQDevice.timestamp_ns)."""
from __future__ import annotations
from dataclasses import dataclass
from typing import Any
from core.ir.dtype import dtypes
from core.ir.ops import UOp, Ops
from core.hcq.queue_ir import is_submit, submit_device, submit_queue, placeholder, timestamp, device_of, TIMESTAMPS_KIND
from core.hcq.state import HCQState

KIND = TIMESTAMPS_KIND

@dataclass(frozen=True)
class Timed:
  """A timed command: its device and queue, "kernel" (`name`: the program) or "copy" (`name`: the source device, `nbytes`),
  and its pair in the device's timestamps placeholder (`ph`, slot k: timestamp 2k is the start, 2k+1 the end, each `size` bytes)."""
  device: str
  queue: str
  kind: str
  name: str
  nbytes: int
  ph: UOp
  slot: int
  size: int = 8

def _view(ph: UOp, i: int, size: int) -> UOp: return UOp(Ops.BUFFER_VIEW, dtypes.uint64, (ph,), (size, size * i))

def add_timestamps(linear: UOp, ctx: HCQState) -> UOp:
  timed = [(submit_device(u), c) for u in linear.src if is_submit(u) for c in u.src[0].src if c.op in (Ops.LAUNCH, Ops.COPY)]
  counts: dict[str, int] = {}
  for dev, _ in timed: counts[dev] = counts.get(dev, 0) + 1
  size = {dev: ctx.hcq_of(dev).timestamp_size for dev in counts}
  phs = {dev: placeholder(KIND, dev, 2 * n * size[dev] // 8, dtypes.uint64) for dev, n in counts.items()}
  used: dict[str, int] = {}
  out: list[UOp] = []
  for u in linear.src:
    if not is_submit(u):
      out.append(u)
      continue
    dev, cmds = submit_device(u), []
    for c in u.src[0].src:
      if c.op not in (Ops.LAUNCH, Ops.COPY):
        cmds.append(c)
        continue
      k = used[dev] = used.get(dev, -1) + 1
      cmds += [timestamp(_view(phs[dev], 2 * k, size[dev])), c, timestamp(_view(phs[dev], 2 * k + 1, size[dev]))]
      if c.op is Ops.LAUNCH: ctx.timed.append(Timed(dev, submit_queue(u), "kernel", c.src[0].arg.name, 0, phs[dev], k, size[dev]))
      else: ctx.timed.append(Timed(dev, submit_queue(u), "copy", device_of(c.src[1]), c.arg, phs[dev], k, size[dev]))
    out.append(u.replace(src=(u.src[0].replace(src=tuple(cmds)),) + u.src[1:]))
  return linear.replace(src=tuple(out))

def read_times(timed: list[Timed], ctx: HCQState) -> list[tuple[Timed, int, int]]:
  """(command, start ns, duration ns) of every timed command of the latest run, read from the devices' timestamp buffers."""
  import numpy as np
  vals: dict[UOp, Any] = {}
  for t in timed:
    if t.ph not in vals:
      buf = ctx.buffer_of(ctx.bufmap[t.ph])
      raw = bytearray(buf.nbytes)
      buf.copyout(memoryview(raw))
      vals[t.ph] = np.frombuffer(raw, dtype=np.uint64)
  out = []
  for t in timed:
    hcq = ctx.hcq_of(t.device)
    w = t.size // 8   # uint64s per timestamp: the time is the last
    start, end = hcq.timestamp_ns(int(vals[t.ph][w * (2 * t.slot + 1) - 1])), hcq.timestamp_ns(int(vals[t.ph][w * (2 * t.slot + 2) - 1]))
    out.append((t, start, max(end - start, 0)))
  return out
