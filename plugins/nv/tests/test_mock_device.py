"""The MOCK+NV device end to end: tensors computed through core's HCQ pipeline (prep, pm_lower's methods and QMDs, bufferize,
the submit program) on the software GPU, against numpy; the GPFIFO entries and USERD the channels ran from; a malformed method
written into a channel comes back as an HCQError naming where and what, and the device keeps working. Each device runs in a
subprocess (the device registry reads DEV once per process); its checks come back as JSON."""
from __future__ import annotations
import json, os, re, subprocess, sys
import pytest
from core.testing.helpers import missing_tool
from nv_test_kernels import have_nvrtc
from nvtools import require

SCRIPT = r'''
import ctypes, json, struct, sys, time, numpy as np
from core import Tensor
from core.device.registry import Device
from core.hcq import HCQError
from plugin_nv import pushbuf as pb
from plugin_nv.iface_mock import GPFIFO_ENTRIES, MEMORY
out = {}
rng = np.random.default_rng(0)
a, b = rng.standard_normal((33, 47)).astype(np.float32), rng.standard_normal((47, 20)).astype(np.float32)
out["matmul"] = float(np.abs((Tensor(a) @ Tensor(b)).numpy() - a @ b).max())
x = rng.standard_normal(1000).astype(np.float32)
out["softmax"] = float(np.abs(Tensor(x).softmax().numpy() - np.exp(x - x.max()) / np.exp(x - x.max()).sum()).max())
out["int_sum"] = int(Tensor(np.arange(10000, dtype=np.int32)).sum().numpy())
t = Tensor(np.arange(12, dtype=np.float32)).reshape(3, 4)
out["copy_roundtrip"] = (t.to("NV:1") + 1).to("NV").numpy().tolist()
dev = Device["NV"]
hcq = dev.hcq
out["arch"] = hcq.arch
# the channels the work ran through: GPFIFO entries pointing into core's pushbuffer ring, GP_PUT/GP_GET in USERD
chans = {}
for q in hcq.queues:
  c = hcq.queue(q)
  hcq.synchronize()
  userd = c.userd.as_buffer()
  gp_put, gp_get = struct.unpack_from("<I", userd, pb.USERD_GP_PUT)[0], struct.unpack_from("<I", userd, pb.USERD_GP_GET)[0]
  entries = [pb.gp_decode(e & 0xFFFFFFFF, e >> 32) for e in c.gpfifo.as_buffer().cast("Q")[:min(c.put, GPFIFO_ENTRIES)]]
  ring_va = hcq.addr(c.buffers["ring"])
  chans[q] = dict(put=c.put, gp_put=gp_put, gp_get=gp_get, published=c.published, doorbell=c.doorbell.value,
                  in_ring=all(ring_va <= e[0] and e[0] + 4 * e[1] <= ring_va + c.buffers["ring"].nbytes for e in entries[1:]),
                  setup=list(entries[0][:2]), setup_va=hcq.addr(c.setup), ring_below_2_39=ring_va + c.buffers["ring"].nbytes < 2**39,
                  va_is_host=ring_va == ctypes.addressof(c.buffers["ring"]._buf))
out["channels"] = chans
# a malformed method straight into the compute channel: an unknown compute method, then the doorbell
c = hcq.queue("COMPUTE:0")
ring, wp = c.buffers["ring"].as_buffer().cast("I"), c.buffers["wptr"].as_buffer().cast("Q")
words = pb.incr(pb.SUBCH_COMPUTE, 0x1230, 1)
for i, w in enumerate(words): ring[(wp[0] + i) % len(ring)] = w
wp[0] += len(words)
c.buffers["doorbell"].as_buffer().cast("Q")[0] = wp[0]
try:
  hcq.synchronize()
  out["fault"] = None
except HCQError as e: out["fault"] = str(e)
out["after_fault"] = (Tensor(np.ones(5, dtype=np.float32)) * 3).numpy().tolist()
# a 64-dword pushbuffer ring, submits as core writes them (a submit that would pass the end starts at 0 after empty headers):
# each release lands, and the channel splits what it publishes at the ring's end
from plugin_nv.iface_mock import MockChannel
small = MockChannel("NV", "COMPUTE:0", hcq.arch, 256, 5.0, hcq.faults)
sem = small.buffers["timeline_signal"]
ring, bell = small.buffers["ring"].as_buffer().cast("I"), small.buffers["doorbell"].as_buffer().cast("Q")
pos, seen = 0, []
for v in range(1, 31):
  a = hcq.addr(sem)
  words = pb.incr(0, pb.SEM_ADDR_LO, a & 0xFFFFFFFF, a >> 32, v, 0, pb.SEM_OP_RELEASE | pb.SEM_PAYLOAD_64BIT)
  if pos % 64 + len(words) > 64:
    for i in range(pos % 64, 64): ring[i] = pb.DMA_NOP
    pos += 64 - pos % 64
  for i in range(len(words)): ring[(pos + i) % 64] = words[i]
  pos += len(words)
  bell[0] = pos
  small.kick.set()
  t0 = time.monotonic()
  while sem.as_buffer().cast("Q")[0] != v and time.monotonic() - t0 < 5: time.sleep(1e-4)
  seen.append(sem.as_buffer().cast("Q")[0])
small.close()
out["small_ring"] = dict(seen=seen, entries=small.put, published=small.published)
print("JSON" + json.dumps(out))
'''

