"""A kernel's codegen runs with the cyclic garbage collector off (helpers.gc_paused: its many short-lived UOps set off full
collections that walk every object the process holds) and leaves the collector as it found it. lower_index_dtype gives index
math one integer width, vectors of indices included. Values from numpy, dtypes exact."""
import gc
import numpy as np
import pytest
from core import Tensor, Device
from core.ir.dtype import dtypes
from core.ir.ops import Ops, UOp
from core.schedule.kernelize import create_schedule
import core.codegen.program as program
from core.codegen.lowerer import lower_index_dtype
from core.helpers import gc_paused

def _kernel_ast(t: Tensor) -> UOp:
  (item,) = [it for it in create_schedule([t.uop])[0] if it.ast.op is Ops.SINK]
  return item.ast

@pytest.mark.parametrize("enabled", [True, False])
def test_codegen_runs_without_the_collector_and_restores_it(gc_state_at, enabled):
  seen = gc_state_at(program, "_get_program")
  x = np.arange(37 * 43, dtype=np.float32).reshape(37, 43)
  t = (Tensor(x) * 3).sum(1)
  ast = _kernel_ast(t)
  was = gc.isenabled()
  try:
    if not enabled: gc.disable()
    program._program(ast, Device[Device.DEFAULT].renderer, True)
    assert gc.isenabled() is enabled
  finally:
    if was: gc.enable()
  assert seen == [False]
  np.testing.assert_allclose(t.numpy(), (x * 3).sum(1), rtol=1e-6)

def test_gc_paused_restores_the_collector_after_an_error():
  assert gc.isenabled()
  with pytest.raises(ValueError):
    with gc_paused():
      assert not gc.isenabled()
      raise ValueError
  assert gc.isenabled()

@pytest.mark.parametrize("big, want", [(False, dtypes.int32), (True, dtypes.int64)])
def test_lower_index_dtype_gives_every_index_one_width(big, want):
  r = UOp.range(2**20 if big else 64, 0)
  i = r * (2**12 if big else 3) + 5
  lanes = UOp.vectorize(i, i + 1)
  buf = UOp(Ops.PARAM, dtypes.float32.ptr(), (), 0)
  sink = UOp.sink(buf.index(i).store(UOp.const(dtypes.float32, 1.0)).end(r), lanes.cast(dtypes.float32.vec(2)))
  out = lower_index_dtype(sink)
  nodes = list(out.toposort())
  assert not any(u.dtype.scalar() == dtypes.index for u in nodes)
  assert {u.dtype for u in nodes if u.op in (Ops.RANGE, Ops.ADD, Ops.MUL)} == {want}
  assert [u.dtype for u in nodes if u.op is Ops.VECTORIZE] == [want.vec(2)]
  assert [u.dtype for u in nodes if u.op is Ops.CAST] == [dtypes.float32.vec(2)]
