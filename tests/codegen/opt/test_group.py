"""Workgroup axes: LOCAL becomes work-item ids and a workgroup size, GROUP splits a reduction across a workgroup through shared
memory and a barrier. Run on the PYTHON reference device, whose threads run in lockstep (so its barriers hold)."""
from __future__ import annotations
import numpy as np
import pytest
from core import Tensor
from core.engine.schedule_cache import ScheduleCache
from core.helpers import LRUCache
from core.ir.ops import Ops, AxisType
from core.device.registry import Device
from core.codegen.opt import Kernel, Opt, OptOps, KernelOptError
from core.codegen.program import get_program, program_uops, program_source

G, L, U, R = OptOps.GROUP, OptOps.LOCAL, OptOps.UPCAST, OptOps.UNROLL
rng = np.random.default_rng(7)

@pytest.fixture
def with_opts(monkeypatch):
  """Realize on PYTHON with `opts` (a function of the Kernel) instead of the heuristics; returns the ProgramSpecs built."""
  import core.codegen.opt as opt_mod, core.engine.run as run_mod, core.hcq.state as state_mod, core.engine.realize as realize_mod
  specs = []
  def use(pick):
    def optimize(ast, renderer):
      k = pick(Kernel(ast, renderer))
      return k.ast
    monkeypatch.setattr(opt_mod, "optimize", optimize)
    # programs built before (with other opts) are not reused: every cache from a graph to its program starts empty
    monkeypatch.setattr(run_mod, "_runners", {})
    monkeypatch.setattr(state_mod, "_compiled", {})
    monkeypatch.setattr(realize_mod, "schedules", ScheduleCache())
    import core.codegen.program as prog_mod
    monkeypatch.setattr(prog_mod, "_lifted_programs", LRUCache("lifted programs (test)", 512))
    real = prog_mod.get_program
    def record(*a, **kw):
      specs.append(spec := real(*a, **kw))
      return spec
    monkeypatch.setattr(prog_mod, "get_program", record)
    monkeypatch.setattr(run_mod, "get_program", record, raising=False)
    monkeypatch.setattr(state_mod, "get_program", record, raising=False)
    return specs
  return use

def _axis(k: Kernel, kind: AxisType) -> int: return k.types().index(kind)

def _apply(*opts):
  def pick(k: Kernel) -> Kernel:
    if not k.of_type(AxisType.REDUCE) and any(o[0] is G for o in opts): return k
    for op, kind, amt in opts: k = k.apply(Opt(op, _axis(k, kind), amt))
    return k
  return pick

@pytest.mark.parametrize("opts", [
  [(G, AxisType.REDUCE, 16)],
  [(G, AxisType.REDUCE, 512)],                                     # the whole reduce axis: one element per work-item
  [(G, AxisType.REDUCE, 8), (R, AxisType.REDUCE, 4)],              # each work-item's part unrolled
  [(G, AxisType.REDUCE, 16), (L, AxisType.LOOP, 2)],               # output rows as a second workgroup axis
  [(G, AxisType.REDUCE, 16), (U, AxisType.LOOP, 4)],               # four rows per work-item: four shared buffers
], ids=["group16", "group_all", "group_unroll", "group_local", "group_upcast"])
def test_group_reduce_gives_numpys_numbers(with_opts, opts):
  specs = with_opts(_apply(*opts))
  x = rng.standard_normal((8, 512)).astype(np.float32)
  np.testing.assert_allclose(Tensor(x, device="PYTHON").sum(1).numpy(), x.astype(np.float64).sum(1), rtol=1e-4, atol=1e-4)
  spec = next(s for s in specs if any(u.op is Ops.BARRIER for u in program_uops(s)))
  group = next(amt for op, _, amt in opts if op is G)
  assert group in spec.arg.local_size and any(u.op is Ops.DEFINE_LOCAL for u in program_uops(spec))
  # one work-item of each group stores the result: the output store is gated on its id
  out = [u for u in program_uops(spec) if u.op is Ops.STORE and u.src[0].src[0].op is Ops.PARAM]
  assert out and all(len(u.src[0].src) == 3 for u in out)

def test_group_max_and_full_reduction(with_opts):
  with_opts(_apply((G, AxisType.REDUCE, 64)))
  x = -np.abs(rng.standard_normal((4, 256)).astype(np.float32)) - 1   # all negative: a 0 identity would be the wrong answer
  np.testing.assert_array_equal(Tensor(x, device="PYTHON").max(1).numpy(), x.max(1))
  y = rng.standard_normal(4096).astype(np.float32)
  np.testing.assert_allclose(Tensor(y, device="PYTHON").sum().numpy(), y.astype(np.float64).sum(), rtol=1e-4, atol=1e-3)

def test_local_axis_becomes_the_workgroup(with_opts):
  specs = with_opts(lambda k: k.apply(Opt(L, _axis(k, AxisType.LOOP), 8)) if (k.sizes()[0] or 0) % 8 == 0 else k)
  x = rng.standard_normal((32,)).astype(np.float32)
  np.testing.assert_allclose((Tensor(x, device="PYTHON") * 2 + 1).numpy(), x * 2 + 1, rtol=1e-6)
  spec = specs[-1]
  assert spec.arg.local_size == (8, 1, 1) and spec.arg.global_size == (4, 1, 1)
  assert {u.arg for u in program_uops(spec) if u.op is Ops.SPECIAL} == {"gidx0", "lidx0"}

