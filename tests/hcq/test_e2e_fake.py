"""The whole pipeline on the fake HCQ devices: tensors, caching, cross-device ordering by signals, Jit replay, failures."""
import numpy as np
import pytest
from core.helpers import Context
from core.hcq import HCQError

def T(x, dev):
  from core.tensor.tensor import Tensor
  return Tensor(np.asarray(x, dtype=np.float32), device=dev)

def test_elementwise_and_reduce(fake):
  a, b = np.arange(12, dtype=np.float32).reshape(3, 4), np.full((3, 4), 2, np.float32)
  out = ((T(a, "FAKE") + T(b, "FAKE")) * 3).sum(1).numpy()
  np.testing.assert_allclose(out, ((a + b) * 3).sum(1))
  assert any(op == 1 for _, op in fake["FAKE"].hcq.executed)   # the launches went through the fake command processor

def test_submission_is_cached_and_patched(fake):
  from core.engine import run
  t = T([1, 2, 3], "FAKE")
  r1 = (t + 1).numpy()
  n = len(run._submissions)
  r2 = (T([10, 20, 30], "FAKE") + 1).numpy()
  assert len(run._submissions) == n   # same schedule shape: the lowered submission was reused with new addresses
  np.testing.assert_allclose(r1, [2, 3, 4])
  np.testing.assert_allclose(r2, [11, 21, 31])

def test_cross_device_copy_waits_for_producer(fake):
  # the fake runs queues in reverse order (FAKE:1's COPY first): without the WAIT on FAKE's COMPUTE signal the copy reads stale data
  a = T(np.arange(8), "FAKE")
  x = (a * 2 + 1).to("FAKE:1")
  y = (x * 10).numpy()
  np.testing.assert_allclose(y, (np.arange(8) * 2 + 1) * 10)
  ex1 = fake["FAKE:1"].hcq.executed
  assert ("COPY:0", 3) in ex1   # a WAIT ran on FAKE:1's copy queue

def test_jit_replays_submission(fake):
  from core.tensor.jit import Jit
  from core.engine.run import HCQReplay
  @Jit
  def f(x, y): return (x * y + 1).sum()
  for i in range(5):
    a, b = np.arange(6, dtype=np.float32) + i, np.full(6, i, np.float32)
    assert float(f(T(a, "FAKE"), T(b, "FAKE")).numpy()) == pytest.approx(float((a * b + 1).sum()))
  assert isinstance(f.replay, HCQReplay)

def test_jit_replay_patches_only_the_slots_that_changed(fake):
  # replays whose inputs keep, swap or share their buffers: a run patches the slots whose address changed and skips the rest
  from core.tensor.jit import Jit
  @Jit
  def f(x, y): return (x * 2 + y).contiguous().realize()
  a = [np.arange(4, dtype=np.float32) + 10 * i for i in range(3)]
  ts = [T(v, "FAKE").realize() for v in a]
  for i, j in [(0, 1), (1, 2), (0, 1), (0, 1), (2, 1), (2, 0), (2, 0), (1, 1), (0, 2)]:
    np.testing.assert_allclose(f(ts[i], ts[j]).numpy(), a[i] * 2 + a[j])

def test_jit_replays_run_inside_the_devices_graph_replay(fake, monkeypatch):
  # the hook a device with device-side graphs uses (HCQDevice.graph_replay): entered around every replay, same key every time,
  # and the replay's launches run inside it
  import contextlib
  from core.tensor.jit import Jit
  hcq, seen = fake["FAKE"].hcq, []
  @contextlib.contextmanager
  def graph_replay(key):
    n = len(hcq.executed)
    yield
    seen.append((key, len(hcq.executed) > n))
  monkeypatch.setattr(hcq, "graph_replay", graph_replay)
  @Jit
  def f(x): return ((x * 2).contiguous() + 1).realize()
  for i in range(5): np.testing.assert_allclose(f(T(np.arange(4) + i, "FAKE")).numpy(), (np.arange(4) + i) * 2 + 1)
  assert len(seen) == 3 and all(k is f.replay and ran for k, ran in seen)   # calls 1 and 2 run eagerly and capture

def test_fault_names_command_and_device_recovers(fake):
  T([1, 2], "FAKE").realize()
  fake["FAKE"].hcq.fail_next = True
  with pytest.raises(HCQError) as e:
    (T([1, 2], "FAKE") * 5).numpy()
  msg = str(e.value)
  assert "FAKE" in msg and "COMPUTE:0" in msg and "fault in LAUNCH" in msg and "expected" in msg
  assert e.value.device == "FAKE" and e.value.queue == "COMPUTE:0" and "launch E_2" in msg and e.value.seen <= e.value.expected
  np.testing.assert_allclose((T([1, 2], "FAKE") * 7).numpy(), [7, 14])

def test_timeout_names_wait_and_device_recovers(fake):
  src = (T([1, 2, 3], "FAKE") + 1).realize()
  fake["FAKE:1"].hcq.stalled.add("COPY:0")
  with Context(HCQ_TIMEOUT=0.2), pytest.raises(HCQError) as e:
    src.to("FAKE:1").numpy()
  assert "FAKE:1" in str(e.value) and "COPY:0" in str(e.value) and "timeout" in str(e.value)
  fake["FAKE:1"].hcq.stalled.clear()
  np.testing.assert_allclose((T([4, 5, 6], "FAKE") + 1).to("FAKE:1").numpy(), [5, 6, 7])
