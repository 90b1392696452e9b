"""SWAP exchanges two LOOP ranges' ids in one walk of the kernel (kernel.swap_ids): it renamed the first range to a spare id,
the second to the first's and the spare to the second's, three rebuilds, each walking the kernel and redoing every index
(~0.85 ms a SWAP on ResNet-18 b8 inference, issue 23.8). The kernel must be the one the three rebuilds gave."""
from __future__ import annotations
import itertools
import numpy as np
import pytest
import core.codegen.opt.kernel as kernel
from core.ir.ops import UOp, AxisType
from core.codegen.opt import Kernel, Opt, OptOps
from opt_helpers import matmul_item, product_item, run_ast

def _through_a_spare_id(ast: UOp, r: UOp, o: UOp) -> UOp:
  ast = kernel.rebuild(kernel.rebuild(ast, {r: (r.replace(arg=(-1, r.arg[1])),)}), {o: (o.replace(arg=r.arg),)})
  return kernel.rebuild(ast, {r.replace(arg=(-1, r.arg[1])): (r.replace(arg=o.arg),)})

def _conv(rng: np.random.Generator):
  x, w = rng.standard_normal((2, 8, 10, 10)).astype(np.float32), rng.standard_normal((16, 8, 3, 3)).astype(np.float32)
  return product_item(lambda a, b: a.conv2d(b, padding=1), x, w)

OPTS = {"matmul": [Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UNROLL, 2, 4), Opt(OptOps.TILE, 0, 4)],
        "conv": [Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.TILE, 2, 2), Opt(OptOps.PADTO, 3, 4)]}

@pytest.mark.parametrize("which", list(OPTS))
def test_swap_ids_is_the_renaming_through_a_spare_id(which):
  rng = np.random.default_rng(0)
  ast = matmul_item(rng, 16, 32, 64)[0].ast if which == "matmul" else _conv(rng).ast
  kernels = [k := Kernel(ast)] + [k := k.apply(o) for o in OPTS[which]]
  pairs = 0
  for k in kernels:
    for a, b in itertools.permutations(k.of_type(AxisType.LOOP), 2):
      assert kernel.swap_ids(k.ast, a, b) is _through_a_spare_id(k.ast, a, b), (k, a.arg, b.arg)
      pairs += 1
  assert pairs >= 8

def test_a_swap_is_one_walk_and_runs(monkeypatch):
  rng = np.random.default_rng(1)
  item, want = matmul_item(rng, 16, 32, 64)
  k = Kernel(item.ast).apply(Opt(OptOps.UPCAST, 1, 4)).apply(Opt(OptOps.TILE, 0, 4))
  walks = []
  rewalk = kernel._rewalk
  monkeypatch.setattr(kernel, "_rewalk", lambda *a: walks.append(a) or rewalk(*a))
  loops = k.of_type(AxisType.LOOP)
  s = k.apply(Opt(OptOps.SWAP, k.axes.index(loops[0]), k.axes.index(loops[1])))
  assert len(walks) == 1
  assert [r.arg for r in s.of_type(AxisType.LOOP)] == [r.arg for r in loops]
  got, _ = run_ast(item, s.ast)
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-4)
