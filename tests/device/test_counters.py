"""GlobalCounters: the per-run tallies read and written as class attributes, kept in one instance (core.device.counters.tallies)
so that adding to them, on every kernel run, does not modify the class."""
import numpy as np
from core import Device, Tensor
from core.device.counters import GlobalCounters

def test_class_attributes_and_tallies_are_the_same_counters():
  from core.device.counters import tallies
  GlobalCounters.reset()
  assert (GlobalCounters.kernel_count, GlobalCounters.global_ops, GlobalCounters.global_mem, GlobalCounters.time_sum_s) == (0, 0, 0, 0.0)
  GlobalCounters.kernel_count += 3
  tallies.kernel_count += 2
  GlobalCounters.time_sum_s = 1.5
  assert GlobalCounters.kernel_count == tallies.kernel_count == 5 and tallies.time_sum_s == 1.5
  GlobalCounters.reset()
  assert tallies.kernel_count == 0 and GlobalCounters.time_sum_s == 0.0

def test_counting_kernels_leaves_the_class_unmodified():
  # a store to a class attribute would put the value in the class's dict (and drop every cached lookup on the class)
  a = Tensor(np.arange(64, dtype=np.float32), device=Device.DEFAULT).realize()
  GlobalCounters.reset()
  for _ in range(3): (a + 1).realize()
  assert GlobalCounters.kernel_count == 3
  assert not {"kernel_count", "global_ops", "global_mem", "time_sum_s"} & set(vars(GlobalCounters))
