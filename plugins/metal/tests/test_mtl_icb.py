"""The macOS runtime's indirect-command-buffer calls, without a Mac: objc.msg is replaced by a recorder that hands out object ids,
and the objc messages the MTL encoder sends to build, patch and run an ICB are checked in order (selectors, argument values and
C types). This checks the call sequence written from Apple's documentation, not that Metal accepts it."""
from __future__ import annotations
import ctypes
from typing import Any
import pytest
from plugin_metal import objc
from plugin_metal.cmdbuf import Call
from plugin_metal.icb import Icb, commands_of

class Recorder:
  """Stands in for objc.msg: records (receiver, selector, arguments as plain values) and returns a new object id for a method
  that returns an object (a few scalar getters answer fixed values)."""
  SCALARS = {"maxTotalThreadsPerThreadgroup": 1024, "contents": 0}
  def __init__(self) -> None:
    self.calls: list[tuple[Any, str, tuple[Any, ...]]] = []
    self.next = 1000
  def plain(self, a: Any) -> Any:
    if isinstance(a, objc.MTLSize): return (a.width, a.height, a.depth)
    if isinstance(a, objc.NSRange): return (a.location, a.length)
    if isinstance(a, ctypes.Array): return list(a)
    return a
  def __call__(self, obj: Any, sel: str, *args: Any, restype: Any = ctypes.c_void_p, argtypes: tuple[Any, ...] = ()) -> Any:
    # the C types given must cover every argument that is not an object (objc_msgSend is called through that prototype)
    for a, t in zip(args, tuple(argtypes) + (ctypes.c_void_p,) * (len(args) - len(argtypes))):
      if isinstance(a, (objc.MTLSize, objc.NSRange)): assert t is type(a), (sel, a, t)
      elif isinstance(a, bool): assert t is ctypes.c_bool, (sel, a, t)
    self.calls.append((obj, sel, tuple(self.plain(a) for a in args)))
    if sel in self.SCALARS: return self.SCALARS[sel]
    if sel == "retain": return obj
    if restype is None: return None
    self.next += 1
    return self.next
  def sels(self) -> list[str]: return [s for _, s, _ in self.calls if s not in ("release", "retain")]

@pytest.fixture
def rec(monkeypatch: pytest.MonkeyPatch) -> Recorder:
  r = Recorder()
  monkeypatch.setattr(objc, "msg", r)
  monkeypatch.setattr(objc, "_cls", lambda name: f"class {name}")
  monkeypatch.setattr(objc, "_libs", lambda: (type("objc", (), {"objc_autoreleasePoolPush": staticmethod(lambda: 1),
                                                                 "objc_autoreleasePoolPop": staticmethod(lambda p: None)}), None))
  return r

def test_pipelines_support_indirect_command_buffers(rec: Recorder) -> None:
  objc.new_pipeline(7, "kernel void k() {}", "k")
  sels = rec.sels()
  i = sels.index("setSupportIndirectCommandBuffers:")
  assert rec.calls[[c[1] for c in rec.calls].index("setSupportIndirectCommandBuffers:")][2] == (True,)
  assert sels[i - 1] == "setComputeFunction:" and sels[i + 1] == "newComputePipelineStateWithDescriptor:options:reflection:error:"
  assert "newComputePipelineStateWithFunction:error:" not in sels

def test_icb_descriptor_and_creation(rec: Recorder) -> None:
  icb = objc.new_icb(7, 3, 4)
  got = list(rec.calls)
  assert got[0] == ("class MTLIndirectCommandBufferDescriptor", "alloc", ())
  assert [(s, a) for o, s, a in got[2:6]] == [("setCommandTypes:", (32,)), ("setInheritBuffers:", (False,)),
                                              ("setInheritPipelineState:", (False,)), ("setMaxKernelBufferBindCount:", (4,))]
  desc = got[2][0]   # what init returned: the descriptor the setters go to
  assert got[6] == (7, "newIndirectCommandBufferWithDescriptor:maxCommandCount:options:", (desc, 3, objc.MTLResourceStorageModeShared))
  assert got[7] == (desc, "release", ()) and icb not in (0, None)

