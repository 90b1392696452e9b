"""The CPU plugin's HCQ hooks: pm_prep_program, pm_lower, pm_bufferize, the interfaces, and the core pipeline end to end."""
import ctypes, struct
import time
import numpy as np
import pytest
from core.codegen.program import ProgramSpec, compile_program
from core.device.plugins import get_plugins
from core.device.hcq import EncodeCtx
from core.device.target import Target
from core.ir.dtype import dtypes
from core.ir.ops import UOp, Ops
from core.ir.pattern import graph_rewrite
from core.hcq import queue_ir as Q
from plugin_cpu import iface_hcq as H, queue as CQ
from plugin_cpu.compiler import CCompiler
from plugin_cpu.runtime import make_device

SRC = "void scale(float* restrict out, const float* restrict a, int k, int gidx0) { out[gidx0] = a[gidx0] * k; }\n"

@pytest.fixture
def dev():
  d = H.CPUHCQ("CPU", ring_size=4096)
  yield d
  d.close()

def compiled() -> UOp:
  """The compiled PROGRAM of SRC as codegen would make it: two buffers and one variable."""
  params = (UOp.param(0, dtypes.float32.ptr(8)), UOp.param(1, dtypes.float32.ptr(8)))
  k = UOp(Ops.DEFINE_VAR, dtypes.int32, arg=("k", 0, 100))
  p = UOp(Ops.PROGRAM, src=(UOp(Ops.SINK, arg="scale"), UOp(Ops.DEVICE, arg="CPU"), UOp(Ops.LINEAR, src=params + (k,)), UOp(Ops.SOURCE, arg=SRC)),
          arg=ProgramSpec("scale", (8, 1, 1), (1, 1, 1), (k,)))
  return compile_program(p, CCompiler())

def prepared(dev) -> UOp: return graph_rewrite(compiled(), CQ.pm_prep_program, dev, name="prep")

def test_the_plugin_manager_asks_the_cpu_plugin_for_its_devices_rules():
  for d in ("CPU", "CPU:1"):
    pm = get_plugins()
    assert pm.pm_prep_program(d) is CQ.pm_prep_program and pm.pm_lower(d) is CQ.pm_lower and pm.pm_bufferize(d) is CQ.pm_bufferize

def test_interfaces_hcq_by_default_direct_on_request():
  assert get_plugins().spec("CPU").interfaces == ("HCQ", "DIRECT")
  d = make_device("CPU", Target(device="CPU"))
  assert isinstance(d.hcq, H.CPUHCQ) and d.hcq.queues == ("COMPUTE:0", "COPY:0") and d.hcq.ring_size("COPY:0") == 1 << 20
  assert make_device("CPU", Target(interface="DIRECT", device="CPU")).hcq is None
  with pytest.raises(ValueError, match="no interface 'KFD'"): make_device("CPU", Target(interface="KFD", device="CPU"))
  with pytest.raises(ValueError, match="no queue 'COMPUTE:1'"): d.hcq.ring_size("COMPUTE:1")
  # what another device's queue reads when it waits on this one: the queue's own signal buffer
  assert d.hcq.timeline_signal("COPY:0") is d.hcq.queue("COPY:0").buffers["timeline_signal"]

def test_prep_program_loads_the_kernel_and_lays_out_one_slot_per_argument(dev):
  p = prepared(dev)
  data = p.arg
  assert isinstance(data, CQ.CPUProgramData) and isinstance(data, Q.ProgramData)
  assert (data.name, data.nargs, data.kernarg_size, data.kernarg_align, data.arg_offsets) == ("scale", 3, 24, 8, (0, 8, 16))
  assert data.fn == ctypes.cast(data.program.fxn, ctypes.c_void_p).value != 0
  assert p.src[1].op is Ops.BINARY and p.src[1].arg == struct.pack("<Q", data.fn)
  assert prepared(dev).arg.program is data.program   # one library per (name, bytes)

