"""lower_kernel's walks: a kernel with no op the lowering's rules match is not rewritten at all, and an accumulator's loops
come from LowerCtx's scan for values the lowering found in the kernel (no RangeScopes walk). Same kernels either way."""
from __future__ import annotations
import copy
import numpy as np
from core import Tensor
from core.ir.ops import Ops
from core.ir.pattern import UPat, PatternMatcher
from core.codegen.program import get_program
from core.device.registry import Device
from core.schedule.kernelize import create_schedule
import core.codegen.lowerer as lowerer

rng = np.random.default_rng(0)

def _compile_all(out: Tensor) -> None:
  items, _, _ = create_schedule([out.uop])
  rnd = copy.copy(Device[Device.DEFAULT].renderer)   # a renderer of its own: programs are cached by (AST, renderer)
  for it in items:
    if it.ast.op is Ops.SINK: get_program(it.ast, rnd)

def _walks(monkeypatch) -> list:
  walks: list = []
  rewrite = lowerer.graph_rewrite
  monkeypatch.setattr(lowerer, "graph_rewrite", lambda *a, **k: walks.append(k.get("name")) or rewrite(*a, **k))
  return walks

def test_root_ops():
  f = lambda x: None  # noqa: E731
  assert PatternMatcher([(UPat(Ops.ADD), f), (UPat((Ops.MUL, Ops.REDUCE)), f)]).root_ops() == {Ops.ADD, Ops.MUL, Ops.REDUCE}
  assert PatternMatcher([(UPat(Ops.ADD), f), (UPat(name="x"), f)]).root_ops() is None   # a rule for any op
  assert PatternMatcher([]).root_ops() == frozenset()
  # the lowering's own rules: the reductions and, with drop_where, the selects; the accumulator adds only with a WMMA
  assert lowerer._pm_lower(True, False).root_ops() == {Ops.REDUCE, Ops.WHERE}
  assert lowerer._pm_lower(False, True).root_ops() == {Ops.REDUCE, Ops.ADD}

def test_elementwise_kernel_is_not_rewritten(monkeypatch):
  walks = _walks(monkeypatch)
  a = rng.standard_normal((64, 48)).astype(np.float32)
  x = Tensor(a).realize()
  _compile_all(x * 2 + 1)
  assert walks == []
  np.testing.assert_allclose((x * 2 + 1).numpy(), a * 2 + 1, rtol=1e-6)

def test_reduction_still_rewritten(monkeypatch):
  walks = _walks(monkeypatch)
  a = rng.standard_normal((64, 48)).astype(np.float32)
  x = Tensor(a).realize()
  _compile_all(x.sum(axis=1))
  assert walks == ["lower reduce"]
  np.testing.assert_allclose(x.sum(axis=1).numpy(), a.sum(axis=1), rtol=1e-5, atol=1e-5)

def test_accumulator_loops_without_a_walk(monkeypatch):
  # a reduction of values read straight from the kernel: LowerCtx.live answers, RangeScopes is never asked
  asked: list = []
  call = lowerer.RangeScopes.__call__
  monkeypatch.setattr(lowerer.RangeScopes, "__call__", lambda self, root: asked.append(root) or call(self, root))
  a, b = (rng.standard_normal((32, 40)).astype(np.float32) for _ in range(2))
  x, y = Tensor(a).realize(), Tensor(b).realize()
  _compile_all((x * y).sum(axis=1) + x.max(axis=1))
  assert asked == []
  np.testing.assert_allclose(((x * y).sum(axis=1) + x.max(axis=1)).numpy(), (a * b).sum(axis=1) + a.max(axis=1), rtol=1e-5, atol=1e-5)

def test_nested_reduction_asks_the_scopes(monkeypatch):
  # a reduction of a value built from a lowered one (x - mean) is not in the kernel as the lowering found it: RangeScopes answers
  asked: list = []
  call = lowerer.RangeScopes.__call__
  monkeypatch.setattr(lowerer.RangeScopes, "__call__", lambda self, root: asked.append(root) or call(self, root))
  a = rng.standard_normal((16, 40)).astype(np.float32)
  x = Tensor(a).realize()
  out = ((x - x.mean(axis=1, keepdim=True)) ** 2).sum(axis=1)
  _compile_all(out)
  want = ((a - a.mean(axis=1, keepdims=True)) ** 2).sum(axis=1)
  np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-4)
  assert asked