def test_encoder_builds_patches_and_executes_an_icb(rec: Recorder) -> None:
  from plugin_metal.iface_mtl import ALLOCATIONS, MtlEncoder, Pipeline
  # two MTLBuffers (ids 501, 502) at host addresses; kernarg slots and pipeline images are plain memory read through `mem`
  ALLOCATIONS.add(0x10000, 501, 0x1000)
  ALLOCATIONS.add(0x20000, 502, 0x100)
  try:
    class Hcq: dev, encoded = 7, {}
    hcq = Hcq()
    hcq.programs = {1: Pipeline(7, "kernel void a() {}", "a"), 2: Pipeline(7, "kernel void b() {}", "b")}  # type: ignore[attr-defined]
    enc = MtlEncoder(hcq)  # type: ignore[arg-type]
    mem = {0x900: 1, 0x908: 2, 0x910: 0x10040, 0x918: 0x20000}
    calls = [(Call.SET_PIPELINE, (0x900,)), (Call.SET_BUFFER_AT, (0, 0x910)), (Call.SET_BUFFER, (1, 0x10080)), (Call.DISPATCH, (4, 1, 1, 32, 1, 1)),
             (Call.MEMORY_BARRIER, ()), (Call.SET_PIPELINE, (0x908,)), (Call.SET_BUFFER_AT, (0, 0x918)), (Call.DISPATCH, (2, 3, 1, 8, 8, 1))]
    psos = {1: hcq.programs[1].pso, 2: hcq.programs[2].pso}  # type: ignore[attr-defined]
    icb = Icb(tuple(calls), commands_of(calls, mem.__getitem__))
    rec.calls.clear()
    enc.build_icb(icb)
    sels = rec.sels()
    assert sels[:6] == ["alloc", "init", "setCommandTypes:", "setInheritBuffers:", "setInheritPipelineState:", "setMaxKernelBufferBindCount:"]
    assert rec.calls[5][2] == (2,)   # buffer indices 0 and 1
    obj = icb.obj
    cmd = lambda i: [c for c in rec.calls if c[1] == "indirectComputeCommandAtIndex:" and c[2] == (i,)]
    assert cmd(0) and cmd(1)
    seq = [(s, a) for o, s, a in rec.calls[rec.calls.index(cmd(0)[0]):]]
    assert seq[:6] == [("indirectComputeCommandAtIndex:", (0,)), ("reset", ()), ("setComputePipelineState:", (psos[1],)),
                       ("setKernelBuffer:offset:atIndex:", (501, 0x40, 0)), ("setKernelBuffer:offset:atIndex:", (501, 0x80, 1)),
                       ("concurrentDispatchThreadgroups:threadsPerThreadgroup:", ((4, 1, 1), (32, 1, 1)))]
    assert seq[6] == ("clearBarrier", ())
    assert seq[7:13] == [("indirectComputeCommandAtIndex:", (1,)), ("reset", ()), ("setComputePipelineState:", (psos[2],)),
                         ("setKernelBuffer:offset:atIndex:", (502, 0, 0)),
                         ("concurrentDispatchThreadgroups:threadsPerThreadgroup:", ((2, 3, 1), (8, 8, 1))), ("setBarrier", ())]
    assert all(o == obj for o, s, _ in rec.calls if s == "indirectComputeCommandAtIndex:")
    # a replay where the second kernel's output moved: only command 1 is encoded again
    rec.calls.clear()
    mem[0x918] = 0x20010
    new = commands_of(calls, mem.__getitem__)
    assert [i for i, (a, b) in enumerate(zip(icb.commands, new)) if a != b] == [1]
    icb.commands = new
    enc.update_icb(icb, [1])
    assert [(s, a) for o, s, a in rec.calls][:4] == [("indirectComputeCommandAtIndex:", (1,)), ("reset", ()), ("setComputePipelineState:", (psos[2],)),
                                                      ("setKernelBuffer:offset:atIndex:", (502, 0x10, 0))]
    assert not any(s == "indirectComputeCommandAtIndex:" and a == (0,) for _, s, a in rec.calls)
    # the run: one compute encoder, every referenced buffer made resident, one execute over the range, end; then commit
    rec.calls.clear()
    enc.execute_icb(icb, 0, 2)
    enc.flush()
    seq = [(s, a) for o, s, a in rec.calls if s not in ("retain", "release")]
    assert [s for s, _ in seq] == ["commandBuffer", "computeCommandEncoder", "useResources:count:usage:", "executeCommandsInBuffer:withRange:",
                                   "endEncoding", "commit"]
    assert seq[2][1] == ([501, 502], 2, objc.MTLResourceUsageRead | objc.MTLResourceUsageWrite)
    assert seq[3][1] == (obj, (0, 2))
  finally:
    ALLOCATIONS.remove(0x10000)
    ALLOCATIONS.remove(0x20000)