def test_lower_each_command_to_packets(dev):
  data = prepared(dev).arg
  prog = Q.prepared_program("CPU", Q.placeholder("program", "CPU", 8), data)
  kargs, a, b = Q.placeholder("kernargs", "CPU", 24), UOp.new_buffer("CPU", 16, dtypes.float32), UOp.new_buffer("CPU", 16, dtypes.float32)
  sig = Q.queue_buffer("timeline_signal", "COMPUTE:0", "CPU")
  tv = Q.timeline_value("COMPUTE:0", "CPU", 3)
  cmds = [Q.launch(prog, kargs, (8, 1, 1), (1, 1, 1)), Q.copy(a, b, 64), Q.wait(sig, Q.u64(7)), Q.wait(sig, tv), Q.signal(sig, tv),
          Q.signal(sig, Q.u64(2**63)), Q.barrier(), Q.timestamp(a)]
  out = [graph_rewrite(c, CQ.pm_lower, EncodeCtx(dev, "CPU", "COMPUTE:0"), bottom_up=True, name="lower") for c in cmds]
  assert all(o.op is Ops.INS for o in out)
  assert [CQ.decode(o.arg[0]) for o in out] == [[("LAUNCH", (3, data.fn, 0, 8))], [("COPY", (0, 0, 64))], [("WAIT", (0, 7))], [("WAIT", (0, 0))],
                                               [("SIGNAL", (0, 0))], [("SIGNAL", (0, 2**63))], [("BARRIER", ())], [("TIMESTAMP", (0,))]]
  assert [o.arg[1] for o in out] == [(16,), (8, 16), (8,), (8, 16), (8, 16), (8,), (), (8,)]
  assert out[0].src == (Q.getaddr(kargs),) and out[1].src == (Q.getaddr(a), Q.getaddr(b)) and out[3].src == (Q.getaddr(sig), tv)
  assert all(v.dtype == dtypes.uint64 for o in out for v in o.src)

def test_lower_rejects_a_multi_axis_launch(dev):
  prog = Q.prepared_program("CPU", Q.placeholder("program", "CPU", 8), prepared(dev).arg)
  with pytest.raises(RuntimeError, match="first axis only"):
    graph_rewrite(Q.launch(prog, Q.placeholder("kernargs", "CPU", 24), (4, 2, 1), (1, 1, 1)), CQ.pm_lower, EncodeCtx(dev, "CPU", "COMPUTE:0"), name="lower")

def test_bufferize_gives_each_queue_buffer_once_and_fresh_packed_buffers(dev):
  ring, bell = Q.queue_buffer("ring", "COPY:0", "CPU"), Q.queue_buffer("doorbell", "COPY:0", "CPU")
  k1, k2 = Q.placeholder("kernargs", "CPU", 24), Q.placeholder("kernargs", "CPU", 24)
  out = graph_rewrite(UOp(Ops.SINK, src=(ring, bell, k1, k2, ring)), CQ.pm_bufferize, dev, bottom_up=True, name="bufferize").src
  assert all(u.op is Ops.BUFFER and u.tag is None and u.src[1].arg == "CPU" for u in out)
  assert out[0] is out[4] and out[2] is not out[3]
  again = graph_rewrite(UOp(Ops.SINK, src=(Q.queue_buffer("ring", "COPY:0", "CPU"),)), CQ.pm_bufferize, dev, bottom_up=True, name="b").src[0]
  assert again is out[0]
  rb = dev.buffer_of(out[0])
  assert rb is dev.queue("COPY:0").buffers["ring"] and rb.nbytes == 4096 and rb.dtype == dtypes.uint32
  assert dev.buffer_of(out[1]) is dev.queue("COPY:0").buffers["doorbell"]
  assert dev.buffer_of(out[2]).nbytes == 24 and dev.buffer_of(out[2]).is_allocated()
  assert dev.buffer_of(UOp.new_buffer("CPU", 4, dtypes.uint8)) is None

def test_default_device_is_hcq_and_runs_tensors_through_the_command_processor(monkeypatch):
  from core.device.registry import Device
  from core.tensor import Tensor
  monkeypatch.delenv("DEV", raising=False)
  Device.reset()
  try:
    hcq = Device["CPU"].hcq
    assert isinstance(hcq, H.CPUHCQ)
    a = np.arange(20, dtype=np.float32)
    out = ((Tensor(a) * 3 + 1).reshape(4, 5).sum(1)).numpy()
    np.testing.assert_allclose(out, (a * 3 + 1).reshape(4, 5).sum(1))
    # the work went through the ring: the compute queue's worker read packets up to its doorbell
    # (the host's wait ends at the SIGNAL packet; the worker advances its read offset just after, so allow it a moment)
    q = hcq.queue("COMPUTE:0")
    deadline = time.monotonic() + 5
    while q.rptr() != q.value("doorbell") and time.monotonic() < deadline: time.sleep(0.001)
    assert q.rptr() > 0 and q.rptr() == q.value("doorbell")
    # a second instance has its own queues; the copy back is ordered by signals
    x = Tensor(a, device="CPU:1")
    np.testing.assert_array_equal((x * 2).to("CPU").numpy(), a * 2)
    assert Device["CPU:1"].hcq is not hcq and Device["CPU:1"].hcq.queue("COMPUTE:0").rptr() > 0
  finally: Device.reset()
