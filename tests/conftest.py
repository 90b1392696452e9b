"""Core's tests always check the validity rules of every stage (core/ir/spec.py), unless SPEC is set explicitly. Fixtures that
tests in several folders use."""
import gc, os
from typing import Callable
import pytest

os.environ.setdefault("SPEC", "1")

@pytest.fixture
def gc_state_at(monkeypatch: pytest.MonkeyPatch) -> Callable[[object, str], list[bool]]:
  """spy(module, name): module.name patched to note, at each call, whether the cyclic garbage collector is on; the notes."""
  def spy(module: object, name: str) -> list[bool]:
    seen: list[bool] = []
    orig = getattr(module, name)
    def noting(*a, **k):
      seen.append(gc.isenabled())
      return orig(*a, **k)
    monkeypatch.setattr(module, name, noting)
    return seen
  return spy
