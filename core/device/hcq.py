"""The HCQ device contract: what a plugin's runtime offers core's command-queue pipeline (core/hcq), as one typed base class."""
from __future__ import annotations
import abc, ctypes
import numpy as np
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
  from core.device.buffer import Buffer
  from core.ir.ops import UOp

def handle_addr(buf: Buffer) -> int:
  """The address behind an allocated Buffer's allocator handle: an int, a ctypes object, or a numpy array (the built-in PYTHON
  device's host memory); allocated now if it is not yet, 0 for a zero-size buffer. A device whose addresses differ from its
  handles' says so in HCQDevice.addr."""
  if not buf.is_allocated(): buf.allocate()
  h = buf._buf
  if h is None: return 0
  if isinstance(h, int): return h
  return int(h.ctypes.data) if isinstance(h, np.ndarray) else ctypes.addressof(h)

@dataclass(frozen=True)
class RingLayout:
  """How a queue's ring takes command words. `unit`: bytes per count of its write pointer and doorbell (1, 2 or 4; a PM4
  queue counts dwords). `nop`: None when a submit's words may wrap from the ring's end to its start anywhere (the command
  processor reads the ring as a circle); else the dword that fills the ring's tail when a submit would not fit before the
  end, so the submit starts again at word 0 and no packet ever wraps (an SDMA engine needs this: it reads a packet's
  dwords in one burst)."""
  unit: int = 1
  nop: int | None = None

class HCQDevice(abc.ABC):
  """The command-queue side of a device, passed as `Compiled(..., hcq=...)`: core's HCQ pipeline runs whole schedules
  through it instead of calling `Compiled.runtime` per kernel. Queue names are "COMPUTE:n" and "COPY:n".

  Write-pointer protocol (what core's submit program does): the write pointer and the doorbell of a queue count units
  (`ring_layout(q).unit`) written since the queue was created and never wrap; the host copies a command buffer into the
  ring at `wptr` modulo the ring size, bumps `wptr`, then stores it into the doorbell, last. Core never puts more than
  `ring_size(q)` bytes of one schedule into a ring and waits for each schedule, so unread words are never overwritten."""
  device: str
  queues: tuple[str, ...]

  @abc.abstractmethod
  def ring_size(self, queue: str) -> int:
    """Bytes in `queue`'s ring (a power of two). Raises ValueError for a queue the device lacks."""

  def ring_layout(self, queue: str) -> RingLayout:
    """How words enter `queue`'s ring (the default: byte write pointers, wrapping anywhere)."""
    return RingLayout()

  @abc.abstractmethod
  def wait_signal(self, signal: Buffer, value: int, timeout_s: float) -> None:
    """Blocks until the uint64 timeline signal in `signal` reaches `value`. Raises core.hcq.HCQError on a device fault or
    when `timeout_s` seconds pass first."""

  def error(self) -> str | None:
    """The device's own report of a fault since the last call (core adds it to the HCQError it raises), or None."""
    return None

  def synchronize(self) -> None:
    """Waits until every queue ran everything its doorbell announced (Compiled.synchronize calls it)."""

  def timeline_signal(self, queue: str) -> Buffer | None:
    """The Buffer holding `queue`'s uint64 timeline signal, for another device whose queue waits on it (a cross-device
    dependency: it reads or maps that memory). None: the signal is not memory another device can reach."""
    return None

  def addr(self, buf: Buffer) -> int:
    """The device address of an allocated Buffer, as command words and kernel arguments carry it."""
    return handle_addr(buf)

  def buffer_of(self, u: UOp) -> Buffer | None:
    """The Buffer behind a BUFFER uop this device's pm_bufferize returned (None: a buffer of the schedule, core knows it)."""
    return None

  def needs_staging(self, other_device: str) -> bool:
    """True when a copy between this device and `other_device` must go through a host staging buffer (no DMA path)."""
    return False

  # bytes a TIMESTAMP command writes at its buffer, the time being the last 8 (NV's semaphore reports are 16: payload, then time)
  timestamp_size: int = 8

  def timestamp_ns(self, ticks: int) -> int:
    """A value a TIMESTAMP command wrote, in nanoseconds (the default: the device writes nanoseconds)."""
    return ticks

@dataclass(frozen=True)
class EncodeCtx:
  """The ctx a plugin's pm_lower rules get: the device's HCQ object and the submit being encoded (its device and queue;
  a command's words depend on its queue, e.g. AMD encodes PM4 on COMPUTE and SDMA on COPY)."""
  hcq: HCQDevice
  device: str
  queue: str

