"""A first call's general path: scheduling, codegen and compiles run with the cyclic garbage collector off (a cold ResNet-18
training step set off ~590 collections, 5 of them full). Values from numpy."""
import gc
import numpy as np
from core import Tensor
import core.engine.realize as realize

def test_the_general_path_runs_without_the_collector_and_restores_it(monkeypatch):
  seen: list[bool] = []
  orig = realize.create_schedule
  def spy(*a, **k):
    seen.append(gc.isenabled())
    return orig(*a, **k)
  monkeypatch.setattr(realize, "create_schedule", spy)
  x = np.arange(29 * 31, dtype=np.float32).reshape(29, 31)
  assert gc.isenabled()
  out = ((Tensor(x) + 7) * 2).max(0).numpy()
  assert seen == [False] and gc.isenabled()
  np.testing.assert_allclose(out, ((x + 7) * 2).max(0))
