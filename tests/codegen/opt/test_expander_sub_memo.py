"""The expander sets the register axes in an expression (Expander.sub) once per kernel for each node, register values and lane:
a masked elementwise kernel's loads and store share one gate and one index, which were set lane by lane and simplified again
for every buffer (a quarter of the expander's time in a small kernel's first compile, issue 23.8)."""
from __future__ import annotations
import numpy as np
import pytest
from core import Tensor
from core.ir.ops import UOp, AxisType
import core.codegen.opt.expander as expander
from core.codegen.opt.expander import Expander
from core.codegen.program import _program, program_source
from core.schedule.kernelize import create_schedule
from opt_helpers import host_renderer

vec, outer = UOp.range(8, 2, AxisType.UPCAST), UOp.range(100, 1, AxisType.OUTER)

def _count_simplifies(monkeypatch: pytest.MonkeyPatch) -> list[UOp]:
  calls: list[UOp] = []
  real = expander._simplify
  monkeypatch.setattr(expander, "_simplify", lambda u, memo=None: calls.append(u) or real(u, memo))
  return calls

def test_sub_simplifies_each_lane_once(monkeypatch):
  calls = _count_simplifies(monkeypatch)
  gate = (outer * 8 + vec) < 777
  ex = Expander([], vec, masked=True)
  first = [ex.sub(gate, {}, k) for k in range(8)]
  n = len(calls)
  again = [ex.sub(gate, {}, k) for k in range(8)]
  # each lane's compare once, and its index's sum once (the lanes are then set by the sum shortcut)
  assert n == len(calls) == len(set(calls)) == 9 and all(a is b for a, b in zip(first, again))
  # the answers a fresh expander gives: nothing carries over between kernels
  assert all(a is Expander([], vec, masked=True).sub(gate, {}, k) for k, a in enumerate(first))

def _masked_kernel():
  a, b, c = (Tensor(np.full(1001, i + 1, np.float32)).realize() for i in range(3))   # 1001: the last vector is masked
  items, _, _ = create_schedule([((a * b + c).relu() * 2.5 - 1).uop])
  return items[-1].ast

@pytest.mark.parametrize("simd_bytes", [32, 64])   # AVX2 and AVX-512 hosts
def test_masked_kernel_simplifies_no_expression_twice(monkeypatch, simd_bytes):
  rnd, ast = host_renderer(simd_bytes, masked=True), _masked_kernel()   # a renderer without masks sets no gates lane by lane
  calls = _count_simplifies(monkeypatch)
  _program(ast, rnd, True)
  assert calls and len(calls) == len(set(calls)), f"{len(calls)} simplifies of {len(set(calls))} expressions"

@pytest.mark.parametrize("simd_bytes", [32, 64])
def test_masked_kernel_source_unchanged(monkeypatch, simd_bytes):
  rnd, ast = host_renderer(simd_bytes), _masked_kernel()
  once = program_source(_program(ast, rnd, True))
  class Forgetful(dict):
    def __setitem__(self, k, v): pass
  init = Expander.__init__
  def forgetful_init(self, *a, **k):
    init(self, *a, **k)
    self._subs = Forgetful()
  monkeypatch.setattr(Expander, "__init__", forgetful_init)
  assert program_source(_program(ast, rnd, True)) == once
