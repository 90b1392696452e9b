"""Symbolic shapes on the device under test: slices with a bound Variable (`t[:v.bind(3)]`), reductions of them, eagerly
and under Jit, with one compiled kernel serving every binding (counted at the codegen entry point) and values checked
against numpy."""
from __future__ import annotations
from typing import Any, Iterator
import numpy as np
import pytest
import core.codegen.program as program
from core.ir.ops import Variable
from core.tensor.tensor import Tensor
from core.tensor.jit import Jit
from core.testing.helpers import rng

N = 7

@pytest.fixture
def compiles(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
  """The names of the kernels lowered and rendered (every compile goes through _get_program) while the test runs."""
  names: list[str] = []
  orig = program._get_program
  def counting(ast: Any, *args: Any, **kwargs: Any) -> Any:
    names.append(ast.arg)
    return orig(ast, *args, **kwargs)
  monkeypatch.setattr(program, "_get_program", counting)
  yield names

def _data() -> tuple[np.ndarray, Tensor]:
  a = rng(5).standard_normal((N + 2, 6)).astype(np.float32)
  return a, Tensor(a).realize()

def test_eager_slice_and_reduce_compile_once(compiles: list[str]) -> None:
  a, t = _data()
  v = Variable("i", 1, N)
  def check(i: int) -> None:
    s = t[:v.bind(i)]
    assert s.shape[1] == 6 and not isinstance(s.shape[0], int)
    np.testing.assert_allclose((s * 2 + 1).numpy(), a[:i] * 2 + 1, rtol=1e-6)
    np.testing.assert_allclose(s.sum(0).numpy(), a[:i].sum(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(s.max(1).numpy(), a[:i].max(1))
    np.testing.assert_allclose(s.mean().numpy(), a[:i].mean(), rtol=1e-5, atol=1e-6)
  check(1)
  first = len(compiles)
  for i in range(2, N + 1): check(i)
  assert compiles[first:] == [], f"bindings 2..{N} compiled new kernels {compiles[first:]}: a kernel per value"

def test_symbolic_start_and_both_dims() -> None:
  a, t = _data()
  v, w = Variable("i", 1, N), Variable("j", 1, 6)
  for i, j in [(1, 6), (3, 2), (N, 1)]:
    np.testing.assert_allclose(t[v.bind(i):v.bind(i) + 2].numpy(), a[i:i + 2])
    np.testing.assert_allclose(t[:v.bind(i), :w.bind(j)].sum(1).numpy(), a[:i, :j].sum(1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(t[:v.bind(i), -2:].numpy(), a[:i, -2:])

def test_jit_replays_one_kernel_for_every_binding(compiles: list[str]) -> None:
  a, t = _data()
  v = Variable("i", 1, N)
  @Jit
  def f(x: Tensor, vi: Any) -> Tensor: return (x[:vi] * 2).sum(0).realize()
  @Jit
  def g(x: Tensor) -> Tensor: return (x - 1).max(1).realize()
  np.testing.assert_allclose(f(t, v.bind(1)).numpy(), 2 * a[:1].sum(0), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(g(t[:v.bind(1)]).numpy(), (a[:1] - 1).max(1))
  first = len(compiles)
  for i in [2, 5, 3, N, 1, 4]:
    np.testing.assert_allclose(f(t, v.bind(i)).numpy(), 2 * a[:i].sum(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(g(t[:v.bind(i)]).numpy(), (a[:i] - 1).max(1))
  assert f.cnt == 2 and g.cnt == 2, "the Jits never captured"
  assert compiles[first:] == [], f"new bindings compiled new kernels {compiles[first:]}"

def test_bound_out_of_the_slice_is_refused() -> None:
  _, t = _data()
  with pytest.raises(ValueError, match="shrink"): t[:Variable("k", 1, 20).bind(N + 3)]
  with pytest.raises(IndexError, match="step 1"): t[:Variable("k", 1, 20).bind(2):2]

def test_zero_binding_eager_and_jit(compiles: list[str]) -> None:
  """A variable that may be 0: the empty slice and its reductions (sums 0, max over nothing -inf, mean NaN), and a symbolic
  output written to memory, on the same kernels as every other value. Devices that map the loop to thread ids launch the
  largest value and must keep the extra threads from touching memory when the value is 0."""
  a, t = _data()
  v = Variable("i", 0, N)
  @Jit
  def f(x: Tensor, vi: Any) -> Tensor: return (x[:vi] * 2).sum(0).realize()
  @Jit
  def g(x: Tensor, vi: Any) -> Tensor: return (x[:vi] + 1).contiguous().realize()
  def check(i: int) -> None:
    s = t[:v.bind(i)]
    c = (s * 2 + 1).contiguous().realize()   # a kernel whose output loop is the symbolic one
    assert c.numpy().shape == (i, 6)
    np.testing.assert_allclose(c.numpy(), a[:i] * 2 + 1, rtol=1e-6)
    np.testing.assert_allclose((c - 1).sum(1).numpy(), (a[:i] * 2).sum(1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(s.sum(0).numpy(), a[:i].sum(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(s.max(0).numpy(), a[:i].max(0) if i else np.full(6, -np.inf, np.float32))
    assert np.isnan(s.mean().numpy()) if i == 0 else np.isclose(s.mean().numpy(), a[:i].mean(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(f(t, v.bind(i)).numpy(), 2 * a[:i].sum(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(g(t, v.bind(i)).numpy(), a[:i] + 1)
  for i in (2, 0, 3):   # the Jits capture on their second call (a nonzero value), then replay 0
    check(i)
  first = len(compiles)
  for i in (0, 1, N, 0, 4): check(i)
  assert f.cnt == 2 and g.cnt == 2, "the Jits never captured"
  assert compiles[first:] == [], f"new bindings compiled new kernels {compiles[first:]}"
  np.testing.assert_allclose(t.numpy(), a)   # nothing wrote into the sliced tensor
