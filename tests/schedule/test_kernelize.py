"""Where the scheduler cuts kernels, and what the kernels look like (no device needed)."""
from core.ir.dtype import dtypes
from core.ir.ops import UOp, Ops
from core.schedule.kernelize import create_schedule
from core.schedule.memory import plan_memory
from core.codegen.lowerer import lower_kernel
from core.codegen.linearize import linearize, finalize

def buf(n, shape=None, dtype=dtypes.float32, device="CPU"):
  u = UOp.new_buffer(device, n, dtype)
  return u.reshape(shape) if shape else u

def kernels(items): return [it for it in items if it.ast.op is Ops.SINK]

def test_elementwise_chain_is_one_kernel():
  a, b = buf(12, (3, 4)), buf(12, (3, 4))
  out = ((a + b) * a - 1.0).alu(Ops.EXP2)
  items, res, _ = create_schedule([out])
  assert len(items) == 1 and len(items[0].bufs) == 3
  assert res[out].op is Ops.RESHAPE and res[out].src[0].op is Ops.BUFFER

def test_reduce_fuses_with_following_elementwise():
  a = buf(12, (3, 4))
  out = a.r(Ops.ADD, (1,)) * 2.0 + 1.0
  items, _, _ = create_schedule([out])
  assert len(items) == 1
  assert any(u.op is Ops.REDUCE for u in items[0].ast.toposort())

def test_broadcast_reduce_is_realized_once():
  # softmax-like: max over a row, expanded back over the row; a short row stays in one kernel (tests/schedule/test_row_fusion.py),
  # a row over ROW_FUSE_BYTES gets its maxima realized once
  from core.schedule.realize_points import ROW_FUSE_BYTES
  a = buf(12, (3, 4))
  assert len(create_schedule([a - a.r(Ops.MAX, (1,)).expand((3, 4))])[0]) == 1
  n = ROW_FUSE_BYTES // 4 + 1
  a = buf(3 * n, (3, n))
  m = a.r(Ops.MAX, (1,))
  out = a - m.expand((3, n))
  items, _, _ = create_schedule([out])
  assert len(items) == 2
  assert items[0].bufs[0].arg == 3   # the row maxima live in their own buffer

def test_matmul_is_one_kernel():
  a, b = buf(6, (2, 3)), buf(12, (3, 4))
  out = (a.reshape((2, 1, 3)).expand((2, 4, 3)) * b.permute((1, 0)).reshape((1, 4, 3)).expand((2, 4, 3))).r(Ops.ADD, (2,))
  items, _, _ = create_schedule([out.reshape((2, 4))])
  assert len(items) == 1 and len(items[0].bufs) == 3

def test_copy_between_devices_is_a_copy_item():
  a = buf(4, (4,))
  out = (a + 1.0).copy_to_device("CPU:1")
  items, res, _ = create_schedule([out])
  assert [it.ast.op for it in items] == [Ops.SINK, Ops.COPY]
  assert res[out].base.src[1].arg == "CPU:1"

def test_assign_in_place_when_elementwise():
  a = buf(4, (4,))
  out = a.assign(a * 2.0)
  items, res, _ = create_schedule([out])
  assert len(items) == 1 and items[0].bufs == (a.base,)
  assert res[out] is a

def test_assign_reading_another_view_uses_a_temporary():
  a = buf(4, (4,))
  out = a.assign(a.flip((True,)) + 1.0)
  items, _, _ = create_schedule([out])
  assert len(items) == 2 and items[1].bufs[0] is a.base

def test_memory_planner_reuses_dead_temporaries():
  a = buf(16, (16,))
  t1 = (a + 1.0).contiguous()
  t2 = (t1 * 2.0).contiguous()
  t3 = (t2 + 3.0).contiguous()
  out = t3 * 1.0
  items, res, _ = create_schedule([out])
  assert len(items) == 4
  keep = {a.base, res[out].base}
  planned = plan_memory(items, keep)
  outs = [it.bufs[0] for it in planned]
  assert outs[0] is outs[2], "t1 is dead once t2 is computed, so t3 can take its memory"
  assert outs[1] is not outs[0] and outs[3] is res[out].base

def test_pad_gates_loads():
  a = buf(4, (4,))
  out = a.pad(((2, 1),)) + 1.0
  items, _, _ = create_schedule([out])
  loads = [u for u in items[0].ast.toposort() if u.op is Ops.LOAD]
  assert len(loads) == 1 and len(loads[0].src[0].src) == 3, "the load of a padded input carries a validity gate"

def test_linearized_reduce_keeps_accumulator_reads_in_their_loops():
  a = buf(12, (3, 4))
  items, _, _ = create_schedule([a.r(Ops.ADD, (1,))])
  sink, _, _ = lower_kernel(items[0].ast, None)
  uops = finalize(linearize(sink))
  ops = [u.op for u in uops]
  r_outer, r_inner = [i for i, o in enumerate(ops) if o is Ops.RANGE]
  ends = [i for i, o in enumerate(ops) if o is Ops.END]
  loads = [i for i, u in enumerate(uops) if u.op is Ops.LOAD and u.src[0].src[0].op is Ops.DEFINE_REG]
  assert r_outer < r_inner < ends[0] < ends[1]
  assert r_inner < loads[0] < ends[0] < loads[1] < ends[1], "one read inside the reduce loop, one after it"
  assert len({id(u) for u in uops}) == len(uops), "no node appears twice in the program"

