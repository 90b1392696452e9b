"""A row kernel's reduction input that its output loop recomputes (softmax's exp) is stashed during the reduction (in a per-thread
row where it fits Renderer.scratch_bytes, else in the output row) and read back (core.codegen.stash): one exp per element. Values
from numpy; counts from the lowered kernel."""
import copy
import numpy as np
import pytest
from core import Tensor, Device
from core.ir.ops import AxisType, Ops, UOp
from core.schedule.kernelize import create_schedule
from core.codegen.program import get_program, program_uops
from core.codegen.stash import STASH_ARG

def _lowered(t: Tensor) -> list:
  (item,) = [it for it in create_schedule([t.uop])[0] if it.ast.op is Ops.SINK]
  return list(program_uops(get_program(item.ast, Device[Device.DEFAULT].renderer)))

def _reduce_loops(uops: list) -> int:
  return sum(1 for u in uops if u.op is Ops.RANGE and u.arg[-1] is AxisType.REDUCE)

def np_softmax(x: np.ndarray) -> np.ndarray:
  e = np.exp(x.astype(np.float64) - x.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)

@pytest.mark.parametrize("shape", [(64, 1000), (33, 96), (5, 7)])
def test_softmax_stores_exp_once_and_matches_numpy(shape):
  x = np.random.default_rng(0).standard_normal(shape).astype(np.float32) * 3
  t = Tensor(x).softmax(-1)
  uops = _lowered(t)
  stashes = [u for u in uops if u.op is Ops.STORE and u.arg == STASH_ARG]
  # a row the optimizer holds in registers (7 columns padded to one 8-lane vector) has no reduction loop: its exps are the very
  # nodes the output reads, computed once with nothing to stash
  assert len(stashes) == (1 if _reduce_loops(uops) else 0), "softmax's exp should be stored in the reduction loop"
  np.testing.assert_allclose(t.numpy(), np_softmax(x), rtol=1e-5, atol=1e-7)

def test_softmax_with_special_values():
  x = np.array([[0.0, -np.inf, 1.0, 2.0] * 8, [np.inf, 0.0, 1.0, 2.0] * 8, [-1e30, 5.0, 5.0, -1e30] * 8], np.float32)
  got = Tensor(x).softmax(-1).numpy()
  with np.errstate(invalid="ignore"): want = np_softmax(x)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)

def test_no_stash_without_an_expensive_shared_value():
  # layernorm's reductions read x - mean: cheap, recomputed; log_softmax's output has no exp of its own
  x = np.random.default_rng(1).standard_normal((16, 256)).astype(np.float32)
  for t in (Tensor(x).layernorm(-1), Tensor(x).log_softmax(-1)):
    assert not any(u.op is Ops.STORE and u.arg == STASH_ARG for u in _lowered(t))
  y = x.astype(np.float64) - x.max(-1, keepdims=True)
  np.testing.assert_allclose(Tensor(x).log_softmax(-1).numpy(), y - np.log(np.exp(y).sum(-1, keepdims=True)), rtol=1e-5, atol=1e-5)

def test_stashed_row_kernel_feeds_a_later_kernel():
  x = np.random.default_rng(2).standard_normal((48, 200)).astype(np.float32)
  got = (Tensor(x).softmax(-1) * 2 + 1).sum(-1).numpy()
  np.testing.assert_allclose(got, (np_softmax(x) * 2 + 1).sum(-1), rtol=1e-5)

