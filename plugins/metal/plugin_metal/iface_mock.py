"""METAL's MOCK interface (DEV=MOCK+METAL): the command-buffer programs in the rings are replayed on the host, each DISPATCH running
the kernel's own MSL built as C++ against the host <metal_stdlib> (hostbuild.py), so what is checked is the MSL the device gets."""
from __future__ import annotations
import ctypes, time
from typing import Any
from core.device.hcq import PerDevice, peek, poke
from plugin_metal.cmdbuf import Call
from plugin_metal.icb import Icb, IcbCommand
from plugin_metal.queues import MetalHCQ

class MockEncoder:
  """A compute/blit encoder in software: the bound pipeline and buffers, each call done at once on this thread (in order, so a
  memory barrier has nothing left to do). An ICB's object is its own copy of the commands, changed only by update_icb, so a
  replay runs what was encoded into the ICB, not what the program says now."""
  def __init__(self, hcq: MockHCQ):
    self.hcq = hcq
    self.pipeline: Any = None
    self.bound: dict[int, int] = {}
    self.dispatches = 0       # DISPATCH calls encoded directly
    self.icb_dispatches = 0   # commands run from ICBs

  def signal_value(self, addr: int) -> int: return peek(addr)
  def flush(self) -> None: pass

  def call(self, call: Call, f: tuple[int, ...]) -> None:
    if call is Call.SET_PIPELINE:
      if (k := self.hcq.programs.get(handle := peek(f[0]))) is None: raise ValueError(f"SET_PIPELINE of handle {handle}, which is not loaded")
      self.pipeline = k
    elif call is Call.SET_BUFFER: self.bound[f[0]] = f[1]
    elif call is Call.SET_BUFFER_AT: self.bound[f[0]] = peek(f[1])
    elif call is Call.DISPATCH:
      if self.pipeline is None: raise ValueError("DISPATCH with no pipeline set")
      n = max(self.bound, default=-1) + 1
      if (missing := [i for i in range(n) if i not in self.bound]): raise ValueError(f"DISPATCH of {self.pipeline.name}: no buffer at {missing}")
      self.pipeline.dispatch([self.bound[i] for i in range(n)], f[:3], f[3:])
      self.bound = {}
      self.dispatches += 1
    elif call is Call.BLIT_COPY: ctypes.memmove(f[0], f[1], f[2])
    elif call is Call.SIGNAL: poke(f[0], f[1])
    elif call is Call.TIMESTAMP: poke(f[0], time.monotonic_ns())
    # MEMORY_BARRIER: every call completes before the next; WAIT reaches here only once its signal arrived

  def build_icb(self, icb: Icb) -> None: icb.obj = list(icb.commands)
  def update_icb(self, icb: Icb, changed: list[int]) -> None:
    for i in changed: icb.obj[i] = icb.commands[i]

  def execute_icb(self, icb: Icb, start: int, count: int) -> None:
    # in order: a command's barrier (wait for the ones before it) holds already
    cmd: IcbCommand
    for cmd in icb.obj[start:start + count]:
      if (k := self.hcq.programs.get(cmd.pipeline)) is None: raise ValueError(f"ICB command with pipeline handle {cmd.pipeline}, which is not loaded")
      bound = dict(cmd.bindings)
      if (missing := [i for i in range(max(bound, default=-1) + 1) if i not in bound]): raise ValueError(f"ICB command of {k.name}: no buffer at {missing}")
      k.dispatch([bound[i] for i in range(len(bound))], cmd.grid, cmd.threadgroup)
      self.icb_dispatches += 1

class MockHCQ(MetalHCQ):
  """The MOCK's queues: replayed by MockEncoder; a program is its MSL's host build."""
  def new_encoder(self, queue: str) -> MockEncoder: return MockEncoder(self)
  def _load(self, name: str, lib: bytes) -> Any:
    from plugin_metal.hostbuild import host_kernel
    return host_kernel(name, lib.decode())

_by_device: PerDevice[MockHCQ] = PerDevice()

def mock_hcq(device: str) -> MockHCQ:
  """The MockHCQ of a device instance, one per process like the queues it stands for (a reopened device keeps its queues and
  signals, which core's cached submissions and host timelines refer to)."""
  return _by_device.get(device, lambda: MockHCQ(device))
