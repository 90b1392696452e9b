"""A transposing tile's loads (opt/shuffle.py via the expander): each lane of the stored vector reads along another register axis,
so the tile loads whole vectors along that axis and transposes them in registers by two-vector shuffles; the shuffle network
itself, evaluated lane by lane; results against numpy for odd shapes and other element types."""
from __future__ import annotations
import numpy as np
import pytest
from core import Tensor
from core.ir.ops import UOp, Ops
from core.ir.dtype import dtypes
from core.codegen.opt.shuffle import transpose_rows

def _lanes(u: UOp, env: dict[UOp, list]) -> list:
  """The lanes of u, a tree of VECTORIZE and GEP over the vectors in env."""
  if u.op is Ops.GEP:
    v = _lanes(u.src[0], env)
    return [v[i] for i in u.arg]
  if u.op is Ops.VECTORIZE: return [x for s in u.src for x in _lanes(s, env)]
  return env[u]

@pytest.mark.parametrize("j, m", [(2, 2), (8, 8), (16, 8), (8, 16), (16, 16), (4, 16), (32, 8)])
@pytest.mark.parametrize("most", [0, 4, 8])
def test_transpose_rows_is_a_transpose(j, m, most):
  rows = [UOp.variable(f"r{k}", 0, 9).cast(dtypes.float32.vec(m)) for k in range(j)]
  out = transpose_rows([[r] for r in rows], most)
  got = [_lanes(o, {r: [(k, a) for a in range(m)] for k, r in enumerate(rows)}) for o in out]
  assert got == [[(k, a) for k in range(j)] for a in range(m)]
  # every shuffle reads at most two vectors (one shufflevector), and a tile wider than `most` lanes is shuffled in squares of `most`
  shuffles = [u for o in out for u in o.toposort() if u.op is Ops.VECTORIZE]
  assert all(len({s.src[0] for s in u.src}) <= 2 for u in shuffles)
  # (and the columns of those squares put end to end: s, 2s, ... j lanes)
  sq = min(j, m, most or j)
  assert {u.dtype.count for u in shuffles if len({s.src[0] for s in u.src}) == 2} <= {sq << i for i in range(8) if sq << i <= j}

@pytest.mark.parametrize("shape, perm", [((513, 1031), (1, 0)), ((1000, 520), (1, 0)), ((17, 4096), (1, 0)), ((3, 37, 29, 24), (0, 3, 1, 2)),
                                         ((2, 40, 21, 33), (0, 2, 3, 1)), ((1, 24, 600, 40), (0, 2, 3, 1))])
@pytest.mark.parametrize("dt", [np.float32, np.int32, np.float16])
def test_transposing_copies_match_numpy(shape, perm, dt):
  x = (np.random.default_rng(7).standard_normal(shape) * 1000).astype(dt)
  np.testing.assert_array_equal(Tensor(x).permute(*perm).contiguous().numpy(), x.transpose(perm))

@pytest.mark.parametrize("j, m, w", [(16, 16, 8), (32, 16, 8), (16, 32, 8), (8, 16, 4)])
def test_rows_loaded_a_register_at_a_time_give_each_column_of_squares_its_own_loads(j, m, w):
  # rows of m lanes given as m/w vectors of w (the expander's split rows): the same transpose, and output row a reads only the
  # pieces holding lane a, so the rows each piece makes are stored without the others' registers
  pieces = [[UOp.variable(f"r{k}p{p}", 0, 9).cast(dtypes.float32.vec(w)) for p in range(m // w)] for k in range(j)]
  out = transpose_rows(pieces, w)
  env = {v: [(k, p * w + a) for a in range(w)] for k, row in enumerate(pieces) for p, v in enumerate(row)}
  assert [_lanes(o, env) for o in out] == [[(k, a) for k in range(j)] for a in range(m)]
  for a, o in enumerate(out):
    assert {u for u in o.toposort() if u in env} == {row[a // w] for row in pieces}

@pytest.mark.parametrize("j, m, most", [(16, 16, 8), (8, 16, 0)])
def test_a_networks_lanes_are_the_nodes_gep_makes_without_calling_it(monkeypatch, j, m, most):
  # a conv's tile rows build thousands of one-lane GEPs: made straight from their fields (shuffle._lanes), not through UOp.gep's
  # checks, they must still be gep's very nodes
  rows = [UOp.variable(f"r{k}", 0, 9).cast(dtypes.float32.vec(m)) for k in range(j)]
  calls, gep = [0], UOp.gep
  def counted(self, i):
    calls[0] += isinstance(i, int) or len(i) == 1   # (a square's piece of a wider row is one GEP of its lanes: kept)
    return gep(self, i)
  monkeypatch.setattr(UOp, "gep", counted)
  out = transpose_rows([[r] for r in rows], most)
  assert calls[0] == 0
  geps = [u for o in out for u in o.toposort() if u.op is Ops.GEP]
  assert geps and all(g is gep(g.src[0], g.arg) for g in geps)

@pytest.mark.parametrize("j, m, most", [(8, 16, 8), (4, 16, 4), (2, 16, 2), (16, 16, 8), (8, 32, 8)])
def test_squares_side_by_side_are_the_same_transpose_in_fewer_shuffles(j, m, most):
  # rows of one register holding several squares' rows side by side (tile_rows: 8 pixels' columns of 16 channels, two 8 x 8
  # squares): each block swap is one shuffle of two whole registers for all of them, log2(s) rounds of s per s rows
  rows = [UOp.variable(f"r{k}", 0, 9).cast(dtypes.float32.vec(m)) for k in range(j)]
  out = transpose_rows([[r] for r in rows], most, side_by_side=True)
  env = {r: [(k, a) for a in range(m)] for k, r in enumerate(rows)}
  assert [_lanes(o, env) for o in out] == [[(k, a) for k in range(j)] for a in range(m)]
  s = min(j, m, most)
  def join(u: UOp) -> bool:   # two whole vectors end to end
    lanes = [(x.src[0], i) for x in u.src for i in x.arg]
    return lanes == [(lanes[0][0], i) for i in range(len(lanes) // 2)] + [(lanes[-1][0], i) for i in range(len(lanes) // 2)]
  swaps = [u for u in {u: None for o in out for u in o.toposort()} if u.op is Ops.VECTORIZE and len({x.src[0] for x in u.src}) == 2
           and not join(u)]
  # the swaps, all of whole registers, where the squares one at a time take m / s times as many, of s lanes
  assert {u.dtype.count for u in swaps} == {m} and len(swaps) == (j // s) * s * (s.bit_length() - 1)
