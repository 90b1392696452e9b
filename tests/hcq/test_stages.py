"""Each HCQ stage on small hand-built graphs (fake plugin hooks, no command processor needed)."""
import ctypes, struct
from dataclasses import dataclass
import pytest
from core.testing.helpers import ci_run
from core.ir.dtype import dtypes
from core.ir.ops import UOp, Ops
from core.hcq import queue_ir as q
from core.hcq.state import HCQState
from core.device.hcq import HCQDevice
from core.codegen.program import ProgramSpec
from core.hcq.prep import schedule_linear, prep_runtime, flatten_linear
from core.hcq.lower import lower_to_queues, pick_queue
from core.hcq.deps import dependencies
from core.hcq.merge import merge_submits
from core.hcq.encode import encode
from core.hcq.pack import pack
from core.hcq.bufferize import bufferize
from core.hcq.patches import resolve_patches

@dataclass
class Item:
  ast: UOp
  bufs: tuple

def compiled(ast: UOp, dev: str, nbufs: int = 2) -> UOp:
  """A compiled PROGRAM as codegen makes it, with `nbufs` parameters and a stand-in binary (prep never launches it)."""
  params = tuple(UOp.param(i, dtypes.float32.ptr()) for i in range(nbufs))
  return UOp(Ops.PROGRAM, src=(ast, UOp(Ops.DEVICE, arg=dev), UOp(Ops.LINEAR, src=params), UOp(Ops.SOURCE, arg="src"),
                               UOp(Ops.BINARY, arg=b"LIB")), arg=ProgramSpec(ast.arg, (4, 1, 1), (1, 1, 1)))

class HCQ(HCQDevice):
  def __init__(self, queues=("COMPUTE:0", "COPY:0"), staging=False): self.queues, self.staging = queues, staging
  def ring_size(self, queue): return 1024
  def wait_signal(self, signal, value, timeout_s): raise AssertionError("the stage tests never wait")
  def needs_staging(self, other): return self.staging

def state(hcqs=None, bufmap=None):
  import fakehcq
  hcqs = hcqs or {}
  return HCQState(fakehcq.FakeHooks(), lambda d: hcqs.setdefault(d, HCQ()), bufmap or (lambda u: None),
                  compile=compiled)

def kernel(name, *bufs): return Item(UOp(Ops.SINK, arg=name), bufs)
def copy(dst, src): return Item(UOp(Ops.COPY, src=(src, UOp(Ops.DEVICE, arg=dst.src[1].arg))), (dst, src))
def buf(dev="X", n=4): return UOp.new_buffer(dev, n, dtypes.float32)

def test_placeholders_and_queue_buffers():
  a = q.placeholder("kernargs", "X", 16)
  assert q.kind_of(a) == "kernargs" and q.device_of(a) == "X" and q.kind_of(buf()) is None
  assert q.queue_buffer("ring", "COMPUTE:0", "X") is q.queue_buffer("ring", "COMPUTE:0", "X")
  assert q.queue_of(q.queue_buffer("wptr", "COPY:0", "X")) == "COPY:0"
  i = q.ins(b"\x01\x00\x00\x00", [(0, q.u64(5))])
  assert i.op is Ops.INS and i.arg == (b"\x01\x00\x00\x00", (0,)) and i.src[0].arg == 5

def test_prep_fills_kernargs_and_program_image():
  if not ci_run(): pytest.importorskip("plugin_cpu")   # the core job installs every plugin: there it must import
  a, b = buf(), buf()
  ctx = state()
  out = prep_runtime(schedule_linear([kernel("k", a, b)]), ctx)
  patches = [u for u in out.src if u.op is Ops.HOST_PATCH]
  assert [(p.arg, p.src[1].src[0]) for p in patches] == [(0, a), (8, b)]   # GETADDR of each buffer at its arg offset
  call = out.src[-1]
  launch = call.src[0]
  assert call.op is Ops.CALL and launch.src[1] is patches[0].src[0] and q.kind_of(launch.src[1]) == "kernargs"
  img = launch.src[0].src[1]
  assert q.kind_of(img) == "program" and ctx.contents[img].startswith(b"IMG")

