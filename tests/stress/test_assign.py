"""Stress: lazy assign chains, several assigns in one realize, reads after slice assigns, readers of assigned buffers.

Semantics tested (tinygrad's): a lazy tensor built from a buffer reads that buffer's contents when it is realized, except
that a read built before an assign to the same buffer is ordered before that assign when both are realized together."""
from __future__ import annotations
import numpy as np
from core import Tensor

def test_assign_chain_lazy():
  x = Tensor.zeros(4, 3).contiguous().realize()
  for _ in range(5): x.assign(x + 1)
  np.testing.assert_equal(x.numpy(), np.full((4, 3), 5, np.float32))

def test_assign_chain_uses_previous():
  x = Tensor(np.arange(6, dtype=np.float32)).realize()
  x.assign(x * 2)
  x.assign(x + x)
  x.assign(x[::-1])
  np.testing.assert_equal(x.numpy(), (np.arange(6, dtype=np.float32) * 4)[::-1])

def test_two_assigns_one_realize():
  a = Tensor(np.ones(5, np.float32)).realize()
  b = Tensor(np.full(5, 2, np.float32)).realize()
  a.assign(a + b)
  b.assign(b * 3)
  Tensor.realize(a, b)
  np.testing.assert_equal(a.numpy(), np.full(5, 3, np.float32))
  np.testing.assert_equal(b.numpy(), np.full(5, 6, np.float32))

def test_swap_via_assign_one_realize():
  a0, b0 = np.arange(4, dtype=np.float32), np.arange(4, 8, dtype=np.float32)
  a, b = Tensor(a0).realize(), Tensor(b0).realize()
  a.assign(b + 0)
  b.assign(a + 0)  # a is the ASSIGN now: b gets the new a (b's old value)
  Tensor.realize(a, b)
  np.testing.assert_equal(a.numpy(), b0)
  np.testing.assert_equal(b.numpy(), b0)

def test_swap_old_values_one_realize():
  a0, b0 = np.arange(4, dtype=np.float32), np.arange(4, 8, dtype=np.float32)
  a, b = Tensor(a0).realize(), Tensor(b0).realize()
  olda, oldb = a + 0, b + 0   # built before the assigns: they read the old contents
  a.assign(oldb)
  b.assign(olda)
  Tensor.realize(a, b)
  np.testing.assert_equal(a.numpy(), b0)
  np.testing.assert_equal(b.numpy(), a0)

def test_reader_built_before_assign_realized_together():
  x = Tensor(np.arange(5, dtype=np.float32)).realize()
  y = x * 10
  x.assign(x + 100)
  Tensor.realize(y, x)
  np.testing.assert_equal(y.numpy(), np.arange(5, dtype=np.float32) * 10)
  np.testing.assert_equal(x.numpy(), np.arange(5, dtype=np.float32) + 100)

def test_reader_built_before_assign_realized_after():
  x = Tensor(np.arange(5, dtype=np.float32)).realize()
  y = x * 10
  x.assign(x + 100).realize()
  # y is still lazy: it reads the buffer at realize time (tinygrad semantics: the new contents)
  np.testing.assert_equal(y.numpy(), (np.arange(5, dtype=np.float32) + 100) * 10)

def test_numpy_twice_after_lazy_assign_runs_assign_once():
  x = Tensor(np.ones(4, np.float32)).realize()
  x.assign(x + 1)
  np.testing.assert_equal(x.numpy(), np.full(4, 2, np.float32))
  np.testing.assert_equal(x.numpy(), np.full(4, 2, np.float32))

def test_iadd_then_read_derived_twice():
  y = Tensor(np.ones(4, np.float32)).realize()
  y += 1
  np.testing.assert_equal((y * 1).numpy(), np.full(4, 2, np.float32))
  np.testing.assert_equal((y * 1).numpy(), np.full(4, 2, np.float32))

def test_read_after_slice_assign():
  x = Tensor(np.zeros((4, 4), np.float32)).realize()
  x[1:3, ::3] = 5.0
  s = x.sum(1)
  n = np.zeros((4, 4), np.float32)
  n[1:3, ::3] = 5
  np.testing.assert_equal(s.numpy(), n.sum(1))
  x[0] = x[1] + 1
  n[0] = n[1] + 1
  np.testing.assert_equal(x.numpy(), n)

def test_assign_slice_view_directly():
  x = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4)).realize()
  x[1].assign(Tensor(np.full(4, -1, np.float32))).realize()
  n = np.arange(12, dtype=np.float32).reshape(3, 4)
  n[1] = -1
  np.testing.assert_equal(x.numpy(), n)

def test_assign_permuted_view_of_itself():
  a = np.arange(9, dtype=np.float32).reshape(3, 3)
  x = Tensor(a).realize()
  x.assign(x.T.contiguous())
  np.testing.assert_equal(x.numpy(), a.T)

def test_assign_transpose_no_contiguous():
  # in-place transpose reads x while writing x: must not see half-written values
  a = np.arange(16, dtype=np.float32).reshape(4, 4)
  x = Tensor(a).realize()
  x.assign(x.T)
  np.testing.assert_equal(x.numpy(), a.T)

def test_assign_reversed_no_contiguous():
  a = np.arange(100, dtype=np.float32)
  x = Tensor(a).realize()
  x.assign(x.flip(0))
  np.testing.assert_equal(x.numpy(), a[::-1])

def test_assign_shifted_self():
  a = np.arange(10, dtype=np.float32)
  x = Tensor(a).realize()
  x.assign(x.pad(((1, 0),))[:10])
  np.testing.assert_equal(x.numpy(), np.concatenate([[0], a[:9]]))

def test_iadd_loop_and_int_buffer():
  x = Tensor(np.zeros(3, np.int32)).realize()
  for i in range(10): x += i
  np.testing.assert_equal(x.numpy(), np.full(3, 45, np.int32))

def test_clone_independent():
  x = Tensor(np.arange(4, dtype=np.float32)).realize()
  c = x.clone()
  x.assign(x * 0).realize()
  np.testing.assert_equal(c.numpy(), np.arange(4, dtype=np.float32))

def test_assign_then_other_tensor_depends_on_new_value():
  x = Tensor(np.ones(4, np.float32)).realize()
  x.assign(x + 1)
  z = x * 3   # built from the assign: sees the new value
  np.testing.assert_equal(z.numpy(), np.full(4, 6, np.float32))
  np.testing.assert_equal(x.numpy(), np.full(4, 2, np.float32))
