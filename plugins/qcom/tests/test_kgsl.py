"""KGSL+QCOM against a fake kernel driver: every ioctl's number must be one of msm_kgsl.h's for the argument's type and size
(tests/test_kgsl_layout.py checks those against the header), and the fake answers as the driver does: a draw context, GPU
objects mapped at their id's page, submissions of indirect buffers with their objlist, timestamps that retire when waited for.
Nothing here has run on an Adreno."""
from __future__ import annotations
import ctypes, mmap
from typing import Any
import pytest
from plugin_qcom import kgsl, pm4
from plugin_qcom.iface_kgsl import KGSLDriver, open_device

NAMES = {v: k for k, v in kgsl.IOCTLS.items()}

class FakeKGSL:
  """The kernel side of /dev/kgsl-3d0, recording what it was asked."""
  def __init__(self) -> None:
    self.calls: list[str] = []
    self.objs: dict[int, int] = {}   # id -> size
    self.next_id, self.ts, self.retired, self.closed = 1, 0, 0, False
    self.submits: list[tuple[list[tuple[int, int, int]], list[tuple[int, int, int, int]]]] = []
  def open(self, path: str) -> int: return 3
  def close(self, fd: int) -> None: self.closed = True
  def mmap(self, fd: int, size: int, offset: int) -> Any:
    assert fd == 3 and offset % 4096 == 0 and self.objs[offset // 4096] == size, (offset, size)
    return mmap.mmap(-1, size)
  def ioctl(self, fd: int, request: int, arg: ctypes.Structure) -> None:
    name = NAMES[request]
    # asm-generic/ioctl.h: the size field must be the argument's, the type KGSL's
    assert fd == 3 and request >> 16 & 0x3FFF == ctypes.sizeof(arg) and request >> 8 & 0xFF == kgsl.KGSL_IOC_TYPE, name
    self.calls.append(name)
    a: Any = arg
    if name == "IOCTL_KGSL_DRAWCTXT_CREATE":
      assert a.flags == kgsl.context_flags()
      a.drawctxt_id = 7
    elif name == "IOCTL_KGSL_GPUOBJ_ALLOC":
      assert a.size % 4096 == 0 and a.flags & kgsl.KGSL_MEMFLAGS_USE_CPU_MAP
      a.id, a.mmapsize = self.next_id, a.size
      self.objs[a.id] = a.size
      self.next_id += 1
    elif name == "IOCTL_KGSL_GPUOBJ_INFO": a.gpuaddr, a.size = 0x4_0000_0000 + a.id * 0x100000, self.objs[a.id]
    elif name == "IOCTL_KGSL_GPUOBJ_FREE": del self.objs[a.id]
    elif name == "IOCTL_KGSL_GPU_COMMAND":
      assert a.context_id == 7 and a.cmdsize == a.objsize == ctypes.sizeof(kgsl.kgsl_command_object) and a.numsyncs == 0
      ibs = (kgsl.kgsl_command_object * a.numcmds).from_address(a.cmdlist)
      objs = (kgsl.kgsl_command_object * a.numobjs).from_address(a.objlist) if a.numobjs else []
      self.submits.append(([(i.gpuaddr, i.size, i.flags) for i in ibs], [(o.gpuaddr, o.size, o.id, o.flags) for o in objs]))
      self.ts += 1
      a.timestamp = self.ts
    elif name == "IOCTL_KGSL_CMDSTREAM_READTIMESTAMP_CTXTID":
      assert a.context_id == 7 and a.type == kgsl.KGSL_TIMESTAMP_RETIRED
      a.timestamp = self.retired
    elif name == "IOCTL_KGSL_DEVICE_WAITTIMESTAMP_CTXTID":
      assert a.context_id == 7
      self.retired = max(self.retired, a.timestamp)   # the fake GPU finishes what is waited for
    elif name == "IOCTL_KGSL_DRAWCTXT_DESTROY": assert a.drawctxt_id == 7
    else: raise AssertionError(f"unexpected {name}")

def test_driver_calls() -> None:
  fake = FakeKGSL()
  drv = KGSLDriver(sys=fake)
  assert drv.context == 7
  obj = drv.alloc(100)
  assert obj.size == 4096 and obj.gpuaddr == 0x4_0010_0000 and fake.objs == {1: 4096}
  ctypes.memmove(obj.host, b"\x01\x02", 2)   # the mapping is host memory
  assert bytes(obj.mapping[:2]) == b"\x01\x02"
  ts = drv.submit([(obj.gpuaddr, 64)], [obj])
  assert ts == 1 and fake.submits == [([(obj.gpuaddr, 64, kgsl.KGSL_CMDLIST_IB)], [(obj.gpuaddr, 4096, 1, kgsl.KGSL_OBJLIST_MEMOBJ)])]
  assert drv.retired() == 0
  drv.wait(ts, 1000)
  assert drv.retired() == 1
  drv.free(obj)
  drv.close()
  assert fake.objs == {} and fake.closed
  assert fake.calls == ["IOCTL_KGSL_DRAWCTXT_CREATE", "IOCTL_KGSL_GPUOBJ_ALLOC", "IOCTL_KGSL_GPUOBJ_INFO", "IOCTL_KGSL_GPU_COMMAND",
                        "IOCTL_KGSL_CMDSTREAM_READTIMESTAMP_CTXTID", "IOCTL_KGSL_DEVICE_WAITTIMESTAMP_CTXTID",
                        "IOCTL_KGSL_CMDSTREAM_READTIMESTAMP_CTXTID", "IOCTL_KGSL_GPUOBJ_FREE", "IOCTL_KGSL_DRAWCTXT_DESTROY"]

def test_device_submits_the_ring_between_submitted_and_doorbell(clctx: Any) -> None:
  from core.device.buffer import Buffer
  from core.device.hcq import handle_addr
  from core.device.registry import Device
  from core.ir.dtype import dtypes
  fake = FakeKGSL()
  dev = open_device("KGSL+QCOM", None, sys=fake)
  hcq = dev.hcq
  with Device.installed({"KGSL+QCOM": dev}):
    # device addresses are the objects' GPU addresses, also inside an object (a view)
    buf = Buffer("KGSL+QCOM", 64, dtypes.float32).allocate()
    obj = dev.allocator.object_at(handle_addr(buf))
    assert hcq.addr(buf) == obj.gpuaddr and dev.allocator.gpu_address(handle_addr(buf) + 40) == obj.gpuaddr + 40
    assert hcq.ring_layout("COMPUTE:0").nop == pm4.nop()[0]
    ring, bell = hcq.queue_buffer("ring", "COMPUTE:0"), hcq.queue_buffer("doorbell", "COMPUTE:0")
    base, n = hcq.addr(ring), hcq._ring_size // 4
    doorbell = ctypes.c_uint64.from_address(handle_addr(bell))
    hcq._kick()
    assert fake.submits == []   # nothing announced yet
    doorbell.value = 10
    assert hcq._step() and not hcq._step()   # submitted once
    ring_obj = (base, dev.allocator.object_at(handle_addr(ring)).size, dev.allocator.object_at(handle_addr(ring)).id, kgsl.KGSL_OBJLIST_MEMOBJ)
    assert fake.submits == [([(base, 40, kgsl.KGSL_CMDLIST_IB)], [ring_obj])]
    assert hcq._busy()   # timestamp 1 not retired
    fake.retired = 1
    assert hcq._busy() == []
    # words that run over the ring's end: two indirect buffers, the tail and the start
    hcq.submitted = doorbell.value = n - 3
    doorbell.value = n + 5
    hcq._kick()
    assert fake.submits[-1][0] == [(base + 4 * (n - 3), 12, kgsl.KGSL_CMDLIST_IB), (base, 20, kgsl.KGSL_CMDLIST_IB)]
    fake.retired = 2
    hcq.synchronize(timeout_s=5)

def test_a_submission_nobody_waits_for_reaches_the_driver(clctx: Any) -> None:
  # the driver has no doorbell: core's submitted_without_wait() (a run with wait=False) hands it the announced words, which no
  # wait would ever hand on
  from core.device.hcq import handle_addr
  from core.device.registry import Device
  fake = FakeKGSL()
  dev = open_device("KGSL+QCOM", None, sys=fake)
  hcq = dev.hcq
  with Device.installed({"KGSL+QCOM": dev}):
    ring, bell = hcq.queue_buffer("ring", "COMPUTE:0"), hcq.queue_buffer("doorbell", "COMPUTE:0")
    ctypes.c_uint64.from_address(handle_addr(bell)).value = 6
    hcq.submitted_without_wait()
    obj = dev.allocator.object_at(handle_addr(ring))
    assert fake.submits == [([(obj.gpuaddr, 24, kgsl.KGSL_CMDLIST_IB)], [(obj.gpuaddr, obj.size, obj.id, kgsl.KGSL_OBJLIST_MEMOBJ)])]
    fake.retired = 1
    hcq.synchronize(timeout_s=5)

def test_without_the_driver_node_the_device_says_what_to_use() -> None:
  with pytest.raises(RuntimeError, match="no Adreno kernel driver .* DEV=CL\\+QCOM"): open_device("KGSL+QCOM", None, node="/nonexistent/kgsl")