def test_staging_only_when_plugin_asks():
  a, b = buf("X"), buf("Y")
  for staging, n in ((False, 1), (True, 2)):
    out = flatten_linear(prep_runtime(schedule_linear([copy(b, a)]), state({"Y": HCQ(staging=staging)})))
    assert len(out.src) == n
  assert q.kind_of(out.src[0].src[1]) == "staging" and out.src[0].arg == "X" and out.src[1].src[2] is out.src[0].src[1]

def test_lower_picks_queues():
  a, b = buf("X"), buf("Y")
  out = lower_to_queues(schedule_linear([copy(b, a)]), state({"Y": HCQ(queues=("COMPUTE:0",))}))
  assert q.submit_queue(out.src[0]) == "COMPUTE:0" and q.submit_device(out.src[0]) == "Y"
  assert pick_queue(("COMPUTE:0", "COPY:0"), "COPY") == "COPY:0"
  with pytest.raises(RuntimeError, match="no COMPUTE queue"): pick_queue(("COPY:0",), "COMPUTE")

def _submit(dev, queue, writes, reads, name):
  return q.submit([UOp(Ops.NOOP, arg=name)], dev, queue, UOp(Ops.GROUP, src=tuple(writes)), UOp(Ops.GROUP, src=tuple(reads)))

def test_dependencies_wait_on_producer_queue():
  a, b, c = buf(), buf(), buf()
  lin = UOp(Ops.LINEAR, src=(_submit("X", "COMPUTE:0", [a], [], "k1"), _submit("X", "COPY:0", [b], [a], "cp"),
                             _submit("X", "COMPUTE:0", [c], [b], "k2")))
  out = dependencies(lin, state())
  k1, cp, k2, *adv = out.src
  tl = lambda qn, k: q.timeline_value(qn, "X", k)
  # k1 signals COMPUTE tv+1 (the copy waits on it); the copy waits for it and signals COPY tv+1 (k2 waits on that)
  assert k1.src[0].src[-1] is q.signal(q.queue_buffer("timeline_signal", "COMPUTE:0", "X"), tl("COMPUTE:0", 1))
  cmds = cp.src[0].src
  assert q.wait(q.queue_buffer("timeline_signal", "COMPUTE:0", "X"), tl("COMPUTE:0", 1)) in cmds
  assert cmds[-1] is q.signal(q.queue_buffer("timeline_signal", "COPY:0", "X"), tl("COPY:0", 1))
  assert q.wait(q.queue_buffer("timeline_signal", "COPY:0", "X"), tl("COPY:0", 1)) in k2.src[0].src
  # the finalizer advances each host timeline by its number of signals
  assert [(u.src[0].tag, u.src[1]) for u in adv] == [(("timeline_value", "COMPUTE:0"), tl("COMPUTE:0", 2)), (("timeline_value", "COPY:0"), tl("COPY:0", 1))]

def test_same_queue_gets_barrier_not_wait():
  a, b = buf(), buf()
  out = dependencies(UOp(Ops.LINEAR, src=(_submit("X", "COMPUTE:0", [a], [], "k1"), _submit("X", "COMPUTE:0", [b], [a], "k2"))), state())
  k1, k2 = out.src[0].src[0].src, out.src[1].src[0].src
  assert not any(c.op is Ops.SIGNAL for c in k1)   # nobody waits on k1: no signal
  assert [c.op for c in k2 if c.op is not Ops.WAIT] == [Ops.BARRIER, Ops.NOOP, Ops.SIGNAL]
  assert sum(c.op is Ops.WAIT for c in k2) == 0

def test_merge_consecutive_same_queue_only():
  s = lambda qn, n: q.submit([UOp(Ops.NOOP, arg=n)], "X", qn)
  out = merge_submits(UOp(Ops.LINEAR, src=(s("COMPUTE:0", 1), s("COMPUTE:0", 2), s("COPY:0", 3), s("COMPUTE:0", 4))))
  assert [len(u.src[0].src) for u in out.src] == [2, 1, 1] and [c.arg for c in out.src[0].src[0].src] == [1, 2]

