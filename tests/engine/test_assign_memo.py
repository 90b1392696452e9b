"""Assigns and the realize memo: a node kept alive by some tensor (hash-consing makes a graph built again the same node) must
not carry a value or a 'done' mark across an assign. Both were silent wrong answers on one thread, and frequent ones with
several threads (another thread's snapshot of the live tensors keeps nodes alive: tests/stress/test_thread_safety.py)."""
import numpy as np
from core import Tensor
import core.engine.realize as R

def test_a_graph_built_again_after_an_assign_reads_the_new_value():
  w = Tensor(np.array([1., 2.], np.float32)).realize()
  x = Tensor(np.array([1., 1.], np.float32)).realize()
  h = x * w
  keep = h + 0   # a lazy tensor holding the node x * w: it stays alive, with its memo
  h.realize()
  w.assign(Tensor(np.array([10., 20.], np.float32))).realize()
  np.testing.assert_equal(((x * w) + 1).numpy(), [11., 21.])
  np.testing.assert_equal(keep.numpy(), [10., 20.])   # lazy: read at realize time, after the assign

def test_an_assign_built_again_runs_again():
  c = Tensor(np.array([1.], np.float32)).realize()
  c.assign(c * 2)
  keep = c + 0   # holds the first ASSIGN node
  c.realize()
  c.assign(c * 2).realize()   # the same graph again: a new assign, not the one that ran
  np.testing.assert_equal(c.numpy(), [4.])
  del keep

def test_repeated_assigns_reuse_one_schedule():
  # each assign is a node of its own, but the schedule cache key leaves that out: a training loop schedules once
  c = Tensor(np.array([1., 2., 3.], np.float32)).realize()
  for _ in range(2): c.assign(c * 2 + 1).realize()   # the first graph reads the plain buffer, later ones the assign's result
  n = len(R.schedules)
  for _ in range(10): c.assign(c * 2 + 1).realize()
  assert len(R.schedules) == n
  want = np.array([1., 2., 3.], np.float32)
  for _ in range(12): want = want * 2 + 1
  np.testing.assert_equal(c.numpy(), want)
