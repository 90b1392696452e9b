"""No silent wrong answers and clear errors: Python indices are checked, out-of-range tensor indices follow the documented
rule (they read 0) unless CHECK_BOUNDS=1 reports them, Python scalars that don't fit a dtype promote or raise, bad
arguments raise TypeError/ValueError/IndexError naming the method and the argument, huge allocations raise OutOfMemory."""
from __future__ import annotations
import importlib.util
import numpy as np
import pytest
from core.testing.helpers import ci_run
from core import Tensor, dtypes
from core.helpers import Context
from core.device.allocator import OutOfMemory
import core.tensor.validate  # noqa: F401  (registers CHECK_BOUNDS with Context)

def devices() -> list[str]:
  """The interpreter always; the CPU plugin's device where it is installed (the core CI job installs it: required there)."""
  has_cpu = importlib.util.find_spec("plugin_cpu") is not None
  if ci_run(): assert has_cpu, "the core CI job installs plugin-cpu"
  return ["PYTHON"] + (["CPU"] if has_cpu else [])

# *** Python indices ***

def test_python_int_indices_are_checked() -> None:
  t = Tensor([10, 20, 30])
  with pytest.raises(IndexError, match="index 5 is out of bounds for dim 0 with size 3"): t[5]
  with pytest.raises(IndexError, match="index -4"): t[-4]
  with pytest.raises(IndexError, match="index 5 is out of bounds"): t[[0, 5, -9]]
  with pytest.raises(IndexError, match="index -9 is out of bounds"): t[[0, -9]]
  with pytest.raises(IndexError, match="index 3"): Tensor.ones(2, 3)[:, [[0, 3]]]
  assert t[[0, -1, -3, 2]].tolist() == [10, 30, 10, 30]   # negative Python indices wrap, as in numpy
  assert t[-3].item() == 10

# *** out-of-range tensor indices: the documented rule (tinygrad's): they select nothing, so they read 0 ***

@pytest.mark.parametrize("device", devices())
def test_out_of_range_tensor_indices_read_zero(device: str) -> None:
  t = Tensor([1, 2, 3], device=device)
  assert t.gather(0, Tensor([1, 7, -1], device=device)).tolist() == [2, 0, 0]            # gather: no wrap, out of [0, n) is 0
  assert t[Tensor([2, -1, -9, 3], device=device)].tolist() == [3, 3, 0, 0]               # fancy: [-n, 0) wraps, the rest is 0
  assert Tensor([0, 5, -1], device=device).one_hot(3).tolist() == [[1, 0, 0], [0, 0, 0], [0, 0, 0]]
  logits = Tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]], device=device)
  # a label out of range contributes 0 to the summed loss (and still counts in the mean)
  want = -np.log(np.exp(0.0) / 3)
  assert np.isclose(logits.sparse_categorical_crossentropy(Tensor([5, 0], device=device), reduction="sum").item(), want, rtol=1e-5)

@pytest.mark.parametrize("device", devices())
def test_check_bounds_reports_the_op_and_the_index(device: str) -> None:
  t = Tensor([1, 2, 3], device=device)
  logits = Tensor([[1.0, 2.0, 3.0], [0.0, 1.0, 0.0]], device=device)
  with Context(CHECK_BOUNDS=1):
    with pytest.raises(IndexError, match=r"Tensor.gather: index\[1\] = 7 is out of range for dim 0 of size 3"):
      t.gather(0, Tensor([1, 7, -1], device=device))
    with pytest.raises(IndexError, match=r"Tensor.gather: index\[2\] = -1"): t.gather(0, Tensor([1, 2, -1], device=device))
    with pytest.raises(IndexError, match=r"Tensor.__getitem__: index\[1, 0\] = -9"): t[Tensor([[2, -1], [-9, 0]], device=device)]
    with pytest.raises(IndexError, match=r"Tensor.one_hot: self\[1\] = 5"): Tensor([0, 5], device=device).one_hot(3)
    with pytest.raises(IndexError, match=r"Tensor.sparse_categorical_crossentropy: Y\[0\] = 3"):
      logits.sparse_categorical_crossentropy(Tensor([3, 1], device=device))
    with pytest.raises(IndexError, match=r"Tensor.cross_entropy: Y\[1\] = -2"): logits.cross_entropy(Tensor([0, -2], device=device))
    with pytest.raises(IndexError, match=r"Tensor.nll_loss: Y\[1\] = 4"): logits.nll_loss(Tensor([0, 4], device=device))
    with pytest.raises(IndexError, match=r"Tensor.scatter: index\[0\] = 3"):
      t.scatter(0, Tensor([3], device=device), Tensor([9], device=device))
    # in-range indices and ignored labels pass, with the same values as without the check
    assert t.gather(0, Tensor([2, 0], device=device)).tolist() == [3, 1]
    assert t[Tensor([-1, 0], device=device)].tolist() == [3, 1]
    assert np.isclose(logits.sparse_categorical_crossentropy(Tensor([-1, 1], device=device)).item(),
                      -np.log(np.exp(1.0) / (np.exp(1.0) + 2)), rtol=1e-5)

# *** Python scalars that don't fit ***

