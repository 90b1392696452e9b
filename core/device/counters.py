"""GlobalCounters: process-wide tallies of kernels run, work done and memory held, for DEBUG output and tests."""
from __future__ import annotations
import collections
from typing import ClassVar

class GlobalCounters:
  """Class-level counters (there is one process). `mem_used` maps device name -> bytes currently allocated."""
  kernel_count: ClassVar[int] = 0
  global_ops: ClassVar[int] = 0
  global_mem: ClassVar[int] = 0
  time_sum_s: ClassVar[float] = 0.0
  mem_used: ClassVar[collections.defaultdict[str, int]] = collections.defaultdict(int)

  @staticmethod
  def reset() -> None:
    """Zeroes the per-run tallies. mem_used is left alone: it is memory still held, not work done."""
    GlobalCounters.kernel_count, GlobalCounters.global_ops, GlobalCounters.global_mem, GlobalCounters.time_sum_s = 0, 0, 0, 0.0

  @staticmethod
  def total_mem_used() -> int: return sum(GlobalCounters.mem_used.values())
