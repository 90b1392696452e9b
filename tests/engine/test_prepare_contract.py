"""PreparableProgram.prepare's `estimates` keyword is optional to implement: a runtime whose prepare predates it (an out-of-tree
plugin built for PLUGIN_API 2.0) still loads and runs compiled files, and a prepare that takes it (by name or **kwargs) gets it."""
from __future__ import annotations
import functools
from typing import Any, Callable
import numpy as np
import pytest
from core.device.registry import Device
from core.engine.export import load_replay
from core.tensor.jit_export import export_jit
from tests.engine.test_export import RNG, captured, want

class _Program:
  """A third-party runtime's program around the device's own: launches as it does, and records what prepare was given."""
  seen: list[dict[str, Any]] = []
  def __init__(self, inner: Any): self.inner = inner
  def __call__(self, *bufs: Any, **launch: Any) -> float | None: return self.inner(*bufs, **launch)
  def _prepared(self, bufs: tuple, launch: dict[str, Any]) -> Callable[[], None]:
    type(self).seen.append(launch)
    launch = {k: v for k, v in launch.items() if k != "estimates"}
    return functools.partial(self.inner, *bufs, **launch)

class OldProgram(_Program):
  def prepare(self, *bufs: Any, global_size: tuple[int, ...] = (1, 1, 1), local_size: tuple[int, ...] = (1, 1, 1),
              vals: tuple[int, ...] = ()) -> Callable[[], None]:
    return self._prepared(bufs, {"global_size": global_size, "local_size": local_size, "vals": vals})

class NewProgram(_Program):
  def prepare(self, *bufs: Any, global_size: tuple[int, ...] = (1, 1, 1), local_size: tuple[int, ...] = (1, 1, 1),
              vals: tuple[int, ...] = (), estimates: dict[str, int] | None = None) -> Callable[[], None]:
    return self._prepared(bufs, {"global_size": global_size, "local_size": local_size, "vals": vals, "estimates": estimates})

class KwargsProgram(_Program):
  def prepare(self, *bufs: Any, **launch: Any) -> Callable[[], None]: return self._prepared(bufs, launch)

@pytest.mark.parametrize("cls,gets_estimates", [(OldProgram, False), (NewProgram, True), (KwargsProgram, True)])
def test_compiled_file_loads_on_a_runtime_with_either_prepare(cls, gets_estimates, monkeypatch):
  dev = Device[Device.DEFAULT]
  if dev.runtime is None: pytest.skip(f"{Device.DEFAULT} launches only through its command queues")
  g = export_jit(captured(), {})
  runtime = dev.runtime
  monkeypatch.setattr(dev, "runtime", lambda name, lib: cls(runtime(name, lib)))
  monkeypatch.setattr(cls, "seen", [])
  r = load_replay(g, Device.DEFAULT, queues=False)
  assert len(cls.seen) == len(r.calls) > 0
  assert all(("estimates" in s) == gets_estimates for s in cls.seen)
  if gets_estimates: assert all(s["estimates"] and s["estimates"]["ops"] > 0 for s in cls.seen), cls.seen
  for _ in range(2):
    x = RNG.standard_normal((3, 8)).astype(np.float32)
    (out,) = r([x.tobytes()])
    np.testing.assert_allclose(out.numpy(), want(x), rtol=1e-5, atol=1e-5)