def test_row_max_takes_several_vectors_per_step():
  # a row max over 1000 floats is a chain of dependent max steps: each step folds several vectors (heuristic ROW_RED_VECTORS,
  # a tree of maxes off the chain), where the exp's sum keeps the output loop's width so the stash still matches it
  ren = Device[Device.DEFAULT].renderer
  if ren.has_local or not ren.supports_float4: pytest.skip("a CPU renderer's heuristic")
  x = np.random.default_rng(3).standard_normal((64, 1000)).astype(np.float32)
  t = Tensor(x).softmax(-1)
  ren = copy.copy(ren)
  ren.extra_matcher = None   # the optimizer's max: a renderer's rules may render it otherwise (plugin_cpu: vmaxps + vfixupimmps)
  (item,) = [it for it in create_schedule([t.uop])[0] if it.ast.op is Ops.SINK]
  uops = list(program_uops(get_program(item.ast, ren)))
  upd = [u for u in uops if u.op is Ops.STORE and u.src[0].op is Ops.INDEX and u.src[0].src[0].op is Ops.DEFINE_REG and u.src[1].op is Ops.MAX]
  assert len(upd) == (2 if ren.max_ahead else 1)   # the first row's max and the next's where it runs ahead (stash.max_ahead)
  loads = [u for u in upd[0].toposort() if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX and u.src[0].src[0].op is Ops.PARAM]
  assert len(loads) >= 2 and all(ld.dtype.count > 1 for ld in loads)
  np.testing.assert_allclose(t.numpy(), np_softmax(x), rtol=1e-5, atol=1e-7)

def _stash_and_run(t: Tensor, x: np.ndarray, scratch_bytes: int) -> tuple[Ops, np.ndarray]:
  """What t's kernel, built with `scratch_bytes` of per-thread stash, stashes into (DEFINE_REG or PARAM; NOOP: no stash), and
  its output for the input x."""
  from core.engine.run import CompiledRunner
  from core.device.buffer import Buffer
  from core.ir.dtype import dtypes
  (ast,) = [it.ast for it in create_schedule([t.uop])[0] if it.ast.op is Ops.SINK]
  dev = Device[Device.DEFAULT]
  ren = copy.copy(dev.renderer)
  ren.scratch_bytes = scratch_bytes
  prog = get_program(ast, ren)
  to = next((u.src[0].src[0] for u in program_uops(prog) if u.op is Ops.STORE and u.arg == STASH_ARG), UOp(Ops.NOOP))
  while to.op is Ops.AFTER: to = to.src[0]
  out, inp = Buffer(dev.device, x.size, dtypes.float32).allocate(), Buffer(dev.device, x.size, dtypes.float32).allocate()
  inp.copyin(memoryview(np.ascontiguousarray(x)))
  CompiledRunner(prog, dev)([out, inp], wait=True)
  got = np.empty_like(x)
  out.copyout(memoryview(got))
  return to.op, got

@pytest.mark.parametrize("shape", [(64, 1000), (16, 1001), (33, 96), (5, 7), (64, 4096)])
def test_softmax_stashes_in_a_scratch_row_that_fits(shape):
  # a row of exps in the budget: a per-thread array; over it (one byte short of the unpadded row) or none: the output row
  x = np.random.default_rng(5).standard_normal(shape).astype(np.float32) * 3
  t = Tensor(np.zeros(shape, np.float32)).realize().softmax(-1)
  for budget, where in ((1 << 20, Ops.DEFINE_REG), (shape[1] * 4 - 1, Ops.PARAM), (0, Ops.PARAM)):
    to, got = _stash_and_run(t, x, budget)
    assert to is (where if _reduce_loops(_lowered(t)) else Ops.NOOP), (budget, to)   # a row in registers: no stash (above)
    np.testing.assert_allclose(got, np_softmax(x), rtol=1e-5, atol=1e-7)

@pytest.mark.parametrize("shape", [(64, 1000), (16, 1001), (5, 7)])
def test_log_softmax_keeps_no_stash_with_a_budget(shape):
  x = np.random.default_rng(6).standard_normal(shape).astype(np.float32) * 3
  to, got = _stash_and_run(Tensor(np.zeros(shape, np.float32)).realize().log_softmax(-1), x, 1 << 20)
  y = x.astype(np.float64) - x.max(-1, keepdims=True)
  assert to is Ops.NOOP
  np.testing.assert_allclose(got, y - np.log(np.exp(y).sum(-1, keepdims=True)), rtol=1e-5, atol=1e-5)
