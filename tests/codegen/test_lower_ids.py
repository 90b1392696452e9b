"""lowerer.lower_kernel puts the thread ids in while it retypes the index math (one rebuild of the kernel, not map_globals'
substitution and then lower_index_dtype's): the same kernel as the two walks give, by identity, on real kernels of the default
device and on hand-built ones that take each id shape (an id, a shared id split by div/mod, a clamped symbolic end, a gated
one), and on the paths that keep both walks (a thread gate, a costly value to stash)."""
from __future__ import annotations
import copy
import numpy as np
import pytest
from core import Tensor
from core.ir.dtype import dtypes
from core.ir.ops import Ops, UOp, AxisType
from core.ir.pattern import graph_rewrite
from core.codegen import lowerer
from core.codegen.lowerer import LowerCtx, lower_kernel, map_globals, lower_index_dtype, _pm_lower
from core.codegen.stash import stash_reduced_values, max_ahead
import core.codegen.program as program
from core.device.registry import Device
from core.schedule.kernelize import create_schedule

def _two_walks(sink: UOp, global_max, threads: int = 0, scratch_bytes: int = 0, scaled_exp2: bool = False, ahead: bool = False,
               fma_shift: bool = False, stream_bytes: int = 0):
  """lower_kernel as it was: map_globals' substitution, stash_reduced_values (and max_ahead), then lower_index_dtype's rebuild."""
  ctx = LowerCtx(sink)
  sink = graph_rewrite(sink, _pm_lower(lowerer.DROP_GATED_WHERE), ctx, name="lower reduce")
  if ctx.group_reduce: sink = lowerer.gate_group_stores(sink)
  sink, gsize, lsize = map_globals(sink, global_max, threads)
  sink = stash_reduced_values(sink, scratch_bytes, scaled_exp2, fma_shift)
  return lower_index_dtype(max_ahead(sink, stream_bytes) if ahead else sink), gsize, lsize

def _lowered(out: Tensor, monkeypatch) -> list[tuple]:
  """(lower_kernel's arguments, its answer) for each kernel of `out` on a renderer of its own (programs are cached by it)."""
  seen: list[tuple] = []
  orig = program.lower_kernel
  monkeypatch.setattr(program, "lower_kernel", lambda *a: seen.append((a, r := orig(*a))) or r)
  items, _, _ = create_schedule([out.uop])
  rnd = copy.copy(Device[Device.DEFAULT].renderer)
  for it in items:
    if it.ast.op is Ops.SINK: program.get_program(it.ast, rnd)
  return seen

rng = np.random.default_rng(7)
def _t(*shape: int) -> Tensor: return Tensor(rng.standard_normal(shape).astype(np.float32)).realize()

@pytest.mark.parametrize("make", [lambda: _t(64, 96).sum(axis=1), lambda: _t(48, 64) @ _t(64, 40),
                                  lambda: _t(2, 8, 12, 12).conv2d(_t(8, 8, 3, 3), padding=1), lambda: _t(16, 100).softmax()],
                         ids=["sum", "matmul", "conv", "softmax"])
def test_same_kernel_as_two_walks(make, monkeypatch):
  lowered = _lowered(make(), monkeypatch)
  assert lowered
  for args, got in lowered: assert got[0] is _two_walks(*args)[0] and got[1:] == _two_walks(*args)[1:]

def test_values():
  x, w = rng.standard_normal((48, 64)).astype(np.float32), rng.standard_normal((64, 40)).astype(np.float32)
  np.testing.assert_allclose((Tensor(x) @ Tensor(w)).numpy(), x @ w, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(Tensor(x).sum(axis=1).numpy(), x.sum(axis=1), rtol=1e-4, atol=1e-4)

def test_ids_go_in_with_the_retype(monkeypatch):
  # a kernel with thread ids and nothing to stash: lower_kernel makes no substitution walk of its own (map_globals' did)
  calls: list[int] = []
  inside = [False]
  sub, lower = UOp.substitute, program.lower_kernel
  def spy(self: UOp, m: dict) -> UOp:
    if inside[0]: calls.append(len(m))
    return sub(self, m)
  def lower_spied(*a):
    inside[0] = True
    try: return lower(*a)
    finally: inside[0] = False
  monkeypatch.setattr(UOp, "substitute", spy)
  monkeypatch.setattr(program, "lower_kernel", lower_spied)
  lowered = _lowered(_t(512, 1024) + 1, monkeypatch)
  assert lowered and calls == []
  if lowered[0][0][2] > 0:   # a renderer with a thread pool: its blocks are ids
    assert any(u.op is Ops.SPECIAL for u in lowered[0][1][0].toposort())

def _store_kernel(*ends: UOp) -> UOp:
  buf = UOp(Ops.PARAM, dtypes.float32.ptr(), (), 0)
  idx = ends[0]
  for r in ends[1:]: idx = idx * int(r.src[0].vmax) + r
  return UOp.sink(buf.index(idx).store(UOp.const(dtypes.float32, 1.0)).end(*ends))

@pytest.mark.parametrize("ends, global_max, threads", [
  ([16, 8], (2**31 - 1,), 4),              # one GLOBAL axis an id, one LOOP kept
  ([16, 8, 4], (64,), 0),                  # three loops on one id dimension: the outer two share it, split by div/mod
  (["n1", 8], (2**31 - 1,), 4),            # a symbolic end >= 1: the id clamped to the last iteration, same bounds
  (["n0", 8], (2**31 - 1,), 4),            # an end that can be 0: a thread gate, both walks
  ([2**20, 2**12], (2**31 - 1,), 4),       # an index past int32: int64 either way
])
def test_hand_built_ids(ends, global_max, threads):
  rngs = []
  for i, e in enumerate(ends):
    end = UOp.variable("n", 0 if e == "n0" else 1, 64) if isinstance(e, str) else e
    rngs.append(UOp.range(end, i, AxisType.GLOBAL if i == 0 or not threads else AxisType.LOOP))
  sink = _store_kernel(*rngs)
  got, want = lower_kernel(sink, global_max, threads), _two_walks(sink, global_max, threads)
  assert got[0] is want[0] and got[1:] == want[1:]
  assert not any(u.dtype.scalar() is dtypes.index for u in got[0].toposort())

@pytest.mark.parametrize("make", [lambda: _t(64, 96).sum(axis=1), lambda: _t(2, 8, 12, 12).conv2d(_t(8, 8, 3, 3), padding=1),
                                  lambda: _t(16, 100).softmax(), lambda: _t(512, 1024) + 1], ids=["sum", "conv", "softmax", "add"])
def test_thread_ids_take_the_loops_from_the_lowering_context(make, monkeypatch):
  # lower_kernel hands thread_ids the loops LowerCtx found (no walk of the lowered kernel): the same loops as that walk finds,
  # but for REDUCE loops, which never become ids
  seen: list[tuple] = []
  orig = lowerer.thread_ids
  def spy(sink: UOp, global_max, threads: int = 0, ranges=None):
    seen.append((ranges, {u for u in sink.toposort() if u.op is Ops.RANGE}))
    return orig(sink, global_max, threads, ranges)
  monkeypatch.setattr(lowerer, "thread_ids", spy)
  assert _lowered(make(), monkeypatch)
  for given, walked in seen:
    assert given is not None
    assert {r for r in given if r.arg[1] is not AxisType.REDUCE} == {r for r in walked if r.arg[1] is not AxisType.REDUCE}
