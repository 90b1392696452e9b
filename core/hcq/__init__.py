"""The HCQ pipeline: lowers a schedule into command buffers and a compiled host submit program (see README.md)."""
from __future__ import annotations

class HCQError(RuntimeError):
  """A hardware command queue failed: a wait timed out or the device reported a fault. The message names the device,
  the queue, the command (its kind and index in its submit) and the signal value seen versus expected."""
  def __init__(self, msg: str, device: str | None = None, queue: str | None = None, command: str | None = None,
               seen: int | None = None, expected: int | None = None):
    super().__init__(msg)
    self.device, self.queue, self.command, self.seen, self.expected = device, queue, command, seen, expected
