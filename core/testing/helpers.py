"""Shared test helpers: CI runs, hardware-test folders, CORE_TEST_SCALE shape scaling, numpy comparison of forward and backward, numerical gradients,
numpy references of convolutions."""
from __future__ import annotations
import os
from typing import Any, Callable, NoReturn, Sequence
import numpy as np
import pytest

def ci_run() -> bool:
  """This is a CI run: CI=true (or 1), as .ci/run and GitHub Actions set it. A CI job installs every tool its tests need
  (its testing extra, the packages .ci/run installs), so there a missing tool is a broken job: a failure, not a skip."""
  return os.environ.get("CI", "").lower() in ("true", "1")

def missing_tool(msg: str) -> NoReturn:
  """A tool the test needs is missing: fails in a CI run (its job installs the tool), skips elsewhere. `msg` names the tool
  and how to install it."""
  if ci_run(): pytest.fail(msg)
  pytest.skip(msg)

def hardware_tests(conftest: str, needs: str, why_not: Callable[[pytest.Item], str | None]) -> tuple[Callable[..., None], Callable[..., None]]:
  """pytest_configure and pytest_collection_modifyitems for a folder of hardware tests (`conftest`: its conftest.py's __file__):
  every test in the folder gets marker `hardware` (`pytest -m hardware` selects them where the device is), and a skip where
  `why_not(test)` says what is missing. No CI job has the device: there they skip too, on purpose (missing_tool fails)."""
  here = os.path.join(os.path.dirname(os.path.abspath(conftest)), "")
  def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"hardware: needs {needs} (skipped elsewhere)")
  def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for it in items:
      if not str(it.fspath).startswith(here): continue   # the hook sees the whole session's tests
      it.add_marker(pytest.mark.hardware)
      if (why := why_not(it)) is not None:
        it.add_marker(pytest.mark.skip(reason=why + (f" (no CI job has {needs}: skipped there too)" if ci_run() else "")))
  return pytest_configure, pytest_collection_modifyitems

def scale_factor() -> float:
  """CORE_TEST_SCALE (default 1.0): slow devices run the suite with smaller shapes."""
  return float(os.getenv("CORE_TEST_SCALE", "1.0"))

def scaled(n: int, minimum: int = 1) -> int:
  """`n` scaled by CORE_TEST_SCALE, at least `minimum`."""
  return max(minimum, int(round(n * scale_factor())))

def rng(seed: int = 0) -> np.random.Generator: return np.random.default_rng(seed)

def unwaited_resubmits_land(timeout_s: float = 5.0) -> tuple[int, int]:
  """Runs an eager op on the default device, then every HCQ submission of the process again with wait=False (core then calls
  each device's submitted_without_wait) and polls their timeline signals for up to `timeout_s`: (signals, how many reached
  their value). A device whose processor does not look at a doorbell nobody waits for leaves some short."""
  import ctypes, time
  from core import Tensor
  from core.device.hcq import handle_addr
  from core.engine import run
  x = np.arange(1000, dtype=np.float32)
  np.testing.assert_allclose((Tensor(x) * 3 + 0.25).numpy(), x * 3 + 0.25)
  subs = list(run._submissions.values())
  for sub in subs: sub.resubmit(wait=False)
  signals = [(ctypes.c_uint64.from_address(handle_addr(sig)), tl[0]) for sub in subs for _, _, sig, tl in sub._waits]
  until = time.monotonic() + timeout_s
  while any(s.value < v for s, v in signals) and time.monotonic() < until: time.sleep(0.001)
  return len(signals), sum(s.value >= v for s, v in signals)

def numerical_grad(fn: Callable[..., np.ndarray], inputs: Sequence[np.ndarray], out_grad: np.ndarray, eps: float = 1e-6) -> list[np.ndarray]:
  """d(sum(fn(*inputs) * out_grad))/d(input) for each input, by central differences in float64."""
  xs = [np.array(x, dtype=np.float64) for x in inputs]
  grads = []
  for i, x in enumerate(xs):
    g = np.zeros_like(x)
    flat, gflat = x.reshape(-1), g.reshape(-1)
    for j in range(flat.size):
      old = flat[j]
      flat[j] = old + eps
      hi = np.sum(fn(*xs) * out_grad)
      flat[j] = old - eps
      lo = np.sum(fn(*xs) * out_grad)
      flat[j] = old
      gflat[j] = (hi - lo) / (2 * eps)
    grads.append(g)
  return grads

