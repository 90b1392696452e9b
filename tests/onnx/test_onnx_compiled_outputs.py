"""A compiled model's outputs on a host-memory device are copied out of numpy views of its output buffers made by the first call,
not through Buffer.copyout on every call: each call still returns its own writable arrays, which later calls leave alone."""
import numpy as np
import pytest
from core.testing.helpers import ci_run
if not ci_run():   # the testing extra installs onnx: the core job must import it
  pytest.importorskip("onnx")
from core.device.buffer import Buffer  # noqa: E402
from core.device.registry import Device  # noqa: E402
from core.onnx import OnnxRunner, load_compiled  # noqa: E402
from core.onnx.testing import compiled_file, resnet  # noqa: E402

pytestmark = pytest.mark.skipif(Device.canonicalize(Device.DEFAULT).split(":")[0] != "CPU", reason="host memory outputs")

@pytest.mark.parametrize("queues", [False, True])
def test_outputs_are_fresh_copies_without_copyout(queues, tmp_path, monkeypatch):
  model, shape, path = compiled_file(resnet, str(tmp_path))
  m = load_compiled(path, queues=queues)
  out = model.graph.output[0].name
  xs = [np.random.default_rng(i).standard_normal(shape).astype(np.float32) for i in range(3)]
  m({"x": xs[0]})   # the first call makes the views
  copyouts: list[int] = []
  real = Buffer.copyout
  monkeypatch.setattr(Buffer, "copyout", lambda self, mv: (copyouts.append(1), real(self, mv))[1])
  got = [m({"x": x})[out] for x in xs]
  assert copyouts == []
  for x, g in zip(xs, got):   # each call's own values, not the last call's
    np.testing.assert_allclose(g, OnnxRunner(model)({"x": x})[out].numpy(), rtol=1e-4, atol=1e-5)
    assert g.flags.writeable and g.flags.c_contiguous and g.flags.owndata and g.dtype == np.float32 and g.shape == (2, 10)
