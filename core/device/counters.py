"""GlobalCounters: process-wide tallies of kernels run, work done and memory held, for DEBUG output and tests."""
from __future__ import annotations
import collections
from typing import Any, ClassVar

class _Tallies:
  """The per-run tallies, held by one instance (`tallies`): storing to a class attribute marks the class modified, which drops
  every cached lookup on it (1.1k instructions an eager op's kernel count, 0.3k on an instance's slot). Hot paths add to
  `tallies` directly; GlobalCounters.<name> reads and writes the same values."""
  __slots__ = ("kernel_count", "global_ops", "global_mem", "time_sum_s")
  def __init__(self) -> None: self.kernel_count, self.global_ops, self.global_mem, self.time_sum_s = 0, 0, 0, 0.0

tallies = _Tallies()

def _tally(name: str) -> Any:
  slot = _Tallies.__dict__[name]   # the slot's descriptor: get and set on `tallies` without a name lookup
  return property(lambda cls: slot.__get__(tallies), lambda cls, v: slot.__set__(tallies, v))

class _CountersType(type):
  # data descriptors of the metaclass: GlobalCounters.kernel_count (read, +=, =) goes to `tallies`, never to the class's dict
  kernel_count, global_ops, global_mem, time_sum_s = _tally("kernel_count"), _tally("global_ops"), _tally("global_mem"), _tally("time_sum_s")

class GlobalCounters(metaclass=_CountersType):
  """Class-level counters (there is one process). `mem_used` maps device name -> bytes currently allocated. kernel_count,
  global_ops, global_mem and time_sum_s live in `tallies` (see _Tallies)."""
  kernel_count: ClassVar[int]
  global_ops: ClassVar[int]
  global_mem: ClassVar[int]
  time_sum_s: ClassVar[float]
  mem_used: ClassVar[collections.defaultdict[str, int]] = collections.defaultdict(int)

  @staticmethod
  def reset() -> None:
    """Zeroes the per-run tallies. mem_used is left alone: it is memory still held, not work done."""
    tallies.kernel_count, tallies.global_ops, tallies.global_mem, tallies.time_sum_s = 0, 0, 0, 0.0

  @staticmethod
  def total_mem_used() -> int: return sum(GlobalCounters.mem_used.values())
