"""The MOCK+METAL device: Tensor programs through core's HCQ pipeline (command-buffer programs replayed, each kernel's MSL run as
C++) against numpy, a Jit replay, and hand-written encoder calls in a ring (blit copy, signal, a fault). Everything that opens the
device runs in one subprocess with DEV=MOCK+METAL (the registry reads DEV once); its checks come back as JSON."""
from __future__ import annotations
from typing import Any
import pytest
from metal_tools import run_mock_script

SCRIPT = r'''
import ctypes, json, numpy as np
from core.tensor.tensor import Tensor
from core.tensor.jit import Jit
from core.device.registry import Device
from core.device.buffer import Buffer
from core.ir.dtype import dtypes
from core.hcq import HCQError
from plugin_metal.cmdbuf import Call, packet
from plugin_metal.queues import peek
rng = np.random.default_rng(1)
out = {}
dev = Device[Device.DEFAULT]
out["device"], out["hcq"] = Device.DEFAULT, type(dev.hcq).__name__
a, b = rng.standard_normal((33, 70)).astype(np.float32), rng.standard_normal((70, 21)).astype(np.float32)
out["matmul"] = float(np.abs((Tensor(a) @ Tensor(b)).numpy() - a @ b).max())
e = np.exp(a - a.max(1, keepdims=True))
out["softmax"] = float(np.abs(Tensor(a).softmax(1).numpy() - e / e.sum(1, keepdims=True)).max())
big = rng.standard_normal((16, 8192)).astype(np.float32)
out["group_sum"] = float(np.abs(Tensor(big).sum(1).numpy() - big.sum(1, dtype=np.float64)).max())
h = a.astype(np.float16)
out["half"] = float(np.abs((Tensor(h) * 3 + 1).numpy().astype(np.float32) - (h * np.float16(3) + np.float16(1)).astype(np.float32)).max())
ints = rng.integers(-1000, 1000, 300).astype(np.int32)
out["int"] = bool(((Tensor(ints) // 7 + Tensor(ints) * 3).numpy() == (np.floor_divide(ints, 7) + ints * 3)).all())
@Jit
def f(x: Tensor, y: Tensor) -> Tensor: return ((x @ y).relu() + 1).realize()
errs = []
for i in range(4):
  x, y = rng.standard_normal((8, 16)).astype(np.float32), rng.standard_normal((16, 4)).astype(np.float32)
  errs.append(float(np.abs(f(Tensor(x), Tensor(y)).numpy() - (np.maximum(x @ y, 0) + 1)).max()))
out["jit"] = max(errs)
# hand-written encoder calls in the COPY queue's ring: a blit copy, then a signal
hcq = dev.hcq
q = hcq.queue("COPY:0")
src = Buffer(Device.DEFAULT, 64, dtypes.uint8).allocate()
dst = Buffer(Device.DEFAULT, 64, dtypes.uint8).allocate()
src.copyin(memoryview(bytearray(range(64))))
sig = Buffer(Device.DEFAULT, 1, dtypes.uint64).allocate()
def submit(words):
  wptr = peek(q.addr["wptr"])
  ctypes.memmove(q.addr["ring"] + wptr % q.ring_size, words, len(words))
  for k in ("wptr", "doorbell"): ctypes.c_uint64.from_address(q.addr[k]).value = wptr + len(words)
submit(packet(Call.BLIT_COPY, hcq.addr(dst), hcq.addr(src), 64) + packet(Call.SIGNAL, hcq.addr(sig), 5))
hcq.wait_signal(sig, 5, 10.0)
out["blit"] = bytes(dst.as_buffer()) == bytes(range(64))
submit(packet(Call.SET_PIPELINE, hcq.addr(src)) + packet(Call.SIGNAL, hcq.addr(sig), 6))
try:
  hcq.wait_signal(sig, 6, 10.0)
  out["fault"] = "no error"
except HCQError as e: out["fault"] = str(e)
submit(packet(Call.SIGNAL, hcq.addr(sig), 7))
hcq.wait_signal(sig, 7, 10.0)
out["after_fault"] = peek(hcq.addr(sig))
submit(packet(Call.SIGNAL, hcq.addr(sig), 8))
hcq.submitted_without_wait()   # what core calls after a run with wait=False: no wait follows
out["unwaited"] = peek(hcq.addr(sig))
# a program stays loaded while held (a submission's MetalProgramData holds it) and is unloaded after; handles are never reused
import gc
msl = next(iter(hcq.programs.values())).msl.encode()   # any compiled kernel's MSL will do
h1, p1 = hcq.load_program("held", msl)
h1b, p1b = hcq.load_program("held", msl)
out["held_once"] = h1 == h1b and p1 is p1b and hcq.programs[h1] is p1
del p1, p1b
gc.collect()
out["dropped"] = h1 not in hcq.programs
h2, p2 = hcq.load_program("held", msl)
out["new_handle"] = h2 > h1 and hcq.programs[h2] is p2
print("RESULT " + json.dumps(out))
'''

@pytest.fixture(scope="module")
def result() -> dict[str, Any]: return run_mock_script(SCRIPT)

def test_device_runs_through_the_hcq_pipeline(result: dict[str, Any]) -> None:
  assert result["device"] == "METAL" and result["hcq"] == "MockHCQ"

def test_kernels_match_numpy(result: dict[str, Any]) -> None:
  assert result["matmul"] < 1e-4 and result["softmax"] < 1e-6 and result["group_sum"] < 1e-2
  assert result["half"] == 0.0 and result["int"] is True

def test_jit_replays_with_new_inputs(result: dict[str, Any]) -> None:
  assert result["jit"] < 1e-5

def test_blit_copy_and_signal_from_the_ring(result: dict[str, Any]) -> None:
  assert result["blit"] is True

def test_a_bad_pipeline_handle_faults_and_the_queue_goes_on(result: dict[str, Any]) -> None:
  assert "SET_PIPELINE of handle" in result["fault"] and "which is not loaded" in result["fault"]
  assert result["after_fault"] == 7

def test_a_submission_nobody_waits_for_runs(result: dict[str, Any]) -> None:
  # only a thread that steps the rings replays them: core's submitted_without_wait() runs what the doorbell announced
  assert result["unwaited"] == 8

def test_a_program_is_loaded_once_while_held_and_unloaded_after(result: dict[str, Any]) -> None:
  # a plain dict of programs kept every kernel ever loaded (and its host build's .so) for the life of the process
  assert result["held_once"] is True and result["dropped"] is True and result["new_handle"] is True
