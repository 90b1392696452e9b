"""Per-stage validity rules and type_verify."""
from __future__ import annotations
import pytest
from core.helpers import Context, SPEC
from core.ir.dtype import dtypes
from core.ir.ops import UOp, Ops, AxisType, Variable
from core.ir.spec import SpecError, kernel_spec, program_spec, tensor_spec, type_verify

def buf(n: int = 12, dtype=dtypes.float32) -> UOp: return UOp.new_buffer("CPU", n, dtype)

def test_valid_tensor_graph_passes():
  a, b = buf().reshape((3, 4)), buf().reshape((3, 4))
  out = ((a + b) * a).permute((1, 0)).pad(((0, 1), (0, 0))).shrink(((0, 4), (1, 3))).r(Ops.ADD, (1,)).contiguous()
  type_verify(out.sink(), tensor_spec)
  type_verify((buf(4).reshape((1, 4)).expand((3, 4)) < UOp.const(dtypes.float32, 1.0, "CPU", (3, 4))).sink(), tensor_spec)

@pytest.mark.parametrize("bad", [
  lambda: UOp(Ops.RESHAPE, dtypes.float32, (buf(),), (5, 2)),               # 12 elements can't become 10
  lambda: UOp(Ops.PERMUTE, dtypes.float32, (buf().reshape((3, 4)),), (0, 0)),
  lambda: UOp(Ops.EXPAND, dtypes.float32, (buf().reshape((3, 4)),), (3, 8)),  # only size-1 dims grow
  lambda: UOp(Ops.SHRINK, dtypes.float32, (buf(),), ((2, 20),)),
  lambda: UOp(Ops.PAD, dtypes.float32, (buf(),), ((-1, 0),)),
  lambda: UOp(Ops.ADD, dtypes.float32, (buf(), buf(12, dtypes.int32))),      # source dtypes differ
  lambda: UOp(Ops.ADD, dtypes.float32, (buf(), buf(6))),                     # shapes differ
  lambda: UOp(Ops.CMPLT, dtypes.float32, (buf(), buf())),                    # comparisons give bool
  lambda: UOp(Ops.WHERE, dtypes.float32, (buf(), buf(), buf())),             # the condition must be bool
])
def test_invalid_tensor_graphs_raise_naming_the_node(bad):
  u = bad()
  with pytest.raises(SpecError, match=u.op.name):
    type_verify(u.sink(), tensor_spec)

def _kernel() -> UOp:
  out, inp = UOp.param(0, dtypes.float32.ptr(16)), UOp.param(1, dtypes.float32.ptr(16))
  r = UOp.range(16, 0, AxisType.GLOBAL)
  val = inp.index(r, valid=r < 15).load() * 2.0
  return out.index(r).store(val).end(r).sink()

def test_valid_kernel_passes_and_bad_kernels_fail():
  type_verify(_kernel(), kernel_spec)
  p = UOp.param(0, dtypes.float32.ptr(16))
  f = UOp.const(dtypes.float32, 1.0)
  with pytest.raises(SpecError, match="INDEX"): type_verify(UOp(Ops.INDEX, dtypes.float32, (f, UOp.const(dtypes.index, 0))).sink(), kernel_spec)
  with pytest.raises(SpecError, match="INDEX"): type_verify(p.index(UOp.const(dtypes.float32, 0.0)).sink(), kernel_spec)
  with pytest.raises(SpecError, match="LOAD"): type_verify(UOp(Ops.LOAD, dtypes.float32, (f,)).sink(), kernel_spec)
  with pytest.raises(SpecError, match="STORE"): type_verify(UOp(Ops.STORE, dtypes.void, (f, f)).sink(), kernel_spec)
  with pytest.raises(SpecError, match="RANGE"): type_verify(UOp(Ops.RANGE, dtypes.index, (f,), (0, AxisType.LOOP)).sink(), kernel_spec)
  with pytest.raises(SpecError, match="IDIV"): type_verify((f // f).sink(), kernel_spec)
  # a tensor-level op has no place in a kernel
  with pytest.raises(SpecError, match="no rule"): type_verify(buf().reshape((3, 4)).sink(), kernel_spec)

def test_linearized_list_is_checked_in_order():
  uops = list(_kernel().toposort())
  type_verify(uops, kernel_spec)
  bad = UOp(Ops.CMPLT, dtypes.int32, (Variable("a", 0, 3), Variable("a", 0, 3)))
  with pytest.raises(SpecError, match=r"node 1 CMPLT"): type_verify(list(bad.toposort()), kernel_spec)

def test_program_spec():
  k = _kernel()
  dev = UOp(Ops.DEVICE, arg="CPU")
  lin = UOp(Ops.LINEAR, src=tuple(k.toposort()))
  src, binary = UOp(Ops.SOURCE, arg="void k(){}"), UOp(Ops.BINARY, arg=b"\x7fELF")
  for srcs in [(k, dev, lin, src), (k, dev, lin, src, binary)]:   # rendered, then compiled
    type_verify(UOp(Ops.PROGRAM, src=srcs), program_spec)
  for srcs in [(dev, k), (k,), (k, dev), (k, dev, lin), (k, dev, src), (k, dev, lin, binary)]:
    with pytest.raises(SpecError, match="PROGRAM"): type_verify(UOp(Ops.PROGRAM, src=srcs), program_spec)
  with pytest.raises(SpecError, match="SOURCE"): type_verify(UOp(Ops.PROGRAM, src=(k, dev, lin, UOp(Ops.SOURCE, arg=3))), program_spec)

def test_spec_flag_is_a_context_var():
  before = SPEC.value
  with Context(SPEC=1 - int(bool(before))): assert SPEC.value == 1 - int(bool(before))
  assert SPEC.value == before  # restored after the block

def test_queue_spec_tells_the_queue_ir_writes_apart():
  from core.hcq import queue_ir as q
  from core.ir.spec import queue_spec
  sig, kargs = q.queue_buffer("timeline_signal", "COMPUTE:0", "CPU"), q.placeholder("kernargs", "CPU", 16)
  tl = q.timeline_value("COMPUTE:0", "CPU", 1)
  good = [q.signal(sig, tl), q.wait(sig, q.u64(3)), q.host_patch(kargs, 8, q.getaddr(sig, device="CPU")), q.ring_patch(16, tl), q.advance("COMPUTE:0", "CPU", tl),
          q.timestamp(kargs), q.ins(b"\0" * 8, [(0, q.getaddr(kargs, device="CPU"))]),
          q.launch(q.prepared_program("CPU", q.placeholder("program", "CPU", 8), "data"), kargs, (4, 1, 1), (1, 1, 1))]
  type_verify(UOp(Ops.LINEAR, src=tuple(good)), queue_spec)
  bad = [UOp(Ops.SIGNAL, src=(sig, UOp.const(dtypes.int32, 1))),                 # a signal value is a uint64
         UOp(Ops.HOST_PATCH, src=(kargs, q.u64(1)), arg=-8),                      # a patch lands at a byte offset >= 0
         UOp(Ops.RING_PATCH, src=(tl,), arg=("ring", 8)),                         # the old STORE-style arg
         UOp(Ops.STORE, src=(sig, tl)),                                           # an untyped write is no queue IR
         UOp(Ops.GETADDR, dtypes.uint64, (sig,))]                                 # an address names the device that reads it
  for b in bad:
    with pytest.raises(SpecError, match=b.op.name): type_verify(UOp(Ops.LINEAR, src=(b,)), queue_spec)
