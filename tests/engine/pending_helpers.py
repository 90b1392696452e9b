"""What the pending-plan tests count: calls a function makes while it runs, and the replays a repeated eager op runs."""
from typing import Any, Callable
from core import Tensor
from core.engine import realize as R
from core.tensor import plans

def calls(module: Any, name: str, fn: Callable[[], Any], monkeypatch: Any) -> int:
  """How many times fn() calls module.name."""
  n = [0]
  f = getattr(module, name)
  def counting(*args: Any) -> Any:
    n[0] += 1
    return f(*args)
  monkeypatch.setattr(module, name, counting)
  try: fn()
  finally: monkeypatch.setattr(module, name, f)
  return n[0]

def replays(fn: Callable[[], Any], monkeypatch: Any) -> int:
  """How many times fn() rebuilds a plan's nodes (plans.rebuild, which every replay of a recorded plan calls)."""
  return calls(plans, "rebuild", fn, monkeypatch)

def assert_pending_hit(r: Tensor, monkeypatch: Any) -> None:
  """r is a pending plan (no node built) and realizes as one eager op cache hit that rebuilds nothing."""
  assert type(r.__dict__.get("_pending")) is plans.PendingPlan and "uop" not in r.__dict__
  h0 = R.eager_ops.hits
  assert replays(r.realize, monkeypatch) == 0 and R.eager_ops.hits == h0 + 1
