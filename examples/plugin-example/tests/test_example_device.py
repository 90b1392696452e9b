"""plugin-example end to end, installed the way users install it: a kernel on DEV=EXAMPLE checked against numpy."""
from __future__ import annotations
import numpy as np
import pytest
from core.device.buffer import Buffer
from core.device.plugins import PluginManager
from core.device.registry import Device
from core.ir.dtype import dtypes
from core.ir.ops import AxisType, Ops, UOp

def test_entry_point_and_hooks() -> None:
  pm = PluginManager()
  spec = pm.spec("EXAMPLE")
  rec = next(r for r in pm.records() if "EXAMPLE" in r.devices)
  assert rec.dist == "plugin-example" and rec.error is None and spec.renderers.keys() == {"C"} and spec.available()

@pytest.mark.parametrize("n", [1, 7, 1000])
def test_fused_multiply_add_matches_numpy(n: int) -> None:
  dev = Device["EXAMPLE"]
  out, a, b = (UOp.param(i, dtypes.float32.ptr(n)) for i in range(3))
  r = UOp(Ops.RANGE, dtypes.int32, (UOp.const(dtypes.int32, n),), (0, AxisType.LOOP))
  k = out.index(r).store(a.index(r).load() * b.index(r).load() + UOp.const(dtypes.float32, 0.5)).end(r)
  prg = dev.runtime("fma", dev.compiler.compile_cached(dev.renderer.render("fma", list(k.toposort()))))
  rng = np.random.default_rng(n)
  x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
  bufs = [Buffer("EXAMPLE", n, dtypes.float32).allocate()] + [Buffer("EXAMPLE", n, dtypes.float32).copyin(memoryview(v)) for v in (x, y)]
  assert prg(*[bb._buf for bb in bufs], wait=True) >= 0
  np.testing.assert_allclose(bufs[0].numpy(), x * y + np.float32(0.5), rtol=1e-6)
