"""The MOCK+AMD device: its memory, and hand-built PM4/SDMA rings run by its queue workers (copy, kernel,
waits between queues, faults). Everything that opens the device runs in one subprocess with DEV=MOCK+AMD (the device registry
reads DEV once per process); its checks come back as JSON and each test asserts one part."""
from __future__ import annotations
import json, os, subprocess, sys
import numpy as np
import pytest
from core.ir.ops import UOp, Ops

def test_memory_stays_registered_while_the_cache_holds_it():
  # a buffer freed by the cycle collector goes to the allocator's cache from its owner's __del__, after the collector has
  # already cleared the weakrefs of everything in the cycle: the memory must stay device memory until it is really freed
  import ctypes, gc
  from plugin_amd.iface_mock import MockAllocator
  from plugin_amd.mock_cp import MEMORY
  al = MockAllocator("AMD")
  class Owner:
    def __init__(self) -> None: self.me, self.opaque = self, al.alloc(64)
    def __del__(self) -> None: al.free(self.opaque, 64)
  o = Owner()
  addr = ctypes.addressof(o.opaque)
  del o
  gc.collect()
  assert MEMORY.contains(addr, 64)
  again = al.alloc(64)
  assert ctypes.addressof(again) == addr and MEMORY.contains(addr, 64)
  al.free(again, 64)
  al.free_cache()
  assert not MEMORY.contains(addr, 64)

# *** the device, in a subprocess ***

