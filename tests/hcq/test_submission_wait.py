"""Submission.wait looks each queue's HCQ object up once, not on every run, and again after a device change."""
import numpy as np
from core.device.registry import Device

def test_wait_follows_the_device_a_name_means_now(fake):
  import fakehcq
  from core.engine import run
  from core.tensor.tensor import Tensor
  x = Tensor(np.arange(4, dtype=np.float32), device="FAKE")
  np.testing.assert_allclose((x + 1).numpy(), np.arange(4) + 1)
  sub = next(s for s in run._submissions.values() if s._waits and s._waits[0][0] == "FAKE")
  new = fakehcq.make_fake("FAKE")
  calls: list[int] = []
  inner = new.hcq.wait_signal
  def wait_signal(*args, **kwargs):
    calls.append(args[1])
    return inner(*args, **kwargs)
  new.hcq.wait_signal = wait_signal
  sub.resubmit()
  assert calls == []   # FAKE is still the fixture's device
  with Device.installed({"FAKE": new}):
    sub.resubmit()
    sub.resubmit()
  assert len(calls) == 2 and calls[1] == calls[0] + 1   # each run waited through the device FAKE names now, for its own value

def test_run_slots_allocates_a_new_buffer_and_patches_it_in(fake):
  from core.device.buffer import Buffer
  from core.engine import run
  from core.ir.dtype import dtypes
  from core.tensor.tensor import Tensor
  x = Tensor(np.arange(4, dtype=np.float32), device="FAKE").realize()
  np.testing.assert_allclose((x + 1).numpy(), np.arange(4) + 1)
  sub = next(s for s in run._submissions.values() if s._waits and s._waits[0][0] == "FAKE")
  out = Buffer("FAKE", 4, dtypes.float32)   # slot 0: the kernel's output, first in the schedule's buffers
  assert not out.is_allocated()
  sub.run_slots([(0, 0)], [out])
  assert out.is_allocated()
  np.testing.assert_allclose(np.frombuffer(bytes(out.as_buffer()), np.float32), np.arange(4) + 1)

def test_a_run_nobody_waits_for_tells_the_device(fake):
  # a device whose command processor sleeps while idle (CPU's workers) hears of a submit no wait will run; one that waits, not
  from core.engine import run
  from core.tensor.tensor import Tensor
  x = Tensor(np.arange(4, dtype=np.float32), device="FAKE")
  np.testing.assert_allclose((x + 1).numpy(), np.arange(4) + 1)
  sub = next(s for s in run._submissions.values() if s._waits and s._waits[0][0] == "FAKE")
  hcq, calls = Device["FAKE"].hcq, []
  hcq.submitted_without_wait = lambda: calls.append(1)
  sub.resubmit()
  assert calls == []
  sub.resubmit(wait=False)
  assert calls == [1]
  sub.wait()