def test_encode_splits_patches():
  a, b = buf(), buf()
  sig = q.queue_buffer("timeline_signal", "COMPUTE:0", "X")
  lin = UOp(Ops.LINEAR, src=(q.submit([q.copy(a, b, 16), q.signal(sig, q.timeline_value("COMPUTE:0", "X", 1)), q.wait(sig, q.u64(7))],
                                      "X", "COMPUTE:0"),))
  ctx = state()
  out = encode(lin, ctx)
  host, sub = [u for u in out.src if u.op is Ops.HOST_PATCH], out.src[-1]
  words = ctx.contents[sub.src[0]]
  assert sub.arg == ("submit", "COMPUTE:0", 32 + 24 + 24) and len(words) == 80
  assert [(p.arg, p.src[1].src[0]) for p in host] == [(8, a), (16, b), (40, sig), (64, sig)]   # addresses: before submit
  assert all(p.src[1].src[1] == UOp(Ops.DEVICE, arg="X") for p in host)   # bound to the device that runs the commands
  assert [(r.op, r.arg, r.src[0]) for r in sub.src[5:]] == [(Ops.RING_PATCH, 48, q.timeline_value("COMPUTE:0", "X", 1))]   # timeline: at submit
  assert struct.unpack_from("<Q", words, 72)[0] == 7 and struct.unpack_from("<Q", words, 24)[0] == 16   # constants baked in
  assert [k for k, _ in ctx.commands[sub]] == ["copy", "signal", "wait"]

def test_lower_each_command_hands_every_abstract_command_to_one_function():
  from core.ir.pattern import graph_rewrite
  a, b = buf(), buf()
  prog = q.prepared_program("X", q.placeholder("program", "X", 64), q.ProgramData("k", 8, 8, (0,)))
  cmds = [q.launch(prog, q.placeholder("kernargs", "X", 8), (1, 1, 1), (1, 1, 1)), q.copy(a, b, 16), q.wait(a, q.u64(1)),
          q.signal(a, q.u64(2)), q.barrier(), q.timestamp(a)]
  seen: list[tuple[str, Ops]] = []
  def lower(ctx, cmd):
    seen.append((ctx, cmd.op))
    return q.ins(bytes([len(seen)]))
  pm = q.lower_each_command(lower, "lower X")
  out = [graph_rewrite(c, pm, "ctx", bottom_up=True) for c in cmds]
  assert seen == [("ctx", op) for op in (Ops.LAUNCH, Ops.COPY, Ops.WAIT, Ops.SIGNAL, Ops.BARRIER, Ops.TIMESTAMP)]
  assert [o.arg[0] for o in out] == [bytes([i]) for i in range(1, 7)]
  assert graph_rewrite(a, pm, "ctx", bottom_up=True) is a and len(seen) == 6   # a buffer is no command

def test_ring_bufferize_gives_queue_buffers_once_and_fresh_schedule_buffers():
  from core.device.buffer import Buffer
  from core.device.hcq import RingHCQ
  from core.ir.pattern import graph_rewrite
  made: list[tuple[str, str]] = []
  class Ring(RingHCQ):   # on PYTHON: host memory any test can allocate
    queues = ("COMPUTE:0",)
    def queue_buffer(self, kind, queue):
      made.append((kind, queue))
      return Buffer("PYTHON", 1, dtypes.uint64).allocate()
  pm, h = q.ring_bufferize("x bufferize"), Ring("PYTHON")
  sig = q.queue_buffer("timeline_signal", "COMPUTE:0", "PYTHON")
  a, b = graph_rewrite(sig, pm, h), graph_rewrite(sig, pm, h)
  assert a is b and a.tag is None and made == [("timeline_signal", "COMPUTE:0")] and h.buffer_of(a).nbytes == 8
  k1, k2 = (graph_rewrite(q.placeholder("kernargs", "PYTHON", 24), pm, h) for _ in range(2))
  assert k1 is not k2 and k1.tag is None and h.buffer_of(k1).nbytes == 24 and len(made) == 1
  with pytest.raises(ValueError, match="PYTHON: no buffer for placeholder tag 'qmd'"): graph_rewrite(q.placeholder("qmd", "PYTHON", 8), pm, h)
  with pytest.raises(ValueError, match=r"names a queue this device lacks \(it has COMPUTE:0\)"):
    graph_rewrite(q.queue_buffer("ring", "COPY:0", "PYTHON"), pm, h)

