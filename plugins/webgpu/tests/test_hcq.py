"""WEBGPU's HCQ interface: packets in a host ring replayed as command encoders by the software command processor; Jit replays
reuse their bind groups; copies to and from other devices stage through host memory; a bad packet is a reported fault."""
from __future__ import annotations
import struct
from typing import Any
import numpy as np
import pytest
from core import Tensor, Jit

def test_packets_round_trip() -> None:
  from plugin_webgpu.queue import DEVICE_BIT, Op, decode, packet
  words = packet(Op.LAUNCH, 0x1000, 0x2000, 3 | 1 << 32) + packet(Op.COPY, DEVICE_BIT | 5 << 32 | 64, 0x3000, 12) + packet(Op.SIGNAL, 0x4000, 7)
  assert decode(words) == [(Op.LAUNCH, (0x1000, 0x2000, 3 | 1 << 32)), (Op.COPY, (DEVICE_BIT | 5 << 32 | 64, 0x3000, 12)), (Op.SIGNAL, (0x4000, 7))]
  assert struct.unpack_from("<Q", words)[0] == 1 | 4 << 8
  with pytest.raises(ValueError, match="bad packet header"): decode(struct.pack("<Q", 9 | 4 << 8))

def test_webgpu_runs_on_its_queues(webgpu: Any) -> None:
  from plugin_webgpu.iface_hcq import WebGPUHCQ
  assert isinstance(webgpu.hcq, WebGPUHCQ)
  a = np.arange(100, dtype=np.float32)
  np.testing.assert_allclose((Tensor(a, device="WEBGPU") * 3 + 1).sum().numpy(), (a * 3 + 1).sum())
  from core.device.target import Target
  from plugin_webgpu.runtime import make_device
  assert make_device("WEBGPU", Target(interface="DIRECT", device="WEBGPU")).hcq is None   # DEV=DIRECT+WEBGPU: the direct path

def test_jit_replay_reuses_bind_groups(webgpu: Any) -> None:
  w = Tensor(np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32), device="WEBGPU").realize()
  @Jit
  def f(x: Tensor) -> Tensor: return (x @ w).relu() + 1
  xs = [np.random.default_rng(i).standard_normal((4, 8)).astype(np.float32) for i in range(2)]
  ins = [Tensor(x, device="WEBGPU").realize() for x in xs]   # two input buffers, used in turn
  for i in range(4): f(ins[i % 2])
  made = webgpu.hcq.proc.made
  for i in range(4, 8): np.testing.assert_allclose(f(ins[i % 2]).numpy(), np.maximum(xs[i % 2] @ w.numpy(), 0) + 1, rtol=1e-5, atol=1e-5)
  assert webgpu.hcq.proc.made == made   # each replay found its kernels' bind groups: nothing encoded anew but the dispatches

def test_copies_to_and_from_another_device(webgpu: Any) -> None:
  a = np.arange(37, dtype=np.int16)
  t = Tensor(a, device="PYTHON").to("WEBGPU")
  back = (t * 2).to("PYTHON").numpy()
  np.testing.assert_array_equal(back, a * 2)

def test_a_bad_launch_is_a_reported_fault(webgpu: Any) -> None:
  from core.hcq import HCQError
  from plugin_webgpu.iface_hcq import Queue, peek, poke
  from plugin_webgpu.queue import Op, packet
  h = webgpu.hcq
  q: Queue = h.queue("COMPUTE:0")
  import ctypes
  img = (ctypes.c_uint64 * 1)(999999)
  words = packet(Op.LAUNCH, ctypes.addressof(img), ctypes.addressof(img), 0)
  start = peek(q.addr["wptr"])
  ctypes.memmove(q.addr["ring"] + start % q.ring_size, words, len(words))
  poke(q.addr["wptr"], start + len(words))
  poke(q.addr["doorbell"], start + len(words))
  with pytest.raises(HCQError, match="program handle 999999, which is not loaded"): h.synchronize()
  np.testing.assert_array_equal((Tensor([1.0, 2.0], device="WEBGPU") + 1).numpy(), [2.0, 3.0])   # the queue runs on afterwards

def test_a_program_is_made_once_while_held_and_dropped_after(webgpu: Any) -> None:
  import gc
  from plugin_webgpu import iface_hcq
  src = Tensor(np.zeros(3, np.float32), device="WEBGPU")   # any compiled kernel's WGSL will do: build one of ours
  np.testing.assert_array_equal((src + 5).numpy(), [5.0, 5.0, 5.0])
  from plugin_webgpu.compiler import _pipelines
  wgsl = next(iter(_pipelines.values())).src.encode()
  a = webgpu.hcq.load_program("held", wgsl)
  assert webgpu.hcq.load_program("held", wgsl) is a and iface_hcq._programs[a.handle] is a
  handle = a.handle
  del a
  gc.collect()
  assert handle not in iface_hcq._programs   # nothing launches it any more: dropped with its pipeline
  b = webgpu.hcq.load_program("held", wgsl)
  assert b.handle > handle   # a handle is never reused: a stale LAUNCH can't run another program
