"""linearize.tile_keys (the emission order of a block with a shuffle network: an AVX-512 conv's tile rows, a transposing copy's
squares) gives the keys of a straightforward reference (sets of loads, a union-find over them, a walk down from each group's
stores) on the blocks of real kernels: its bitsets are only a faster way to the same order (kernels measured for speed with it)."""
from __future__ import annotations
import numpy as np
import pytest
from cpu_kernels import AVX512, host_like_renderer
from core import Tensor
from core.ir.ops import UOp, Ops
from core.schedule.kernelize import create_schedule
from core.codegen.program import get_program
import core.codegen.linearize as linearize_mod
from core.codegen.linearize import is_shuffle

def reference_keys(items: list[UOp], deps: dict[UOp, set[UOp]], users: dict[UOp, list[UOp]], order: dict[UOp, int], shuffles=None):
  """(group of the first stores needing the item, graph position of its last load, stage for loads and shuffles else -1,
  graph position), or None: no stage-2 shuffle or fewer than two groups of stores that share no load. `deps` has no entry for an
  item that waits on nothing; `shuffles` (the block's shuffles, as linearize passes them) is not read."""
  deps = {it: deps.get(it, set()) for it in items}
  if not any(is_shuffle(it) for it in items): return None
  topo: list[UOp] = []
  def visit(it: UOp) -> None:
    if it in stage: return
    stage[it] = 0
    for d in deps[it]: visit(d)
    topo.append(it)
  stage: dict[UOp, int] = {}
  for it in items: visit(it)
  for it in topo: stage[it] = max((stage[d] for d in deps[it]), default=0) + is_shuffle(it)
  if max(stage.values()) < 2: return None
  loads: dict[UOp, frozenset[UOp]] = {}
  for it in topo: loads[it] = frozenset().union(*(loads[d] for d in deps[it]), {it} if it.op is Ops.LOAD else ())
  stores = [it for it in topo if it.op is Ops.STORE]
  parent = {st: st for st in stores}
  def find(st: UOp) -> UOp: return st if parent[st] is st else find(parent[st])
  for a in stores:
    for b in stores:
      if loads[a] & loads[b]: parent[find(a)] = find(b)
  groups = sorted({find(st) for st in stores}, key=lambda root: min(order[st] for st in stores if find(st) is root))
  if len(groups) < 2: return None
  rank = {st: groups.index(find(st)) for st in stores}
  below = {st: _below(st, deps) | {st} for st in stores}
  def needed_by(it: UOp) -> list[UOp]: return [st for st in stores if it in below[st]]
  return {it: (min((rank[st] for st in needed_by(it)), default=len(groups)), max((order[ld] for ld in loads[it]), default=-1),
               stage[it] if is_shuffle(it) or it.op is Ops.LOAD else -1, order[it]) for it in items}

def _below(st: UOp, deps: dict[UOp, set[UOp]]) -> set[UOp]:
  seen, todo = set(), list(deps[st])
  while todo:
    if (x := todo.pop()) not in seen: seen.add(x); todo.extend(deps[x])  # noqa: E702
  return seen

def _blocks(monkeypatch, ast: UOp, rnd) -> list[tuple]:
  """tile_keys' arguments and answers for every block of `ast`'s kernel rendered with `rnd`."""
  seen, real = [], linearize_mod.tile_keys
  def spy(*args):
    seen.append((args, got := real(*args)))
    return got
  monkeypatch.setattr(linearize_mod, "tile_keys", spy)
  get_program(ast, rnd)
  return seen

def _avx512():
  rnd = host_like_renderer("LLVM", 64, threads=0)
  rnd.target(AVX512)
  return rnd

def _ast(t: Tensor) -> UOp:
  (item,) = [it for it in create_schedule([t.uop])[0] if it.ast.op is Ops.SINK]
  return item.ast

@pytest.mark.parametrize("case", ["conv 16x7x7", "conv 2x32x14x14", "transpose 2048x2048 avx512", "transpose 2048x2048 avx2"])
def test_tile_keys_match_a_reference(monkeypatch, case):
  z = np.zeros
  if case.startswith("conv"):
    shape = (1, 16, 7, 7) if case == "conv 16x7x7" else (2, 32, 14, 14)
    ast, rnd = _ast(Tensor(z(shape, np.float32)).conv2d(Tensor(z((shape[1], shape[1], 3, 3), np.float32)), padding=1).relu()), _avx512()
  else:
    ast = _ast(Tensor.empty(2048, 2048).permute(1, 0).contiguous())   # (large enough to stream: split rows)
    rnd = _avx512() if case.endswith("avx512") else host_like_renderer("LLVM", 32, threads=0)
  blocks = _blocks(monkeypatch, ast, rnd)
  keyed = [(args, got) for args, got in blocks if got is not None]
  assert keyed, "no block took tile keys: the case no longer covers them"
  # a conv's tile block holds its reduce loop, an item waiting on items after it in graph order (and the items using the loop with
  # it): tile_keys takes those in a second pass; blocks without a loop in one, in the graph's order
  if case.startswith("conv"): assert any(_dep_after_user(*args) for args, _ in keyed), "the case no longer covers the second pass"
  for args, got in blocks: assert got == reference_keys(*args)

def _dep_after_user(items: list[UOp], deps: dict[UOp, set[UOp]], *_) -> bool:
  pos = {it: i for i, it in enumerate(items)}
  return any(pos[d] > pos[it] for it in items for d in deps.get(it, ()))