SCRIPT = r'''
import ctypes, json, struct, numpy as np
from core.device.registry import Device
from core.device.buffer import Buffer
from core.ir.dtype import dtypes
from core.hcq import HCQError
from core.hcq import queue_ir as qir
from plugin_amd import pm4, sdma
from plugin_amd.lower import lower_command, resolve_ins
from plugin_amd.mock_cp import MEMORY, MockError
out = {}
dev = Device["AMD"]
hcq = dev.hcq
out["hcq"] = type(hcq).__name__
out["queues"] = list(hcq.queues)
def buf(n, dt=dtypes.uint8): return Buffer("AMD", n, dt).allocate()
def addr(b): return ctypes.addressof(b._buf)
def u64(b): return struct.unpack("<Q", bytes(b.as_buffer()[:8]))[0]
out["units"] = [hcq.ring_layout("COMPUTE:0").unit, hcq.ring_layout("COPY:0").unit]
def submit(q, words):
  """What core's submit program does: copy words into the ring at wptr (wrapping; the hand-built submits here stay clear of the
  ring's end), bump wptr, then store it to the doorbell. The write pointer counts the queue's units (PM4: dwords, SDMA: bytes)."""
  mq, unit = hcq.queue(q), hcq.ring_layout(q).unit
  ring, wp = mq.buffers["ring"].as_buffer().cast("I"), mq.buffers["wptr"].as_buffer().cast("Q")
  n = len(ring)
  for i, w in enumerate(words): ring[(wp[0] * unit // 4 + i) % n] = w
  wp[0] += 4 * len(words) // unit
  mq.buffers["doorbell"].as_buffer().cast("Q")[0] = wp[0]

# memory: 256-byte aligned host memory the processors accept; other host memory they refuse
b = buf(1000)
out["aligned"] = addr(b) % 256 == 0
out["registered"] = MEMORY.contains(addr(b), 1000) and not MEMORY.contains(addr(b), 1001)
foreign = (ctypes.c_uint8 * 64)()
try: MEMORY.read(ctypes.addressof(foreign), 8); out["foreign"] = "read"
except MockError as e: out["foreign"] = str(e)

# copy on COPY:0, a compute WAIT on the copy's fence, then a compute signal: submitted compute first, so it blocks until the copy runs
src, dst, fence, sig = buf(4096), buf(4096), buf(8), buf(8)
src.copyin(memoryview(bytes(range(256)) * 16))
gen = hcq.arch
submit("COMPUTE:0", pm4.wait_reg_mem(addr(fence), 7) + pm4.release_mem(gen, addr(sig), 0x1234))
import time; time.sleep(0.05)
out["blocked"] = u64(sig)
submit("COPY:0", sdma.copy_linear(gen, addr(dst), addr(src), 4096) + sdma.fence(addr(fence), 7))
hcq.wait_signal(sig, 0x1234, 5.0)
out["copied"] = bytes(dst.as_buffer()) == bytes(src.as_buffer())
out["compute_packets"] = [n for _, n in hcq.queue("COMPUTE:0").proc.packets][-2:]
out["copy_packets"] = [n for _, n in hcq.queue("COPY:0").proc.packets][-2:]

# a dispatch built by lower.py from queue IR: the kernel from amd_test_kernels.loop_kernel (registers, a loop, a variable)
import sys; sys.path.insert(0, TESTS)
from core.testing.kernels import loop_kernel
from plugin_amd.prep import load_code_object
uops = loop_kernel()
src_text = dev.renderer.render("loop_k", uops)
data, image = load_code_object(dev.compiler.compile(src_text), "loop_k")
hcq.register_program("loop_k", tuple(uops), data, image)
prog_b, karg_b, o_b, i_b, sig2 = buf(len(image)), buf(data.kernarg_size), buf(64, dtypes.float32), buf(512, dtypes.float32), buf(8)
prog_b.copyin(memoryview(image))
x = np.linspace(-2, 2, 512, dtype=np.float32)
i_b.copyin(memoryview(x.tobytes()))
kargs = bytearray(data.kernarg_size)
struct.pack_into("<QQi", kargs, 0, addr(o_b), addr(i_b), 3) if data.arg_offsets == (0, 8, 16) else None
for off, v, fmt in zip(data.arg_offsets, (addr(o_b), addr(i_b), 3), ("<Q", "<Q", "<i")): struct.pack_into(fmt, kargs, off, v)
karg_b.copyin(memoryview(bytes(kargs)))
ph_prog, ph_karg = qir.placeholder("program", "AMD", len(image)), qir.placeholder("kernargs", "AMD", data.kernarg_size)
where = {ph_prog: addr(prog_b), ph_karg: addr(karg_b)}
def lower(cmd, q): return list(struct.unpack(f"<{len(w) // 4}I", w)) if (w := resolve_ins(lower_command(cmd, q, gen, hcq), where.__getitem__)) else []
launch = qir.launch(qir.prepared_program("AMD", ph_prog, data), ph_karg, (64, 1, 1), (1, 1, 1))
submit("COMPUTE:0", lower(launch, "COMPUTE:0") + pm4.release_mem(gen, addr(sig2), 1))
hcq.wait_signal(sig2, 1, 10.0)
got = np.frombuffer(bytes(o_b.as_buffer()), np.float32)
out["dispatch_err"] = float(np.abs(got - np.sin(x.reshape(64, 8)).sum(1) * 3).max())

# faults: a dispatch of an address where no program was prepared; an unknown PM4 opcode; a wait that times out
def fault(words, q="COMPUTE:0", value=1):
  s = buf(8)
  submit(q, words + (pm4.release_mem(gen, addr(s), value) if q == "COMPUTE:0" else sdma.fence(addr(s), value)))
  try: hcq.wait_signal(s, value, 5.0); return "no error"
  except HCQError as e: return str(e)
bad_prog = lower(qir.launch(qir.prepared_program("AMD", ph_prog, data), ph_karg, (1, 1, 1), (1, 1, 1)), "COMPUTE:0")
prog_b.copyin(memoryview(bytes(len(image))))   # the image is gone from the program buffer
out["fault_no_program"] = fault(bad_prog)
out["error_after"] = hcq.error()
unknown = next(o for o in range(1, 256) if o not in pm4.OPCODE_NAMES)
out["unknown_opcode"] = unknown
out["fault_opcode"] = fault([pm4.header(unknown, 1), 0])
out["fault_sdma"] = fault([0x000000FF], "COPY:0")
s3 = buf(8)
try: hcq.wait_signal(s3, 5, 0.2); out["timeout"] = "no error"
except HCQError as e: out["timeout"] = str(e)
# and the queues still work afterwards
sig4 = buf(8)
submit("COMPUTE:0", pm4.release_mem(gen, addr(sig4), 99))
hcq.wait_signal(sig4, 99, 5.0)
out["after_faults"] = u64(sig4)

# a submit nobody waits for: core's submitted_without_wait() (a run with wait=False) wakes the workers, which would otherwise look
# at their doorbells at their next poll (1-20 ms)
import threading
class Told(threading.Event):
  n = 0
  def set(self) -> None:
    Told.n += 1
    super().set()
for name in hcq.queues: hcq.queue(name).worker.kick = Told()
hcq.submitted_without_wait()
out["told"] = Told.n

# a schedule through core's pipeline across two MOCK GPUs: a kernel on AMD, its output copied by AMD:1's SDMA engine (which waits
# for AMD's kernel), a kernel on AMD:1 (which waits for the copy), read back. Only core and this plugin are installed: the host
# side (submit programs, host builds) is core's own
from core.tensor import Tensor
from core.device.registry import Device
a = np.arange(24, dtype=np.float32).reshape(4, 6)
t = ((Tensor(a, device="AMD") * 2).contiguous().to("AMD:1") + Tensor(np.ones((4, 6), np.float32), device="AMD:1")).sum(1)
out["pipeline"] = t.numpy().tolist()
out["pipeline_expected"] = (a * 2 + 1).sum(1).tolist()
hcq1 = Device["AMD:1"].hcq
out["pipeline_copy_packets"] = sorted(set(n for _, n in hcq1.queue("COPY:0").proc.packets))
out["pipeline_compute_packets"] = sorted(set(n for _, n in hcq1.queue("COMPUTE:0").proc.packets))

# a long reduction with few outputs is shared by each workgroup (GROUP: LDS and a barrier), run by the host build's work-item loops
from core.hcq import state
from core.ir.ops import Ops
x = np.random.default_rng(1).standard_normal((8, 2048)).astype(np.float32)
out["group_sum"] = float(np.abs(Tensor(x, device="AMD").sum(1).numpy() - x.astype(np.float64).sum(1)).max())
out["group_max"] = bool((Tensor(x, device="AMD").max(1).numpy() == x.max(1)).all())
out["group_kernels"] = [list(p.arg.local_size) for p in state._compiled.values() if any(u.op is Ops.BARRIER for u in p.src[2].src)]
print("RESULT " + json.dumps(out))
'''

