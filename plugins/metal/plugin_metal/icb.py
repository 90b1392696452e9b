"""Indirect command buffers (ICBs) for Jit replays: the compute calls between two other calls (signal, wait, blit, timestamp) of a
Jit's command-buffer program, as Metal's ICB model holds them. Each command has its own pipeline, its buffers bound by index
(an address: MTL turns it into an MTLBuffer and an offset), its threadgroups per grid and threads per threadgroup, and a barrier
flag (it waits for every command before it: an ICB's commands run concurrently otherwise, so a MEMORY_BARRIER in the program
becomes the barrier of the next dispatch).

A Jit replay puts the same words into the rings every time (core patches only kernel arguments, HCQDevice.graph_replay), so its
n-th compute run on a queue is the n-th ICB of that Jit: built on the first replay, and on each later one only the commands whose
pipeline, bindings or sizes changed are encoded again (in practice the bindings of the inputs and outputs; a variable is bound
as the kernarg memory holding it, which the host patches in place), then it runs with one execute call in one compute encoder.
A run whose words differ from the ICB's (a program that changed) is built anew: the words are compared on every replay."""
from __future__ import annotations
from dataclasses import dataclass, field
from typing import Any, Callable
from plugin_metal.cmdbuf import Call

COMPUTE_CALLS = frozenset({Call.SET_PIPELINE, Call.SET_BUFFER, Call.SET_BUFFER_AT, Call.DISPATCH, Call.MEMORY_BARRIER})
MAX_BINDINGS = 31   # buffer indices an ICB command can bind (Metal's limit for maxKernelBufferBindCount); more: encoded directly

@dataclass(frozen=True)
class IcbCommand:
  """One concurrent dispatch of an ICB: pipeline handle (prep.py), {buffer index: address}, grid (threadgroups), threadgroup
  (threads), and whether it waits for the commands before it."""
  pipeline: int
  bindings: tuple[tuple[int, int], ...]
  grid: tuple[int, int, int]
  threadgroup: tuple[int, int, int]
  barrier: bool

def commands_of(calls: list[tuple[Call, tuple[int, ...]]], peek: Callable[[int], int]) -> list[IcbCommand]:
  """The ICB commands of a run of compute calls, with every value read now (pipeline handles and kernarg slots from memory)."""
  out: list[IcbCommand] = []
  pipeline, bound, barrier = 0, {}, False
  for call, f in calls:
    if call is Call.SET_PIPELINE: pipeline = peek(f[0])
    elif call is Call.SET_BUFFER: bound[f[0]] = f[1]
    elif call is Call.SET_BUFFER_AT: bound[f[0]] = peek(f[1])
    elif call is Call.MEMORY_BARRIER: barrier = True
    elif call is Call.DISPATCH:
      out.append(IcbCommand(pipeline, tuple(sorted(bound.items())), (f[0], f[1], f[2]), (f[3], f[4], f[5]), barrier))
      bound, barrier = {}, False
    else: raise ValueError(f"{call.name} is not a compute call")
  return out

def fits(commands: list[IcbCommand]) -> bool:
  """Whether an ICB can hold these commands (a kernel binding an index past Metal's limit is encoded directly instead)."""
  return bool(commands) and all(i < MAX_BINDINGS for c in commands for i, _ in c.bindings)

@dataclass
class Icb:
  """An ICB of one compute run: the calls it was built from (compared on every replay), its commands as last encoded, the
  interface's object (MTL: the MTLIndirectCommandBuffer; MOCK: None) and what was done with it."""
  calls: tuple[tuple[Call, tuple[int, ...]], ...]
  commands: list[IcbCommand]
  obj: Any = None
  release: Callable[[Any], None] | None = None
  encoded: int = 0     # commands encoded into it (all of them when built, then only the changed ones)
  executed: int = 0    # execute calls
  def __del__(self) -> None:
    if self.release is not None and self.obj is not None: self.release(self.obj)

def max_bind_count(commands: list[IcbCommand]) -> int:
  return max((i + 1 for c in commands for i, _ in c.bindings), default=1)

@dataclass
class GraphState:
  """The ICBs of one Jit capture on one queue, in the order its compute runs reach the queue, and the next run's position."""
  icbs: list[Icb] = field(default_factory=list)
  next: int = 0