def test_spec_checks_graphs_when_enabled():
  import pytest
  from core.helpers import Context
  from core.ir.spec import SpecError
  a, b = buf(4, (4,)), buf(4, (4,), dtype=dtypes.int32)
  bad = UOp(Ops.ADD, dtypes.float32, (a, b))   # mixed dtypes: the Tensor layer would have cast first
  with Context(SPEC=1):
    with pytest.raises(SpecError): create_schedule([bad])

def test_reads_of_old_value_run_before_the_assign():
  # w1 is updated and, in the same schedule, another value reads w1's old contents
  w1, w2 = buf(4, (4,)), buf(4, (4,))
  upd1 = w1.assign(w1 * 0.5)
  upd2 = w2.assign(w2 + w1 * 2.0)      # built from the old w1
  items, _, _ = create_schedule([upd1, upd2])
  writes = [it.bufs[0] for it in items]
  assert writes.index(w1.base) > writes.index(w2.base), "w1 is overwritten only after w2's update has read it"

def test_assigns_are_ordered_by_old_value_reads_and_needed_results():
  # c reads b's old value and b reads a's old value: c's update, then b's, then a's (the order given is the reverse of that)
  a, b, c = (buf(4, (4,)) for _ in range(3))
  upd_a, upd_b, upd_c = a.assign(a * 0.5), b.assign(b + a * 2.0), c.assign(c + b * 3.0)
  items, _, _ = create_schedule([upd_a, upd_b, upd_c])
  assert [it.bufs[0] for it in items] == [c.base, b.base, a.base]
  # d's update needs a's new value (its result, not its buffer): after a's, though given first
  d = buf(4, (4,))
  items, _, _ = create_schedule([d.assign(d + upd_a), upd_a])
  assert [it.bufs[0] for it in items] == [a.base, d.base]

def test_swapping_assigns_save_their_values_first():
  # a = b and b = a: each reads the other's old value, a cycle no order satisfies; both values go to temporaries first
  a, b = buf(4, (4,)), buf(4, (4,))
  items, _, _ = create_schedule([a.assign(b + 1.0), b.assign(a + 1.0)])
  (t0, rb), (t1, ra), (wa, ta), (wb, tb) = (it.bufs for it in items)
  assert (rb, ra, wa, wb) == (b.base, a.base, a.base, b.base) and (ta, tb) == (t0, t1) and not {t0, t1} & {a.base, b.base}

def test_reduce_two_kernels_need_is_computed_once():
  # h = x @ w + b feeds relu (forward) and relu's mask (backward, another kernel): the matmul gets its own buffer instead
  # of being recomputed inside both kernels
  x, w, b, g = buf(6, (2, 3)), buf(12, (3, 4)), buf(4, (4,)), buf(8, (2, 4))
  mm = (x.reshape((2, 1, 3)).expand((2, 4, 3)) * w.permute((1, 0)).reshape((1, 4, 3)).expand((2, 4, 3))).r(Ops.ADD, (2,))
  h = mm.reshape((2, 4)) + b.reshape((1, 4)).expand((2, 4))
  relu = (h > 0.0).where(h, 0.0)
  mask_grad = ((h > 0.0).where(g, 0.0)).r(Ops.ADD, (0,))   # a reduction of its own: a second kernel
  items, _, _ = create_schedule([relu, mask_grad])
  ks = kernels(items)
  assert sum(any(u.op is Ops.REDUCE and u.src[0].op is Ops.MUL for u in it.ast.toposort()) for it in ks) == 1
  assert len(ks) == 3

# *** the index pass runs once per kernel structure ***

def test_same_structure_reuses_the_indexed_kernel_with_its_own_buffers(monkeypatch):
  import core.schedule.kernelize as kz
  passes = []
  def counting(sink, pm, ctx=None, *args, name=None, **kw):
    if name == "index": passes.append(sink)
    return real(sink, pm, ctx, *args, name=name, **kw)
  real = kz.graph_rewrite
  monkeypatch.setattr(kz, "graph_rewrite", counting)
  a, b, c, d = (buf(12, (3, 4)) for _ in range(4))
  (i1,), _, _ = create_schedule([(a + b) * a - 3.5])
  (i2,), _, _ = create_schedule([(c + d) * c - 3.5])
  assert len(passes) == 1 and i1.ast is i2.ast   # the second kernel skipped the index pass
  assert i1.bufs[1:] == (a.base, b.base) and i2.bufs[1:] == (c.base, d.base)
  assert i1.bufs[0] is not i2.bufs[0] and all(u.op is not Ops.BUFFER for u in i1.ast.toposort())

def test_buffer_identity_is_part_of_the_structure():
  # x + x reads one buffer, x + y two: the same ops, different kernels
  x, y = buf(12, (3, 4)), buf(12, (3, 4))
  (same,), _, _ = create_schedule([x + x])
  (two,), _, _ = create_schedule([x + y])
  assert len(same.bufs) == 2 and len(two.bufs) == 3 and same.ast is not two.ast

def test_cached_kernel_runs_on_the_new_buffers():
  import numpy as np
  from core.tensor import Tensor
  rng = np.random.default_rng(0)
  xs = [rng.standard_normal((5, 7)).astype(np.float32) for _ in range(4)]
  a, b, c, d = (Tensor(x) for x in xs)
  r1 = (a * b + a).sum(1).numpy()
  r2 = (c * d + c).sum(1).numpy()
  np.testing.assert_allclose(r1, (xs[0] * xs[1] + xs[0]).sum(1), rtol=1e-5)
  np.testing.assert_allclose(r2, (xs[2] * xs[3] + xs[2]).sum(1), rtol=1e-5)
