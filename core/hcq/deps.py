"""Stage 3, dependencies: per-queue timeline signals, WAITs on the producing queue, barriers, and the timeline finalizer."""
from __future__ import annotations
from core.ir.ops import UOp, Ops
from core.ir.pattern import PatternMatcher, UPat, graph_rewrite
from core.hcq.queue_ir import is_submit, submit_device, submit_queue, queue_buffer, timeline_value, wait, signal, barrier, submit, advance
from core.hcq.state import HCQState

QKey = tuple[str, str]   # (device, queue)

def add_dependencies(linear: UOp, ctx: HCQState) -> UOp:
  """Submits in order; each reads/writes the buffers in its GROUP sources. A submit that touches a buffer another queue
  wrote (or writes one another queue read) waits on that queue's timeline signal at the value stored after the producer.
  Values are `timeline(queue) + k`; every queue signals at the end of its last submit so the host can wait, and the
  finalizer (a STORE to the queue's host timeline value) advances the host copy by the number of signals."""
  subs = [i for i, u in enumerate(linear.src) if is_submit(u)]
  key = {i: (submit_device(linear.src[i]), submit_queue(linear.src[i])) for i in subs}
  last_write: dict[UOp, int] = {}
  reads: dict[UOp, dict[QKey, int]] = {}
  waits: dict[int, dict[QKey, int]] = {i: {} for i in subs}      # submit -> {producer queue: latest producer submit}
  needs_barrier: dict[int, bool] = {}
  touched: dict[QKey, set[UOp]] = {}
  for i in subs:
    s, qk = linear.src[i], key[i]
    writes, rds = s.src[2].src, s.src[3].src
    deps = [last_write[b] for b in writes + rds if b in last_write] + [j for b in writes for j in reads.get(b, {}).values()]
    for j in deps:
      if key[j] != qk: waits[i][key[j]] = max(waits[i].get(key[j], -1), j)
    needs_barrier[i] = any(b in touched.get(qk, set()) for b in writes + rds)
    touched.setdefault(qk, set()).update(writes + rds)
    for b in rds: reads.setdefault(b, {})[qk] = i
    for b in writes: last_write[b], reads[b] = i, {}
  # which submits signal: those waited on, and the last one of every queue
  signals = {j for w in waits.values() for j in w.values()} | {max(i for i in subs if key[i] == q) for q in set(key.values())}
  value: dict[int, UOp] = {}
  count: dict[QKey, int] = {}
  for i in subs:
    if i in signals:
      count[key[i]] = count.get(key[i], 0) + 1
      value[i] = timeline_value(key[i][1], key[i][0], count[key[i]])
  first: dict[QKey, int] = {}
  out: list[UOp] = []
  for i, u in enumerate(linear.src):
    if i not in key:
      out.append(u)
      continue
    (dev, q), cmds = key[i], list(u.src[0].src)
    pre: list[UOp] = []
    if key[i] not in first:
      # per-device epoch: the first submit of a queue in this schedule starts after earlier schedules' work on the device's other queues
      first[key[i]] = i
      pre += [wait(queue_buffer("timeline_signal", oq, dev), timeline_value(oq, dev, 0)) for oq in ctx.hcq_of(dev).queues if oq != q]
    pre += [wait(queue_buffer("timeline_signal", pq, pdev), value[j]) for (pdev, pq), j in sorted(waits[i].items())]
    if needs_barrier[i]: pre.append(barrier())
    post = [signal(queue_buffer("timeline_signal", q, dev), value[i])] if i in value else []
    out.append(submit(pre + cmds + post, dev, q))
  for (dev, q), n in sorted(count.items()):
    out.append(advance(q, dev, timeline_value(q, dev, n)))
  return linear.replace(src=tuple(out))

def _unresolved(x: UOp) -> bool: return any(is_submit(u) and len(u.src) > 2 for u in x.src)

pm_dependencies = PatternMatcher([
  (UPat(Ops.LINEAR, name="x", custom=_unresolved), lambda ctx, x: add_dependencies(x, ctx)),
], name="dependencies")

def dependencies(linear: UOp, ctx: HCQState) -> UOp: return graph_rewrite(linear, pm_dependencies, ctx, bottom_up=True, name="dependencies")