@pytest.fixture(scope="module")
def mock_run() -> dict:
  here = os.path.dirname(os.path.abspath(__file__))
  env = dict(os.environ, DEV="MOCK+AMD", HCQ_TIMEOUT="10")
  p = subprocess.run([sys.executable, "-c", f"TESTS = {here!r}\n" + SCRIPT], env=env, capture_output=True, text=True, timeout=900)
  lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
  assert p.returncode == 0 and lines, f"the MOCK+AMD script failed:\n{p.stdout[-3000:]}\n{p.stderr[-5000:]}"
  return json.loads(lines[-1][7:])

def test_device_is_the_mock(mock_run):
  assert mock_run["hcq"] == "MockHCQ" and mock_run["queues"] == ["COMPUTE:0", "COPY:0"]
  assert mock_run["units"] == [4, 1]   # the hardware's write pointer units: the worker reads the doorbell in them

def test_memory_is_aligned_registered_host_memory(mock_run):
  assert mock_run["aligned"] and mock_run["registered"]
  assert "is not MOCK+AMD memory" in mock_run["foreign"]

def test_copy_and_wait_between_queues(mock_run):
  assert mock_run["blocked"] == 0          # the compute queue waited for the copy queue's fence
  assert mock_run["copied"]
  assert mock_run["compute_packets"] == ["WAIT_REG_MEM", "RELEASE_MEM"]
  assert mock_run["copy_packets"] == ["COPY", "FENCE"]

def test_dispatch_runs_the_host_build_with_the_encoded_arguments(mock_run):
  assert mock_run["dispatch_err"] < 1e-4

def test_faults_name_the_packet_and_the_queue_recovers(mock_run):
  assert "no prepared program's code is at" in mock_run["fault_no_program"] and "DISPATCH_DIRECT" in mock_run["fault_no_program"]
  assert "no prepared program" in (mock_run["error_after"] or "")
  assert f"opcode {mock_run['unknown_opcode']:#04x}" in mock_run["fault_opcode"] and "PM4 packet at ring byte offset" in mock_run["fault_opcode"]
  assert "SDMA packet at ring byte offset" in mock_run["fault_sdma"] and "opcode 0xff" in mock_run["fault_sdma"]
  assert "timed out" in mock_run["timeout"] and "it is 0" in mock_run["timeout"]
  assert mock_run["after_faults"] == 99

def test_a_submission_nobody_waits_for_wakes_the_workers(mock_run):
  assert mock_run["told"] == 2   # COMPUTE:0's and COPY:0's

def test_schedule_through_the_pipeline(mock_run):
  np.testing.assert_allclose(mock_run["pipeline"], mock_run["pipeline_expected"])
  assert {"COPY", "POLL_REGMEM", "FENCE"} <= set(mock_run["pipeline_copy_packets"])
  assert {"DISPATCH_DIRECT", "WAIT_REG_MEM", "RELEASE_MEM", "SET_SH_REG"} <= set(mock_run["pipeline_compute_packets"])

def test_group_reductions_run_with_their_workgroup(mock_run):
  assert mock_run["group_sum"] < 1e-3 and mock_run["group_max"]
  assert mock_run["group_kernels"] and all(ls[0] > 1 for ls in mock_run["group_kernels"])

# *** pm_bufferize (an AMD HCQ object that records what it is asked for) ***

def test_bufferize_maps_every_placeholder_kind():
  from core.hcq import queue_ir as qir
  from core.ir.pattern import graph_rewrite
  from plugin_amd.bufferize import pm_bufferize
  from plugin_amd.runtime import AMDHCQ
  class Recording(AMDHCQ):
    def __init__(self) -> None:
      super().__init__("AMD", "gfx1100")
      self.asked: list = []
    def buffer_uop(self, tag, dtype, size):
      self.asked.append((tag, dtype, size))
      return UOp.new_buffer("AMD", max(size, 1), dtype)
  ctx = Recording()
  phs = [qir.placeholder(k, "AMD", 64) for k in ("program", "kernargs", "cmdbuf", "scratch", "staging")]
  phs += [qir.queue_buffer(k, q, "AMD") for k in ("ring", "wptr", "doorbell", "timeline_signal") for q in ctx.queues]
  done = graph_rewrite(UOp(Ops.SINK, src=tuple(phs)), pm_bufferize, ctx, bottom_up=True).src
  assert all(d.op is Ops.BUFFER and d.tag is None for d in done)
  assert [t for t, _, _ in ctx.asked] == [p.tag for p in phs]
  with pytest.raises(ValueError, match="names a queue this device lacks"):
    graph_rewrite(qir.queue_buffer("ring", "COMPUTE:1", "AMD"), pm_bufferize, ctx, bottom_up=True)
  with pytest.raises(ValueError, match="no buffer for placeholder tag"):
    graph_rewrite(qir.placeholder("mystery", "AMD", 8), pm_bufferize, ctx, bottom_up=True)