def test_python_scalars_promote_like_tinygrad_or_raise() -> None:
  big = 2 ** 40
  f = Tensor.full((2,), big)
  assert f.dtype is dtypes.int64 and f.tolist() == [big, big]
  assert Tensor(big).dtype is dtypes.int64 and Tensor(big).item() == big
  assert Tensor([big, 1]).dtype is dtypes.int64 and Tensor([big, 1]).tolist() == [big, 1]
  assert Tensor(2 ** 63).dtype is dtypes.uint64
  with pytest.raises(ValueError, match="doesn't fit any integer dtype"): Tensor(2 ** 70)
  with pytest.raises(ValueError, match=r"Tensor.full: argument 'fill_value'.*300 doesn't fit dtypes.uint8"): Tensor.full((2,), 300, dtype=dtypes.uint8)
  with pytest.raises(ValueError, match="doesn't fit dtypes.int8"): Tensor(-129, dtype=dtypes.int8)
  # a scalar operand the tensor's dtype can't hold promotes the op instead of wrapping
  s = Tensor([1, 2]) + big
  assert s.dtype is dtypes.int64 and s.tolist() == [big + 1, big + 2]
  u = Tensor([0, 255], dtype=dtypes.uint8)
  assert (u == -1).tolist() == [False, False] and (u < 256).tolist() == [True, True]
  assert Tensor([True, False]).where(big, 0).tolist() == [big, 0]

# *** clear errors for bad arguments ***

@pytest.mark.parametrize("call, exc, words", [
  (lambda t: t.avg_pool2d(0), ValueError, ["avg_pool2d", "kernel_size", ">= 1"]),
  (lambda t: t.max_pool2d(2, stride=0), ValueError, ["max_pool2d", "stride", ">= 1"]),
  (lambda t: t.reshape((2.5, 2)), TypeError, ["reshape", "shape", "ints", "2.5"]),
  (lambda t: t.reshape(-2, 8), ValueError, ["reshape", "sizes >= 0"]),
  (lambda t: t.unsqueeze([0]), TypeError, ["unsqueeze", "'dim'", "int", "list"]),
  (lambda t: t.gather(0, True), TypeError, ["gather", "'index'", "Tensor", "bool"]),
  (lambda t: t.gather(0, Tensor([0.5])), TypeError, ["gather", "'index'", "int tensor"]),
  (lambda t: t.softplus(0), ValueError, ["softplus", "beta"]),
  (lambda t: t.repeat(2, -1), ValueError, ["repeat", "repeats", ">= 0"]),
  (lambda t: t.expand(2.0, 4), TypeError, ["expand", "shape"]),
  (lambda t: t.sum(axis="0"), TypeError, ["sum", "'axis'"]),
  (lambda t: t.cat(3), TypeError, ["cat", "*args", "Tensor"]),
  (lambda t: t.pad(((0, 1),) * 4, mode=1), TypeError, ["pad", "'mode'", "str"]),
  (lambda t: t.cast(3.5), TypeError, ["cast", "dtype"]),
  (lambda t: Tensor.einsum(1, t), TypeError, ["einsum", "'formula'", "str"]),
  # found by tests/tensor/test_fuzz_api.py (each was a ZeroDivisionError, AttributeError or AssertionError)
  (lambda t: Tensor.einsum("i->", "x"), TypeError, ["einsum", "operands[0]", "Tensor"]),
  (lambda t: t.conv_transpose2d(Tensor.ones(1, 1, 2, 2), groups=0), ValueError, ["conv_transpose2d", "groups", ">= 1"]),
  (lambda t: t.conv2d(Tensor.ones(2, 2)), ValueError, ["conv2d", "weight"]),
  (lambda t: t.full_like(()), TypeError, ["full", "fill_value", "number"]),
  (lambda t: t.matmul(0, True), TypeError, ["matmul", "'x'", "Tensor"]),
  (lambda t: Tensor(1.0).batchnorm(None, None, Tensor(0.0), Tensor(1.0), axis=3), IndexError, ["batchnorm", "axis"]),
  (lambda t: Tensor.ones(2, 0).scaled_dot_product_attention(Tensor.ones(2, 0), Tensor.ones(2, 0)), ValueError, ["scaled_dot_product_attention", "E > 0"]),
  (lambda t: Tensor.ones(3, 0).cross_entropy(Tensor.ones(3, dtype=dtypes.int32)), ValueError, ["cross_entropy", "no classes"]),
  (lambda t: t.interpolate((0, 2)), ValueError, ["interpolate", "size", ">= 1"]),
  (lambda t: Tensor.kaiming_normal(), ValueError, ["kaiming_normal", "shape"]),
  (lambda t: Tensor.rand(2.5), TypeError, ["rand", "shape", "2.5"]),
])
def test_bad_arguments_raise_clear_errors(call, exc, words: list[str]) -> None:
  t = Tensor.ones(1, 1, 4, 4)
  with pytest.raises(exc) as e: call(t)
  for w in words: assert w in str(e.value), f"{w!r} not in {str(e.value)!r}"

def test_empty_inits_have_no_fan_to_divide_by() -> None:
  assert Tensor.kaiming_uniform(0, 0).shape == (0, 0) and Tensor.scaled_uniform(0).shape == (0,) and Tensor.glorot_uniform(3, 0).shape == (3, 0)

@pytest.mark.parametrize("device", devices())
def test_huge_allocations_raise_out_of_memory_with_size_and_device(device: str) -> None:
  with pytest.raises(OutOfMemory) as e: Tensor.zeros(2 ** 38, device=device).contiguous().realize()
  assert device in str(e.value) and "1099511627776 bytes" in str(e.value)
  assert (Tensor([1.0, 2.0], device=device) * 2).tolist() == [2.0, 4.0]   # the device is still usable
  # a numpy input whose contiguous host copy doesn't fit: the same error (numpy's bare MemoryError before)
  with pytest.raises(OutOfMemory, match=r"host: out of memory .* \(4398046511104 bytes\)"):
    Tensor(np.broadcast_to(np.zeros(1, np.float32), (2 ** 40,)), device=device)
