"""lowerer.drop_gated_where: WHERE(g, LOAD(INDEX(buf, i, ... & g)), 0) is the LOAD, whose gate already gives 0 where g is false
(a padded conv's tap rows read in place: the padding's select and the load's gate are one condition). Values against numpy
for padded depthwise and plain convs, and the select gone from the program."""
from __future__ import annotations
import copy
import numpy as np
import pytest
from core import Tensor
from core.ir.ops import Ops, UOp
from core.ir.dtype import dtypes
from core.codegen.lowerer import drop_gated_where
from core.codegen.program import get_program, program_uops
from core.device.registry import Device
from core.schedule.kernelize import create_schedule

def _gated_where_loads(uops: list) -> int:
  """WHEREs that select a gated load against 0 under a condition that is one of the load's gate's conjuncts."""
  return sum(1 for u in uops if u.op is Ops.WHERE and drop_gated_where(u) is not None)

def _program_uops(out: Tensor) -> list:
  items, _, _ = create_schedule([out.uop])
  rnd = copy.copy(Device[Device.DEFAULT].renderer)   # a renderer of its own: programs are cached by (AST, renderer)
  return [u for it in items if it.ast.op is Ops.SINK for u in program_uops(get_program(it.ast, rnd))]

rng = np.random.default_rng(5)

def _conv_ref(x: np.ndarray, w: np.ndarray, groups: int, pad: int) -> np.ndarray:
  n, c, h, wd = x.shape
  o, cg, k, _ = w.shape
  xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
  win = np.lib.stride_tricks.sliding_window_view(xp, (k, k), axis=(2, 3))   # n c oh ow k k
  win = win.reshape(n, groups, cg, *win.shape[2:])
  return np.einsum("ngchwij,gocij->ngohw", win, w.astype(np.float64).reshape(groups, o // groups, cg, k, k)).reshape(n, o, *win.shape[3:5])

@pytest.mark.parametrize("c, hw, groups, pad", [(32, 24, 32, 1), (144, 12, 144, 1), (8, 56, 8, 1), (8, 20, 8, 2), (4, 9, 1, 1)])
def test_padded_conv_values(c, hw, groups, pad):
  x = rng.standard_normal((2, c, hw, hw)).astype(np.float32)
  w = rng.standard_normal((c, c // groups, 2 * pad + 1, 2 * pad + 1)).astype(np.float32)
  got = Tensor(x).conv2d(Tensor(w), groups=groups, padding=pad).numpy()
  np.testing.assert_allclose(got, _conv_ref(x, w, groups, pad), rtol=1e-4, atol=1e-4)

@pytest.mark.parametrize("c, hw", [(32, 24), (144, 12)])
def test_depthwise_select_dropped(c, hw):
  x = Tensor(rng.standard_normal((1, c, hw, hw)).astype(np.float32)).realize()
  w = Tensor(rng.standard_normal((c, 1, 3, 3)).astype(np.float32)).realize()
  uops = _program_uops(x.conv2d(w, groups=c, padding=1))
  assert any(u.op is Ops.LOAD and u.src[0].op is Ops.INDEX and len(u.src[0].src) > 2 for u in uops)   # its tap rows are gated loads
  assert _gated_where_loads(uops) == 0

def test_rule_keeps_other_selects():
  # a select of a gated load under another condition, or against a value that is not 0, stays
  p = UOp(Ops.PARAM, dtypes.float32.ptr(16), (), 0)
  i = UOp.variable("i", 0, 15)
  g, h = i < 8, i < 4
  ld = p.index(i, g).load()
  assert drop_gated_where(g.where(ld, UOp.const(dtypes.float32, 0.0))) is ld
  assert drop_gated_where((g & h).where(ld, UOp.const(dtypes.float32, 0.0))) is None     # g & h is not a conjunct of g
  assert drop_gated_where(h.where(p.index(i, g & h).load(), UOp.const(dtypes.float32, 0.0))) is not None
  assert drop_gated_where(g.where(ld, UOp.const(dtypes.float32, 1.0))) is None
  assert drop_gated_where(g.where(ld, UOp.const(dtypes.float32, -0.0))) is None

def test_reductions_lowered_and_selects_dropped_in_one_walk(monkeypatch):
  # lower_kernel rewrites the whole kernel once (lower reduce and drop gated where together), and skips gate_group_stores'
  # walk where no reduction is shared by a workgroup
  import core.codegen.lowerer as lowerer
  walks: list = []
  rewrite, gate = lowerer.graph_rewrite, lowerer.gate_group_stores
  monkeypatch.setattr(lowerer, "graph_rewrite", lambda *a, **k: walks.append(k.get("name")) or rewrite(*a, **k))
  monkeypatch.setattr(lowerer, "gate_group_stores", lambda sink: walks.append("gate") or gate(sink))
  x = Tensor(rng.standard_normal((1, 32, 24, 24)).astype(np.float32)).realize()
  w = Tensor(rng.standard_normal((32, 1, 3, 3)).astype(np.float32)).realize()
  uops = _program_uops(x.conv2d(w, groups=32, padding=1))
  assert walks == ["lower reduce"] and _gated_where_loads(uops) == 0
