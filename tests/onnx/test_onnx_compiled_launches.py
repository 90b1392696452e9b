"""How a compiled file's replay launches its kernels on the CPU: each multi-block kernel runs on the calling thread or on the pool
as the kernel's estimates say (runtime.serial_by_estimate, the rule the Jit's queue launches follow), through direct launches and
through the command queues alike, never by timing launches at load (that choice differed from the Jit's and with the host's
load); the outputs stay those of a fresh runner."""
import numpy as np
import pytest
from core.testing.helpers import ci_run
if not ci_run():   # the testing extra installs onnx: the core job must import it
  pytest.importorskip("onnx")
from core.device.registry import Device  # noqa: E402
from core.onnx import OnnxRunner, load_compiled  # noqa: E402
from core.onnx.testing import compiled_file, mobilenet  # noqa: E402

pytestmark = pytest.mark.skipif(Device.canonicalize(Device.DEFAULT).split(":")[0] != "CPU", reason="the CPU's launches")

@pytest.fixture(scope="module")
def mobilenet_file(tmp_path_factory):
  return compiled_file(mobilenet, str(tmp_path_factory.mktemp("compiled")))

def _block_counts(monkeypatch, queues: bool) -> list[int]:
  """Records the block count of every multi-block launch of the replays loaded from now on (negative: on the calling thread)."""
  from plugin_cpu import queue as CQ, runtime
  counts: list[int] = []
  if queues:
    enc = CQ.enc_launch
    monkeypatch.setattr(CQ, "enc_launch", lambda fn, ka, nargs, nb: (counts.append(nb) if abs(nb) > 1 else None, enc(fn, ka, nargs, nb))[1])
  else:
    real = runtime._guarded_launcher()
    def launch(fn, n, args, nb, *out):
      if abs(nb.value) > 1: counts.append(nb.value)
      return real(fn, n, args, nb, *out)
    monkeypatch.setattr(runtime, "_guarded_launcher", lambda: launch)
  return counts

@pytest.mark.parametrize("queues", [False, True])
@pytest.mark.parametrize("by_estimate", ["serial", "pool"])
def test_replay_launches_by_the_kernels_estimates(mobilenet_file, queues, by_estimate, monkeypatch):
  from plugin_cpu import runtime
  from plugin_cpu.renderer import THREADS
  if THREADS == 1: pytest.skip("one thread: no kernel has several blocks")
  model, shape, path = mobilenet_file
  # the estimates' bound says the opposite of what timing the launches would choose
  monkeypatch.setattr(runtime, "SERIAL_OPS", 1 << 40 if by_estimate == "serial" else 0)
  monkeypatch.setattr(runtime, "SERIAL_MEM", 1 << 40)
  monkeypatch.setattr(runtime, "SERIAL_US", 0.0 if by_estimate == "serial" else 1e9)
  counts = _block_counts(monkeypatch, queues)
  replay = load_compiled(path, queues=queues)
  rng = np.random.default_rng(7)
  for _ in range(runtime.SERIAL_PROBES + 2):   # past the launches a timing choice would probe
    x = rng.standard_normal(shape).astype(np.float32)
    np.testing.assert_allclose(replay({"x": x})[model.graph.output[0].name], OnnxRunner(model)({"x": x})[model.graph.output[0].name].numpy(),
                               rtol=1e-4, atol=1e-5)
  assert counts, "mobilenet's convolutions run several blocks"
  assert all(c < 0 for c in counts) if by_estimate == "serial" else all(c > 0 for c in counts), counts
