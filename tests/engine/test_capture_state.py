"""The thread's capture state that every eager realize reads (core/engine/capture.py: state): which capture records the
schedules, and whether float literals stay in the kernels (a capture, keeping_literals) or are passed as arguments."""
import threading
from core.engine import capture

def test_state_follows_capturing_and_keeping_literals():
  assert capture.state() == (None, False) and capture.current() is None and capture.plain()
  cap = capture.Capture()
  with capture.capturing(cap):
    assert capture.state() == (cap, True) and capture.current() is cap and not capture.plain()
    seen = []
    t = threading.Thread(target=lambda: seen.append((capture.state(), capture.plain())))   # another thread has its own state
    t.start(); t.join()  # noqa: E702
    assert seen == [((None, False), True)]
  with capture.keeping_literals():
    assert capture.state() == (None, True) and not capture.plain()
    with capture.keeping_literals(): assert capture.state() == (None, True)
    assert capture.state() == (None, True)
  assert capture.state() == (None, False) and capture.plain()
