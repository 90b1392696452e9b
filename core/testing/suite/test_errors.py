"""Error cases: bad shapes, dims, indices and devices raise at the Tensor call (before anything runs) with a message that
names the operation and the offending shapes, so a user can fix the call from the message alone."""
from __future__ import annotations
import re
from typing import Callable
import pytest
from core.device.plugins import UnknownDeviceError
from core.tensor.tensor import Tensor
from core.testing.capabilities import device_name

def names(*parts: object) -> str:
  """A regex that matches a message containing each part's str(), in order."""
  return ".*".join(re.escape(str(p)) for p in parts)

# the exception types are tinygrad's (and torch's): matmul, permute, einsum and two -1 in a reshape raise RuntimeError
SHAPE_ERRORS: dict[str, tuple[Callable[[], object], type[Exception], str]] = {
  "matmul": (lambda: Tensor.ones(2, 3) @ Tensor.ones(4, 2), RuntimeError, names("matmul", (2, 3), (4, 2))),
  "matmul_batched": (lambda: Tensor.ones(2, 3, 4) @ Tensor.ones(3, 5, 6), RuntimeError, names("matmul", (2, 3, 4), (3, 5, 6))),
  "dot_vectors": (lambda: Tensor.ones(3).dot(Tensor.ones(4)), RuntimeError, names((3,), (4,))),
  "matmul_scalar": (lambda: Tensor.ones(3) @ Tensor.ones(()), RuntimeError, names("matmul", (3,), ())),
  "reshape_size": (lambda: Tensor.ones(2, 3).reshape(4, 2), ValueError, names("reshape", (2, 3), (4, 2))),
  "reshape_infer": (lambda: Tensor.ones(2, 3).reshape(4, -1), ValueError, names("reshape", (2, 3), (4, -1))),
  "reshape_two_infer": (lambda: Tensor.ones(2, 3).reshape(-1, -1), RuntimeError, names("reshape", (2, 3), (-1, -1))),
  "cat": (lambda: Tensor.ones(2, 3).cat(Tensor.ones(2, 4)), ValueError, names("cat", (2, 3), (2, 4))),
  "cat_rank": (lambda: Tensor.ones(2, 3).cat(Tensor.ones(2, 3, 1)), ValueError, names("cat", (2, 3), (2, 3, 1))),
  "cat_dim": (lambda: Tensor.ones(2, 3).cat(Tensor.ones(2, 3), dim=2), IndexError, names("cat", "dim 2")),
  "expand": (lambda: Tensor.ones(3, 2).expand(3, 4), ValueError, names("expand", (3, 2), (3, 4))),
  "broadcast": (lambda: Tensor.ones(3, 4) + Tensor.ones(5), ValueError, names((3, 4), (5,), "broadcast")),
  "permute": (lambda: Tensor.ones(2, 3).permute(0, 0), RuntimeError, names("permute", (0, 0), (2, 3))),
  "assign": (lambda: Tensor.ones(2, 3).assign(Tensor.ones(3, 2)), ValueError, names("assign", (3, 2), (2, 3))),
  "einsum": (lambda: Tensor.einsum("ij,jk->ik", Tensor.ones(2, 3), Tensor.ones(4, 5)), RuntimeError, names("einsum", "j", 3, 4)),
  "index": (lambda: Tensor.ones(3, 4)[5], IndexError, names(5, "dim 0", 3)),
  "too_many_indices": (lambda: Tensor.ones(3)[0, 0], IndexError, names((3,))),
  "reduce_dim": (lambda: Tensor.ones(2, 3).sum(3), IndexError, names("dim 3", "2 dims")),
  "conv_channels": (lambda: Tensor.ones(1, 3, 5, 5).conv2d(Tensor.ones(2, 4, 3, 3)), ValueError, names("conv", 3, 4)),
}

@pytest.mark.parametrize("name", sorted(SHAPE_ERRORS))
def test_bad_shape_raises_naming_shapes(name):
  fn, exc, pattern = SHAPE_ERRORS[name]
  with pytest.raises(exc, match=pattern): fn()

def test_device_mismatch_names_both_devices():
  other = f"{device_name()}:1"
  with pytest.raises(ValueError, match=names(device_name(), other, ".to(")): Tensor.ones(2) + Tensor.ones(2, device=other)

def test_unknown_device_names_it():
  with pytest.raises(UnknownDeviceError, match="NOPE_NO_SUCH_DEVICE"): Tensor.ones(2, device="NOPE_NO_SUCH_DEVICE").numpy()

def test_error_leaves_tensors_usable():
  a = Tensor([[1.0, 2.0], [3.0, 4.0]])
  with pytest.raises(RuntimeError, match=names("matmul", (2, 2), (3, 1))): a @ Tensor.ones(3, 1)
  assert (a @ Tensor.ones(2, 1)).tolist() == [[3.0], [7.0]]