def run_device(dev: str) -> dict:
  env = {**os.environ, "DEV": dev}
  r = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=600)
  assert r.returncode == 0, r.stderr[-4000:]
  return json.loads(next(line for line in r.stdout.splitlines() if line.startswith("JSON"))[4:])

@pytest.fixture(scope="module", params=["MOCK+NV:PTX:sm_80", "MOCK+NV", "MOCK+NV:PTX:sm_120"])
def result(request) -> dict:
  require("ptxas")
  return run_device(request.param)

def test_results_match_numpy(result: dict):
  assert result["matmul"] < 1e-4 and result["softmax"] < 1e-6
  assert result["int_sum"] == 49995000
  assert result["copy_roundtrip"] == [[1.0 + 4 * r + c for c in range(4)] for r in range(3)]

def test_work_ran_from_gpfifo_entries(result: dict):
  for q, c in result["channels"].items():
    # every ring dword core announced became an entry, the GPU fetched up to GP_PUT, and every entry but the setup one points
    # into the pushbuffer ring; the setup entry is the 2-dword SET_OBJECT segment
    assert c["put"] > 1 and c["gp_put"] == c["put"] % 1024 and c["gp_get"] == c["gp_put"], (q, c)
    assert c["published"] == c["doorbell"] and c["in_ring"] and c["setup"] == [c["setup_va"], 2]
    assert c["ring_below_2_39"] and c["va_is_host"]

def test_a_malformed_method_is_a_fault_and_the_device_recovers(result: dict):
  f = result["fault"]
  assert f is not None and "COMPUTE:0" in f and "compute class method 0x1230 is not one the MOCK implements" in f and "byte offset 0x4" in f
  assert result["after_fault"] == [3.0] * 5

def test_a_small_ring_wraps(result: dict):
  r = result["small_ring"]
  # 30 submits of 6 dwords in a 64-dword ring: every release landed in order; more entries than submits (+1 setup): the splits
  assert r["seen"] == list(range(1, 31)) and r["entries"] > 31 and r["published"] > 30 * 6

def test_arch_from_dev(result: dict):
  assert result["arch"] in ("sm_80", "sm_90", "sm_120")

def test_cuda_renderer_on_the_mock():
  require("ptxas")
  if not have_nvrtc():
    missing_tool('no NVRTC here: pip install "plugin-nv[nvrtc]" (the testing extra has it)')
  r = run_device("MOCK+NV:CUDA:sm_90")
  assert r["matmul"] < 1e-4 and r["softmax"] < 1e-6 and r["arch"] == "sm_90"

def test_kernel_times_come_from_the_channel_timestamps():
  # DEBUG=2: core wraps each launch in TIMESTAMPs (16-byte semaphore reports here, the time in the last 8) and prints the span
  require("ptxas")
  code = "import numpy as np; from core import Tensor; a = Tensor(np.ones((128, 128), dtype=np.float32)); print((a @ a).numpy()[0, 0])"
  r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, "DEV": "MOCK+NV", "DEBUG": "2"}, timeout=600)
  assert r.returncode == 0, r.stderr[-3000:]
  lines = [ln for ln in (r.stdout + r.stderr).splitlines() if ln.startswith("*** NV") and "COMPUTE:0" in ln]
  assert lines and "128.0" in r.stdout
  us = float(re.search(r"tm\s+([0-9.]+)us", lines[0]).group(1))
  assert 0 < us < 60e6   # a real span of the host build's run, not a payload or a raw counter