def test_pack_shares_one_allocation():
  k1, k2 = q.placeholder("kernargs", "X", 24), q.placeholder("kernargs", "X", 8)
  ctx = state()
  ctx.contents[k1], ctx.contents[k2] = b"A" * 24, b"B" * 8
  lin = UOp(Ops.LINEAR, src=(q.host_patch(k2, 0, q.getaddr(k1, 8, "X")),))
  out = pack(lin, ctx)
  p = out.src[0]
  packed = p.src[0]
  blob = ctx.contents[packed]
  a_at = blob.index(b"A" * 24)
  assert q.kind_of(packed) == "kernargs" and blob[p.arg:p.arg + 8] == b"B" * 8 and {a_at, p.arg} == {0, 64}   # 64-byte aligned pieces
  from core.ir.ops import exec_uop_tree
  addr = p.src[1].substitute({q.getaddr(packed, device="X"): UOp.const(dtypes.uint64, 1000)})
  assert exec_uop_tree(addr, {}) == 1000 + a_at + 8   # GETADDR(k1)+8 became an address inside the packed buffer

def test_bufferize_and_resolve_write_constants(fake):
  import fakehcq
  from core.engine.run import buffer_of
  from core.device.registry import Device
  ph = q.placeholder("kernargs", "FAKE", 16)
  slot = UOp.new_buffer("FAKE", 4, dtypes.float32)
  ctx = HCQState(fakehcq.FakeHooks(), lambda d: Device[d].hcq, lambda u: Device["FAKE"].hcq.buffer_of(u) or buffer_of(u))
  ctx.contents[ph] = b"\x11" * 16
  lin = UOp(Ops.LINEAR, src=(q.host_patch(ph, 0, q.getaddr(ph, 4, "FAKE")), q.host_patch(ph, 8, q.getaddr(slot, device="FAKE"))))
  out = bufferize(lin, ctx)
  real = ctx.bufmap[ph]
  assert real.tag is None and ctx.buffer_of(real).numpy().tobytes()[8:] == b"\x11" * 8   # contents uploaded
  out = resolve_patches(out, ctx)
  rb = ctx.buffer_of(real)
  base = ctypes.addressof(rb._buf)
  assert struct.unpack("<Q", rb.as_buffer()[:8])[0] == base + 4   # written now: the pipeline's own address is known
  assert len(out.src) == 1 and out.src[0].src[1].src[0] is slot     # the schedule's buffer stays a per-run patch

def test_callify_copies_into_ring_with_wraparound(fake):
  from core.device.registry import Device
  from core.engine.run import buffer_of
  from core.hcq.callify import callify, host_timeline
  from core.hcq.queue_ir import ring_patch
  hcq = Device["FAKE"].hcq
  ctx = HCQState(None, lambda d: Device[d].hcq, lambda u: hcq.buffer_of(u) or buffer_of(u))
  real = {k: hcq.buffer_uop(q.queue_buffer(k, "COMPUTE:0", "FAKE")) for k in ("ring", "wptr", "doorbell")}
  cmd = UOp.new_buffer("FAKE", 4, dtypes.uint32)
  buffer_of(cmd).copyin(struct.pack("<4I", 1, 2, 3, 4))
  ring, wptr, bell = (ctx.buffer_of(real[k]) for k in ("ring", "wptr", "doorbell"))
  wptr.copyin(struct.pack("<Q", 4096 + 4088))   # 8 bytes before the end of the (second lap of the) 4 KB ring
  host_timeline("FAKE", "COMPUTE:0")[0] = 5
  tl = q.timeline_value("COMPUTE:0", "FAKE", 2)
  sub = UOp(Ops.CUSTOM_FUNCTION, src=(cmd, UOp(Ops.DEVICE, arg="FAKE"), real["ring"], real["wptr"], real["doorbell"], ring_patch(8, tl)),
            arg=("submit", "COMPUTE:0", 16))
  adv = q.advance("COMPUTE:0", "FAKE", tl)
  final, prg, args = callify(UOp(Ops.LINEAR, src=(sub, adv)), ctx)
  assert final.src[-1].op is Ops.CALL and final.src[-1].src[0].op is Ops.PROGRAM
  prg(*args)
  words = struct.unpack("<1024I", bytes(ring.as_buffer()))
  assert words[1022:] == (1, 2) and words[:2] == (7, 0)   # wrapped; the timeline value 5+2 patched into the ring copy
  assert struct.unpack("<Q", bytes(wptr.as_buffer()))[0] == 4096 + 4104 == struct.unpack("<Q", bytes(bell.as_buffer()))[0]
  assert host_timeline("FAKE", "COMPUTE:0")[0] == 7
  assert struct.unpack("<4I", bytes(buffer_of(cmd).as_buffer())) == (1, 2, 3, 4)   # the command buffer itself is untouched
