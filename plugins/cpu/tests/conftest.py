"""Makes plugin_cpu importable from a source checkout when the plugin is not installed; the started-HCQ fixture two test files share."""
import importlib.util, pathlib, sys
if importlib.util.find_spec("plugin_cpu") is None: sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
root = pathlib.Path(__file__).resolve().parents[3]
if importlib.util.find_spec("core") is None: sys.path.insert(0, str(root))

import pytest

@pytest.fixture
def cpu_hcq():
  """A CPU HCQ device of its own, its queues started (the first wait starts them and reads the faults), closed after the test."""
  from core.device.buffer import Buffer
  from core.ir.dtype import dtypes
  from plugin_cpu import iface_hcq as H
  d = H.CPUHCQ("CPU", ring_size=4096)
  d.wait_signal(Buffer("CPU", 1, dtypes.uint64).allocate(), 0, 5)
  yield d
  d.close()
