"""The schedule cache: graphs that differ only in which buffers they read share one planned schedule and one eager plan.

One object holds both, keyed by the graph's structure (core/engine/realize.py: _walk). It is bounded (LRU) and dropped whole
when a device name may come to mean another device (Device.reset, Device.installed): its entries' plans hold replays bound
to device objects, so nothing checks their validity per call."""
from __future__ import annotations
from typing import Any
from core.ir.ops import UOp
from core.helpers import LRUCache

class CachedSchedule:
  """A schedule planned over placeholders of its input buffers and over variables for its float literals (`lit_vars`).
  `plan`: its eager plan (realize.EagerPlan), built on the second use; None until then, False when the schedule cannot take
  the eager path (it mixes HCQ and direct items)."""
  __slots__ = ("items", "results", "var_vals", "inputs", "lit_vars", "plan")
  def __init__(self, items: list[Any], results: list[UOp], var_vals: dict[UOp, int], inputs: list[UOp], lit_vars: list[UOp] | None = None):
    # lit_vars: the int32 variables standing for the graph's float literals, in walk order (each call binds its own values)
    self.items, self.results, self.var_vals, self.inputs, self.lit_vars = items, results, var_vals, inputs, lit_vars or []
    self.plan: Any = None

class ScheduleCache:
  """Structural key -> CachedSchedule, least recently used dropped first (CORE_CACHE_SCHEDULES bounds it)."""
  def __init__(self, max_entries: int = 2048): self._lru = LRUCache("schedules", max_entries)
  def get(self, key: tuple) -> CachedSchedule | None: return self._lru.get(key)
  def put(self, key: tuple, entry: CachedSchedule) -> CachedSchedule:
    self._lru[key] = entry
    return entry
  def clear(self) -> None: self._lru.clear()
  def __len__(self) -> int: return len(self._lru)
