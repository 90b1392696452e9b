"""What a Jit capture needs from the engine: while `capturing` is set, every schedule realize() runs is also recorded in it.
The Jit itself lives at the tensor level (core/tensor/jit.py); the engine knows only this hook."""
from __future__ import annotations
from typing import Any

class Capture:
  """The schedule items run while capturing, in order."""
  def __init__(self) -> None: self.items: list[Any] = []
  def add(self, items: list[Any]) -> None: self.items.extend(items)

capturing: Capture | None = None
