"""Zero-size dimensions in every kind of op on the device under test, against numpy: sums of empty axes are 0, means,
variances and standard deviations of no elements are nan, cumulative ops over an empty axis are empty, and kernels never
read (or launch over) an empty buffer. Inputs come both as constants and as realized empty buffers."""
from __future__ import annotations
import warnings
from typing import Any, Callable
import numpy as np
import pytest
from core.tensor.tensor import Tensor

SHAPES = [(0,), (0, 3), (3, 0), (2, 0, 4), (0, 0)]

def _k(shape: tuple[int, ...]) -> int: return int(np.prod(shape[1:]))   # the inner dim of a matmul over the trailing dims
def _cum(np_fn: Any, axis: int) -> Callable[[np.ndarray], np.ndarray]: return lambda a: np_fn.accumulate(a, axis)

# name: (tensor op, numpy op); numpy's float64 results are compared at float32
OPS: dict[str, tuple[Callable[[Tensor], Any], Callable[[np.ndarray], Any]]] = {
  "sum": (lambda t: t.sum(), lambda a: a.sum()),
  "sum0": (lambda t: t.sum(0), lambda a: a.sum(0)),
  "sum-1_keepdim": (lambda t: t.sum(-1, keepdim=True), lambda a: a.sum(-1, keepdims=True)),
  "prod0": (lambda t: t.prod(0), lambda a: a.prod(0)),
  "mean": (lambda t: t.mean(), lambda a: a.mean()),
  "mean0": (lambda t: t.mean(0), lambda a: a.mean(0)),
  "mean-1": (lambda t: t.mean(-1), lambda a: a.mean(-1)),
  "var": (lambda t: t.var(), lambda a: a.var(ddof=1)),
  "var0": (lambda t: t.var(0), lambda a: a.var(0, ddof=1)),
  "std": (lambda t: t.std(), lambda a: a.std(ddof=1)),
  "std-1_pop": (lambda t: t.std(-1, correction=0), lambda a: a.std(-1)),
  "cumsum0": (lambda t: t.cumsum(0), lambda a: a.cumsum(0)),
  "cumsum-1": (lambda t: t.cumsum(-1), lambda a: a.cumsum(-1)),
  "cumprod0": (lambda t: t.cumprod(0), lambda a: a.cumprod(0)),
  "cummax0": (lambda t: t.cummax(0)[0], _cum(np.maximum, 0)),
  "cummin-1": (lambda t: t.cummin(-1)[0], _cum(np.minimum, -1)),
  "logcumsumexp0": (lambda t: t.logcumsumexp(0), _cum(np.logaddexp, 0)),
  "logsumexp0": (lambda t: t.logsumexp(0), lambda a: np.log(np.exp(a).sum(0))),
  "softmax-1": (lambda t: t.softmax(-1), lambda a: np.exp(a) / np.exp(a).sum(-1, keepdims=True)),
  "add_exp": (lambda t: (t + 1).exp(), lambda a: np.exp(a + 1)),
  "where": (lambda t: (t > 0).where(t, 5), lambda a: np.where(a > 0, a, 5)),
  "pad": (lambda t: t.pad([(1, 1)] * t.ndim, value=2), lambda a: np.pad(a, 1, constant_values=2)),
  "cat": (lambda t: t.cat(t, dim=0), lambda a: np.concatenate([a, a], 0)),
  "flip_permute": (lambda t: t.flip(0).permute(*reversed(range(t.ndim))), lambda a: np.flip(a, 0).T),
  "reversed_slice": (lambda t: t[::-1], lambda a: a[::-1]),
  "roll": (lambda t: t.roll(1, 0), lambda a: np.roll(a, 1, 0)),
  "repeat": (lambda t: t.repeat([2] * t.ndim), lambda a: np.tile(a, [2] * a.ndim)),
  "sort": (lambda t: t.sort(-1)[0], lambda a: np.sort(a, -1)),
  "any_all": (lambda t: (t != 0).any().cast("float32") + 2 * (t == 0).all().cast("float32"),
              lambda a: float((a != 0).any()) + 2 * float((a == 0).all())),
  "matmul": (lambda t: t.reshape(t.shape[0], _k(t.shape)) @ Tensor.ones(_k(t.shape), 2),
             lambda a: a.reshape(a.shape[0], _k(a.shape)) @ np.ones((_k(a.shape), 2))),
}

@pytest.mark.parametrize("realized", [False, True], ids=["const", "buffer"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("name", list(OPS))
def test_zero_size_matches_numpy(name: str, shape: tuple[int, ...], realized: bool) -> None:
  t_fn, np_fn = OPS[name]
  a = np.zeros(shape, np.float32)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")   # numpy warns about the mean of an empty slice; nan is the point
    want = np.asarray(np_fn(a.astype(np.float64)))
  t = Tensor(a).contiguous().realize() if realized else Tensor(a)
  got = t_fn(t).numpy()
  assert got.shape == want.shape, f"{name} of {shape}: shape {got.shape}, numpy {want.shape}"
  np.testing.assert_allclose(got, want.astype(np.float32), equal_nan=True, err_msg=f"{name} of {shape}")

def test_empty_int_and_bool_reductions() -> None:
  z = Tensor(np.zeros((3, 0), np.int32))
  assert z.sum().item() == 0 and z.prod(1).tolist() == [1, 1, 1]
  assert np.isnan(z.mean().item()) and np.isnan(z.var().item())
  assert Tensor(np.zeros((0,), bool)).sum().item() == 0
  assert z.argmax(0).shape == (0,) and z.cumsum(1).shape == (3, 0)

@pytest.mark.parametrize("op", ["sum", "mean", "max", "logsumexp"])
def test_backward_through_an_empty_reduction(op: str) -> None:
  # torch gives an empty tensor its (empty) gradient; the reduction keeps the input in the graph so backward reaches it
  t = Tensor(np.zeros((0, 3), np.float32), requires_grad=True)
  out = getattr(t, op)(0)
  out.sum().backward()
  assert t.grad is not None and t.grad.shape == (0, 3)
  want = {"sum": [0, 0, 0], "mean": [np.nan] * 3, "max": [-np.inf] * 3, "logsumexp": [-np.inf] * 3}[op]
  np.testing.assert_array_equal(out.numpy(), np.array(want, np.float32))
