"""What a Jit capture needs from the engine: while a capture is current on a thread, every schedule realize() runs on that
thread is also recorded in it. The Jit itself lives at the tensor level (core/tensor/jit.py); the engine knows only this hook.
The current capture is per thread, so another thread's work never lands in a Jit capture."""
from __future__ import annotations
import contextlib, threading
from typing import Any, Iterator

class Capture:
  """The schedule items run while capturing, in order."""
  def __init__(self) -> None: self.items: list[Any] = []
  def add(self, items: list[Any]) -> None: self.items.extend(items)

_local = threading.local()

def current() -> Capture | None:
  """The capture of this thread, or None."""
  # the thread's own dict: getattr with a default on a thread-local costs ~1 us when the name is unset (every eager op)
  return _local.__dict__.get("capturing")

@contextlib.contextmanager
def capturing(cap: Capture | None) -> Iterator[Capture | None]:
  """Makes `cap` this thread's capture for the block (None: nothing is recorded in it), then restores the previous one."""
  prev, _local.capturing = current(), cap
  try: yield cap
  finally: _local.capturing = prev

def state() -> tuple[Capture | None, bool]:
  """(current(), whether realizes on this thread compile float literals into their kernels: a capture does, see
  keeping_literals), in one read of the thread's state: every eager realize asks both."""
  d = _local.__dict__
  cap = d.get("capturing")
  return cap, cap is not None or d.get("keep_literals", False)

def plain() -> bool:
  """Whether realizes on this thread are plain eager ones: no capture and no literal keeping (state() == (None, False)),
  without state()'s tuple: the eager op cache asks on every op."""
  d = _local.__dict__
  return d.get("capturing") is None and not d.get("keep_literals", False)

@contextlib.contextmanager
def keeping_literals() -> Iterator[None]:
  """Eager realizes in the block keep float literals in their kernels, as a capture does, instead of passing them as
  arguments: a Jit's first (eager) call then compiles the kernels its capture replays, not a second set of its own."""
  prev, _local.keep_literals = _local.__dict__.get("keep_literals", False), True
  try: yield
  finally: _local.keep_literals = prev
