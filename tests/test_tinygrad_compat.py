"""tools/tinygrad_compat: the `tinygrad` shim maps tinygrad's public names onto core's own objects, and the runner sorts
skips. The shim is imported in a child process so no module named `tinygrad` lingers in this one."""
from __future__ import annotations
import os, pathlib, subprocess, sys, textwrap
import xml.etree.ElementTree as ET

ROOT = pathlib.Path(__file__).resolve().parent.parent
TOOL = ROOT / "tools" / "tinygrad_compat"

CHECK = textwrap.dedent("""
  import numpy as np, core, core.tensor.nn as cnn
  import tinygrad
  from tinygrad import Tensor, Device, dtypes, Context, Variable, TinyJit, nn
  from tinygrad.helpers import getenv, DEBUG, DEV, IMAGE, OSX
  from tinygrad.tensor import _to_np_dtype
  from tinygrad.renderer.nir import NIRRenderer
  from tinygrad.nn.state import get_parameters
  assert tinygrad.__file__.startswith(%(shim)r), tinygrad.__file__
  assert Tensor is core.Tensor and dtypes is core.dtypes and Variable is core.Variable and TinyJit is core.Jit
  assert nn.Conv2d is cnn.Conv2d and nn.BatchNorm is cnn.BatchNorm and get_parameters is cnn.state.get_parameters
  assert Device.DEFAULT == core.Device.DEFAULT == "PYTHON" and DEV.device == "PYTHON" and DEV.renderer == "PYTHON" and DEV.interface == ""
  r = Device[Device.DEFAULT].renderer
  assert r.supported_dtypes() == frozenset(core.Device["PYTHON"].renderer.supported_dtypes) and dtypes.float32 in r.supported_dtypes()
  assert not isinstance(r, NIRRenderer)
  assert np.dtype(_to_np_dtype(dtypes.float32)) == np.float32 and np.dtype(_to_np_dtype(dtypes.int8)) == np.int8 and _to_np_dtype(dtypes.bfloat16) is None
  assert getenv("TINYGRAD_SHIM_TEST_UNSET", 7) == 7 and int(DEBUG) == 0 and int(IMAGE) == 0 and OSX in (True, False)
  with Context(BEAM=0, IGNORE_BEAM_CACHE=1): pass   # a tinygrad setting that changes no value is dropped
  try:
    with Context(NO_SUCH_SETTING=1): pass
    raise SystemExit("an unknown Context setting was accepted")
  except KeyError: pass
  assert (Tensor([1.0, 2.0]) * 3).tolist() == [3.0, 6.0]
  print("ok")
""")

def test_shim_maps_names_onto_core():
  env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TOOL / "shim"), str(ROOT)]), "DEV": "PYTHON"}
  out = subprocess.run([sys.executable, "-c", CHECK % {"shim": str(TOOL / "shim")}], env=env, capture_output=True, text=True, timeout=300)
  assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-3000:]

def test_runner_sorts_skips():
  sys.path.insert(0, str(TOOL))
  try: import run   # tools/tinygrad_compat/run.py
  finally: sys.path.remove(str(TOOL))
  src = textwrap.dedent('''
    import unittest
    class T(unittest.TestCase):
      @unittest.skip("broken upstream")
      def test_a(self): pass
      @unittest.skipIf(True, "needs a GPU")
      def test_b(self): pass
  ''')
  cpu = run.TINYGRAD_CPU_SKIPS | run.unconditional_skips(src)
  assert run.unconditional_skips(src) == {"broken upstream"}
  case = lambda inner: ET.fromstring(f'<testcase classname="m.T" name="t">{inner}</testcase>')
  assert run.classify(case('<skipped message="broken upstream"/>'), cpu) == ("skipped_cpu", "broken upstream")
  assert run.classify(case('<skipped message="needs a GPU"/>'), cpu) == ("skipped", "needs a GPU")
  assert run.classify(case('<failure message="AssertionError: 1 != 2&#10;more"/>'), cpu) == ("failed", "AssertionError: 1 != 2")
  assert run.classify(case(''), cpu) == ("passed", "")
