"""The rewrite log of VIZ=1: every named graph rewrite records its input and output graphs and which rules fired, grouped by
the kernel being compiled (or "schedule" outside one); at exit core/viz serves a page over it (started from codegen, core/codegen/program.py). Recording keeps the graphs
alive, so it is for looking, not for long runs."""
from __future__ import annotations
import collections, contextlib, threading
from dataclasses import dataclass, field
from typing import Any, Iterator
from core.helpers import VIZ

@dataclass
class Step:
  """One rewrite pass: its name, the graph before and after, and {rule label: times fired}."""
  name: str
  before: Any
  after: Any
  fired: dict[str, int]

@dataclass
class Group:
  """The passes of one kernel's compile (or of the scheduler), in order."""
  name: str
  steps: list[Step] = field(default_factory=list)

_lock = threading.Lock()
groups: list[Group] = []
class _Current(threading.local):
  group: Group | None = None   # the kernel whose rewrites this thread records (kernel()); None: the schedule's
_current = _Current()

@contextlib.contextmanager
def kernel(name: str) -> Iterator[None]:
  """Groups the rewrites inside under `name` (a kernel being compiled)."""
  if not VIZ:
    yield
    return
  prev = _current.group
  g = Group(name)
  with _lock: groups.append(g)
  _current.group = g
  try: yield
  finally: _current.group = prev

def record(name: str, pm: Any, before: Any, after: Any, counts: collections.Counter) -> None:
  """Called by graph_rewrite for each pass while VIZ is on."""
  from core.ir.pattern import rule_label
  g = _current.group
  if g is None:
    with _lock:
      if not groups or groups[-1].name != "schedule": groups.append(Group("schedule"))
      g = groups[-1]
  g.steps.append(Step(name, before, after, {rule_label(pm, i): n for i, n in counts.most_common()}))

def clear() -> None:
  with _lock: groups.clear()
