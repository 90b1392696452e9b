"""Kernel.apply bounds the register elements (MAX_REGISTER_ELEMS) by the largest group of register axes expanded together, a
walk of the whole kernel (expander.register_groups) after every split: only where all the register axes together exceed the
bound, since no group is larger than all of them (the optimizer's trial splits walked each kernel again, issue 23.8)."""
from __future__ import annotations
import numpy as np
import pytest
from core import Tensor
from core.schedule.kernelize import create_schedule
import core.codegen.opt.expander as expander
from core.codegen.opt import Kernel, Opt, OptOps, KernelOptError
from core.codegen.opt.kernel import MAX_REGISTER_ELEMS

def _matmul_kernel() -> Kernel:
  a, b = (Tensor(np.ones((64, 64), np.float32)).realize() for _ in range(2))
  items, _, _ = create_schedule([(a @ b).uop])
  return Kernel(items[-1].ast)

def test_a_split_under_the_bound_walks_no_groups(monkeypatch):
  k = _matmul_kernel()
  def walked(*a):
    raise AssertionError("register_groups walked")
  monkeypatch.setattr(expander, "register_groups", walked)
  k = k.apply(Opt(OptOps.UPCAST, 0, 32)).apply(Opt(OptOps.UPCAST, 1, 32))
  assert MAX_REGISTER_ELEMS == 1024 and sorted(r.src[0].arg for r in k.axes if r.arg[1].name == "UPCAST") == [32, 32]

def test_a_split_over_the_bound_raises():
  k = _matmul_kernel().apply(Opt(OptOps.UPCAST, 0, 32)).apply(Opt(OptOps.UPCAST, 1, 32))
  with pytest.raises(KernelOptError, match="register elements"): k.apply(Opt(OptOps.UNROLL, 2, 2))
