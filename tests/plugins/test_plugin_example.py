"""Install core and plugins into a clean venv the way users do, compute on DEV=EXAMPLE and DEV=CPU, then uninstall."""
from __future__ import annotations
import os, pathlib, shutil, subprocess, sys, textwrap
import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]

CHECK = textwrap.dedent('''
  import os, sys
  import numpy as np
  from core.device.registry import Device
  from core.device.buffer import Buffer
  from core.ir.dtype import dtypes
  from core.ir.ops import AxisType, Ops, UOp
  dev_name = Device.DEFAULT
  dev = Device[dev_name]
  n = 257
  out, a, b = (UOp.param(i, dtypes.float32.ptr(n)) for i in range(3))
  r = UOp(Ops.RANGE, dtypes.int32, (UOp.const(dtypes.int32, n),), (0, AxisType.LOOP))
  k = out.index(r).store(a.index(r).load() * b.index(r).load() - UOp.const(dtypes.float32, 3.0)).end(r)
  prg = dev.runtime("k", dev.compiler.compile_cached(dev.renderer.render("k", list(k.toposort()))))
  x, y = np.linspace(-4, 4, n, dtype=np.float32), np.arange(n, dtype=np.float32)
  bufs = [Buffer(dev_name, n, dtypes.float32).allocate()] + [Buffer(dev_name, n, dtypes.float32).copyin(memoryview(v)) for v in (x, y)]
  prg(*[bb._buf for bb in bufs])
  np.testing.assert_array_equal(bufs[0].numpy(), x * y - np.float32(3.0))
  # the same through the Tensor front end: a fused elementwise kernel and a reduction
  from core import Tensor
  xs = x.reshape(1, n)
  np.testing.assert_allclose((Tensor(xs) * Tensor(xs) - 3).sum(axis=1).numpy(), (xs * xs - 3).sum(axis=1), rtol=1e-5)
  print("OK", dev_name, type(dev.renderer).__name__)
''')

def _sh(cmd: list[str], **kw) -> subprocess.CompletedProcess:
  return subprocess.run(cmd, capture_output=True, text=True, timeout=900, **kw)

@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> tuple[pathlib.Path, pathlib.Path]:
  root = tmp_path_factory.mktemp("install")
  src = root / "src"
  # install from a copy so the build leaves nothing (build/, *.egg-info) in the shared working tree
  shutil.copytree(REPO, src, ignore=shutil.ignore_patterns(".git", "__pycache__", "build", "*.egg-info", ".venv*", "tests", "bench"))
  env_dir = root / "venv"
  r = _sh([sys.executable, "-m", "venv", str(env_dir)])          # a clean venv: no --system-site-packages
  assert r.returncode == 0, r.stderr
  py = env_dir / "bin" / "python"
  r = _sh([str(py), "-m", "pip", "install", "-q", "./", "./examples/plugin-example", "./plugins/cpu"], cwd=src)
  assert r.returncode == 0, r.stdout + r.stderr
  (root / "check.py").write_text(CHECK)
  return py, root

def _run(venv: tuple[pathlib.Path, pathlib.Path], dev: str | None) -> subprocess.CompletedProcess:
  py, root = venv
  env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DEV", "CORE_DISABLED_PLUGINS")}
  env["CORE_CACHE_DIR"] = str(root / "cache")
  if dev is not None: env["DEV"] = dev
  return _sh([str(py), str(root / "check.py")], env=env, cwd=str(root))   # cwd outside the repo: only installed code is importable

@pytest.mark.slow
def test_install_compute_uninstall_in_a_clean_venv(venv) -> None:
  # one test, because the steps must run in this order on one venv (xdist may split a module's tests across workers)
  r = _run(venv, "EXAMPLE")
  assert r.returncode == 0 and "OK EXAMPLE ExampleRenderer" in r.stdout, r.stdout + r.stderr
  for dev in ("CPU:C", None):   # unset DEV: CPU outranks EXAMPLE and PYTHON
    r = _run(venv, dev)
    assert r.returncode == 0 and "OK CPU" in r.stdout, r.stdout + r.stderr
  py, _ = venv
  r = _sh([str(py), "-m", "pip", "uninstall", "-y", "-q", "plugin-example"])
  assert r.returncode == 0, r.stderr
  r = _run(venv, "EXAMPLE")
  assert r.returncode != 0 and "no installed plugin provides device 'EXAMPLE'" in r.stderr, r.stderr
  for dev in ("CPU", "PYTHON"):
    r = _run(venv, dev)
    assert r.returncode == 0 and f"OK {dev}" in r.stdout, r.stdout + r.stderr
