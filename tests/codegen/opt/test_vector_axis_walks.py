"""pick_vector_axis asks an Expander over the group's register axes (no vector axis) which axes each index uses and the index
with the other axes at 0, and the expansion reuses those answers (expander.expand_kernel): it substituted and simplified every
index once per axis, then the expansion set the same axes again (~10% of the expander's time on ResNet-18, issue 23.8). The
choice and the expanded kernel must be the ones substitute + simplify gave."""
from __future__ import annotations
import numpy as np
import pytest
from core.ir.dtype import dtypes
from core.ir.ops import UOp, Ops
from core.ir.symbolic import simplify, shared_simplify
import core.codegen.opt.expander as expander
from core.codegen.opt.expander import Expander, pick_vector_axis, register_groups
from core.codegen.opt.kernel import REGISTER_AXES
from core.codegen.opt import Kernel, Opt, OptOps
from opt_helpers import matmul_item, product_item

def _kernels() -> list[UOp]:
  rng = np.random.default_rng(0)
  mm = Kernel(matmul_item(rng, 16, 32, 64)[0].ast)
  x, w = rng.standard_normal((2, 8, 10, 10)).astype(np.float32), rng.standard_normal((16, 8, 3, 3)).astype(np.float32)
  conv = Kernel(product_item(lambda a, b: a.conv2d(b, padding=1), x, w).ast)
  return [mm.apply(Opt(OptOps.UPCAST, 1, 4)).apply(Opt(OptOps.UPCAST, 0, 2)).apply(Opt(OptOps.UNROLL, 2, 4)).ast,
          conv.apply(Opt(OptOps.UPCAST, 1, 4)).apply(Opt(OptOps.UPCAST, 3, 2)).apply(Opt(OptOps.UNROLL, 6, 0)).ast]

def _pick_by_substitute(sink: UOp, regs: list[UOp]) -> UOp | None:
  """pick_vector_axis as it was: each index with the other axes set to 0 by substitute + simplify."""
  best, choice = None, None
  mem = [u for u in sink.toposort() if u.op in (Ops.LOAD, Ops.STORE)]
  for r in regs:
    n = expander.range_size(r)
    if n is None or n < 2 or n & (n - 1): continue
    others = {x: UOp.const(dtypes.index, 0) for x in regs if x is not r}
    score = inner = 0
    for m in mem:
      idx = m.src[0]
      if idx.op is not Ops.INDEX or r not in idx.src[1].toposort(): continue
      dt = m.dtype if m.op is Ops.LOAD else m.src[1].dtype
      i = simplify(idx.src[1].substitute(others)) if others else idx.src[1]
      if dt.scalar() in expander.VECTOR_MEM_DTYPES and expander.contiguous_offset(i, r) is not None:
        score += 2 if m.op is Ops.STORE else 1
        inner += any(x.op is Ops.RANGE and x.arg[1].name in ("REDUCE", "UNROLL") for x in idx.src[1].toposort())
    key = (inner, score, r.arg[1].name == "UPCAST", r.arg[0])
    if score > 0 and (best is None or key > best): best, choice = key, r
  return choice

@pytest.mark.parametrize("which", [0, 1])
def test_the_pick_asks_no_substitute_and_chooses_as_before(which, monkeypatch):
  sink = _kernels()[which]
  regs = sorted({u for u in sink.toposort() if u.op is Ops.RANGE and u.arg[1] in REGISTER_AXES}, key=lambda r: r.arg[0])
  (group,) = register_groups(sink, regs)
  assert len(group) >= 3
  want = _pick_by_substitute(sink, group)
  subs = []
  substitute = UOp.substitute
  monkeypatch.setattr(UOp, "substitute", lambda self, m: subs.append(m) or substitute(self, m))
  walks = Expander(group, None)
  assert pick_vector_axis(sink, group, walks=walks) is want is not None
  assert subs == [] and walks._subs

@pytest.mark.parametrize("which", [0, 1])
def test_the_expansion_reusing_the_picks_walks_is_the_same_kernel(which):
  sink = _kernels()[which]
  regs = sorted({u for u in sink.toposort() if u.op is Ops.RANGE and u.arg[1] in REGISTER_AXES}, key=lambda r: r.arg[0])
  (group,) = register_groups(sink, regs)
  with shared_simplify(): got = expander.expand_kernel(sink)
  # fresh walks for the pick and for the expansion (and a fresh memo): what expand_kernel did before
  with shared_simplify():
    vec = pick_vector_axis(sink, group)
    want = Expander([r for r in group if r is not vec], vec)(sink, {})
  assert got is want