def _sum_kernel(shape=(8, 512)) -> Kernel:
  from core.schedule.kernelize import create_schedule
  items, _, _ = create_schedule([Tensor(rng.standard_normal(shape).astype(np.float32), device="PYTHON").realize().sum(1).uop])
  return Kernel(items[-1].ast, Device["PYTHON"].renderer)

def test_group_checks_what_it_is_given():
  k = _sum_kernel()
  red, loop = _axis(k, AxisType.REDUCE), _axis(k, AxisType.LOOP)
  with pytest.raises(KernelOptError, match="REDUCE axis"): k.apply(Opt(G, loop, 2))
  with pytest.raises(KernelOptError, match="work-items per workgroup"): k.apply(Opt(G, red, 512)).apply(Opt(L, loop, 4))
  # 256 work-items x 8 rows x 4 bytes = 8 KiB fits; x 32 more (an UNROLL would not count, an UPCAST does) would not with 512
  big = _sum_kernel((64, 1024)).apply(Opt(G, red, 1024))
  with pytest.raises(KernelOptError, match="shared memory"): big.apply(Opt(U, _axis(big, AxisType.LOOP), 32))
  # a renderer without shared memory (the CPU renderers) has no GROUP
  class NoShared: has_local, has_shared, local_max, shared_max = True, False, (1024, 1024, 64), 0
  with pytest.raises(KernelOptError, match="shared"): Kernel(k.ast, NoShared()).apply(Opt(G, red, 4))

def _run_python(ast, ins: list[np.ndarray], out_size: int) -> np.ndarray:
  from core.device.buffer import Buffer
  from core.ir.dtype import dtypes
  dev = Device["PYTHON"]
  spec = get_program(ast, dev.renderer, optimize=False)
  bufs = [Buffer("PYTHON", out_size, dtypes.float32).allocate()] + [Buffer("PYTHON", a.size, dtypes.float32).allocate() for a in ins]
  for b, a in zip(bufs[1:], ins): b.copyin(memoryview(a.tobytes()))
  dev.runtime(spec.arg.name, dev.compiler.compile_cached(program_source(spec)))(*[b._buf for b in bufs], global_size=spec.arg.global_size,
                                                                 local_size=spec.arg.local_size, wait=True)
  return bufs[0].numpy()

def test_group_is_refused_inside_another_reduction():
  # sum_j (x[i, j] - sum_k x[i, k])^2 in one kernel (the scheduler splits it; a hand-built AST does not): the inner sum runs
  # once per step of the outer one, so a shared buffer of its would be rewritten while other work-items still read it
  from core.ir.ops import UOp
  from core.ir.dtype import dtypes
  i, j, kk = UOp.range(16, 0, AxisType.LOOP), UOp.range(64, 1, AxisType.REDUCE), UOp.range(64, 2, AxisType.REDUCE)
  out, x = UOp.param(0, dtypes.float32.ptr(16)), UOp.param(1, dtypes.float32.ptr(1024))
  inner = UOp(Ops.REDUCE, dtypes.float32, (x.index(i * 64 + kk).load(), kk), Ops.ADD)
  d = x.index(i * 64 + j).load() - inner
  ast = UOp(Ops.SINK, dtypes.void, (out.index(i).store(UOp(Ops.REDUCE, dtypes.float32, (d * d, j), Ops.ADD)).end(i),), "nested")
  k = Kernel(ast, Device["PYTHON"].renderer)
  with pytest.raises(KernelOptError, match="inside another reduction"): k.apply(Opt(G, k.axes.index(kk), 4))
  # the outer reduction may be grouped: its barrier runs once per work-item
  xs = rng.standard_normal((16, 64)).astype(np.float32)
  got = _run_python(k.apply(Opt(G, k.axes.index(j), 16)).ast, [xs], 16)
  want = ((xs.astype(np.float64) - xs.sum(1, keepdims=True)) ** 2).sum(1)
  np.testing.assert_allclose(got, want, rtol=1e-4)

def test_program_spec_carries_the_workgroup_size():
  k = _sum_kernel()
  k = k.apply(Opt(G, _axis(k, AxisType.REDUCE), 32)).apply(Opt(L, _axis(k, AxisType.LOOP), 2))
  spec = get_program(k.ast, Device["PYTHON"].renderer, optimize=False)
  assert spec.arg.local_size == (32, 2, 1) and spec.arg.global_size == (4, 1, 1)
  # every work-item's loads count: the kernel reads its 8x512 floats once
  assert spec.arg.estimates["mem"] >= 8 * 512 * 4

def test_heuristics_share_long_reductions_and_split_outputs_into_workgroups():
  from core.codegen.opt.heuristic import hand_coded
  ops = lambda k: [(o.op, o.amt) for o in hand_coded(k).applied]
  # few outputs, a long reduction: a group of 64 work-items shares each row's sum
  assert (G, 64) in ops(_sum_kernel((8, 2048)))
  # many outputs: one work-item per output keeps the GPU busy without a shared buffer
  assert not any(op is G for op, _ in ops(_sum_kernel((8192, 256))))
  # a short reduction is not worth a barrier
  assert not any(op is G for op, _ in ops(_sum_kernel((8, 128))))
  # every kernel gets workgroups along its contiguous output axis
  assert (L, 32) in ops(_sum_kernel((8192, 256)))