def check_op(shapes: Sequence[tuple[int, ...]], tensor_fn: Callable[..., Any], numpy_fn: Callable[..., np.ndarray],
             low: float = -2.0, high: float = 2.0, atol: float = 1e-5, rtol: float = 1e-4, grad: bool = True,
             grad_atol: float = 1e-3, grad_rtol: float = 1e-3, inputs: Sequence[np.ndarray] | None = None,
             permute_inputs: bool = False, seed: int = 0) -> None:
  """Runs tensor_fn on Tensors and numpy_fn on float64 arrays of the same random data and compares the results; with
  `grad`, also compares the Tensor gradients with numerical derivatives. permute_inputs feeds non-contiguous views."""
  from core.tensor.tensor import Tensor
  r = rng(seed)
  xs = list(inputs) if inputs is not None else [r.uniform(low, high, size=s).astype(np.float32) for s in shapes]
  def make(x: np.ndarray) -> Tensor:
    if permute_inputs and x.ndim >= 2:
      return Tensor(np.ascontiguousarray(np.swapaxes(x, 0, 1)), requires_grad=grad).transpose(0, 1)
    return Tensor(x, requires_grad=grad)
  ts = [make(x) for x in xs]
  out = tensor_fn(*ts)
  want = numpy_fn(*[x.astype(np.float64) for x in xs])
  got = out.numpy()
  assert got.shape == np.shape(want), f"shape {got.shape} != numpy's {np.shape(want)}"
  np.testing.assert_allclose(got, want, atol=atol, rtol=rtol)
  # an empty input or output has no gradient values to compare
  if not grad or not np.issubdtype(got.dtype, np.floating) or got.size == 0 or any(x.size == 0 for x in xs): return
  og = r.uniform(0.5, 1.5, size=np.shape(want))
  out.backward(Tensor(og.astype(np.float32)))
  num = numerical_grad(numpy_fn, xs, og)
  for t, g in zip(ts, num):
    assert t.grad is not None, "no gradient reached an input"
    np.testing.assert_allclose(t.grad.numpy(), g, atol=grad_atol, rtol=grad_rtol)

# *** numpy references the nn suites share (float64, NC* layout, symmetric padding) ***

def np_conv(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None, stride: Any = 1, padding: Any = 0, dilation: Any = 1,
            groups: int = 1) -> np.ndarray:
  """N-d cross-correlation; stride, padding and dilation are an int or one value per spatial axis."""
  nd = w.ndim - 2
  s, p, d = ((v,) * nd if isinstance(v, int) else tuple(v) for v in (stride, padding, dilation))
  x = np.pad(x.astype(np.float64), [(0, 0), (0, 0)] + [(q, q) for q in p])
  cout, cin_g, *ks = w.shape
  outs = [(x.shape[2 + i] - d[i] * (ks[i] - 1) - 1) // s[i] + 1 for i in range(nd)]
  out = np.zeros((x.shape[0], cout, *outs))
  rc = cout // groups
  for o in np.ndindex(*outs):
    for kk in np.ndindex(*ks):
      xv = x[(slice(None), slice(None)) + tuple(o[i] * s[i] + kk[i] * d[i] for i in range(nd))]  # (n, cin)
      for g in range(groups):
        out[(slice(None), slice(g * rc, (g + 1) * rc)) + o] += xv[:, g * cin_g:(g + 1) * cin_g] @ w[(slice(g * rc, (g + 1) * rc), slice(None)) + kk].T
  return out if b is None else out + b.reshape(1, -1, *[1] * nd)

def np_conv_transpose(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None, stride: int = 1, padding: int = 0,
                      dilation: int = 1, output_padding: int = 0, groups: int = 1) -> np.ndarray:
  """N-d transposed convolution in scatter form: each input element adds x * w into the (strided, dilated) output, then the
  padding is cropped."""
  x = x.astype(np.float64)
  n, cin, *ns = x.shape
  _, rc, *ks = w.shape
  nd, cin_g = len(ns), cin // groups
  full = [(ns[i] - 1) * stride + dilation * (ks[i] - 1) + 1 + output_padding for i in range(nd)]
  out = np.zeros((n, rc * groups, *full))
  for ci in range(cin):
    g = ci // cin_g
    for pos in np.ndindex(*ns):
      for kk in np.ndindex(*ks):
        o = tuple(pos[i] * stride + kk[i] * dilation for i in range(nd))
        out[(slice(None), slice(g * rc, (g + 1) * rc)) + o] += x[(slice(None), ci) + pos][:, None] * w[(ci, slice(None)) + kk]
  out = out[(slice(None), slice(None)) + tuple(slice(padding, f - padding) for f in full)]
  return out if b is None else out + b.reshape(1, -1, *[1] * nd)
