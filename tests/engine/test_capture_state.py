"""The thread's capture state that every eager realize reads (core/engine/capture.py: state): which capture records the
schedules, and whether float literals stay in the kernels (a capture, keeping_literals) or are passed as arguments."""
import threading
import numpy as np
from core import Tensor
from core.engine import capture, realize as R

def test_state_follows_capturing_and_keeping_literals():
  assert capture.state() == (None, False) and capture.current() is None
  cap = capture.Capture()
  with capture.capturing(cap):
    assert capture.state() == (cap, True) and capture.current() is cap
    seen = []
    t = threading.Thread(target=lambda: seen.append(capture.state()))   # another thread has its own state
    t.start(); t.join()  # noqa: E702
    assert seen == [(None, False)]
  with capture.keeping_literals():
    assert capture.state() == (None, True)
    with capture.keeping_literals(): assert capture.state() == (None, True)
    assert capture.state() == (None, True)
  assert capture.state() == (None, False)

def test_kept_literals_schedule_per_value_and_lifted_ones_share(monkeypatch):
  R.schedules.clear()
  made = [0]
  real = R.create_schedule
  def counting(roots, *args):
    made[0] += 1
    return real(roots, *args)
  monkeypatch.setattr(R, "create_schedule", counting)
  xn = np.linspace(-2, 2, 32, dtype=np.float32)
  x = Tensor(xn).realize()
  with capture.keeping_literals():
    for v in (2.5, 3.5): np.testing.assert_allclose((x * v).numpy(), xn * np.float32(v))
  assert made[0] == 2   # each value is structure: its own schedule
  for v in (4.5, 5.5, 2.5): np.testing.assert_allclose((x * v).numpy(), xn * np.float32(v))
  assert made[0] == 3   # lifted: one schedule for every value
