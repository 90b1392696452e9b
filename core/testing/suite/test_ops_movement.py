"""Movement and indexing ops against numpy: forward on several shapes and backward (gradients are scatters, checked numerically)."""
from __future__ import annotations
import numpy as np
import pytest
from core.tensor.tensor import Tensor
from core.ir.dtype import dtypes, to_np
from core.testing.helpers import check_op, rng
from core.testing.capabilities import dtype_params

def test_reshape():
  check_op([(2, 3, 4)], lambda t: t.reshape(4, -1), lambda x: x.reshape(4, -1))
  check_op([(2, 3, 4)], lambda t: t.reshape(-1), lambda x: x.reshape(-1))
  check_op([(0, 3)], lambda t: t.reshape(3, 0), lambda x: x.reshape(3, 0))
  check_op([(1,)], lambda t: t.reshape(()), lambda x: x.reshape(()))
  check_op([(2, 3)], lambda t: t.view(3, 2), lambda x: x.reshape(3, 2))
  with pytest.raises(ValueError, match="reshape"): Tensor.ones(2, 3).reshape(4, 2)

def test_permute_transpose():
  check_op([(2, 3, 4)], lambda t: t.permute(2, 0, 1), lambda x: x.transpose(2, 0, 1))
  check_op([(2, 3, 4)], lambda t: t.permute(-1, 0, 1), lambda x: x.transpose(2, 0, 1))
  check_op([(2, 3)], lambda t: t.transpose(), lambda x: x.T)
  check_op([(2, 3, 4)], lambda t: t.transpose(0, 2), lambda x: np.swapaxes(x, 0, 2))
  check_op([(2, 3, 4)], lambda t: t.T, lambda x: x.T)

def test_flatten_unflatten_squeeze():
  check_op([(2, 3, 4)], lambda t: t.flatten(), lambda x: x.reshape(-1))
  check_op([(2, 3, 4)], lambda t: t.flatten(1), lambda x: x.reshape(2, 12))
  check_op([(2, 12)], lambda t: t.unflatten(1, (3, 4)), lambda x: x.reshape(2, 3, 4))
  check_op([(2, 1, 3, 1)], lambda t: t.squeeze(), lambda x: x.squeeze())
  check_op([(2, 1, 3, 1)], lambda t: t.squeeze(1), lambda x: x.squeeze(1))
  check_op([(2, 3)], lambda t: t.unsqueeze(1), lambda x: x[:, None])
  check_op([(2, 3)], lambda t: t.unsqueeze(-1), lambda x: x[..., None])

def test_expand():
  check_op([(3, 1)], lambda t: t.expand(3, 4), lambda x: np.broadcast_to(x, (3, 4)))
  check_op([(3, 1)], lambda t: t.expand(2, -1, 5), lambda x: np.broadcast_to(x, (2, 3, 5)))
  check_op([(1,)], lambda t: t.expand(0), lambda x: np.broadcast_to(x, (0,)))
  with pytest.raises(ValueError, match="expand"): Tensor.ones(3, 2).expand(3, 4)

@pytest.mark.parametrize("pads", [((1, 2), (0, 3)), ((0, 0), (2, 0)), ((-1, 1), (1, -2)), ((1, 1), None)], ids=str)
def test_pad_constant(pads):
  def npad(x, value=0.0):
    p = [(0, 0) if q is None else q for q in pads]
    crop = tuple(slice(max(0, -b), x.shape[i] - max(0, -a)) for i, (b, a) in enumerate(p))
    return np.pad(x[crop], [(max(0, b), max(0, a)) for b, a in p], constant_values=value)
  check_op([(3, 4)], lambda t: t.pad(pads), npad)
  check_op([(3, 4)], lambda t: t.pad(pads, value=1.5), lambda x: npad(x, 1.5))

def test_pad_flat_torch_style():
  check_op([(2, 3, 4)], lambda t: t.pad((1, 2)), lambda x: np.pad(x, ((0, 0), (0, 0), (1, 2))))
  check_op([(2, 3, 4)], lambda t: t.pad((1, 2, 0, 1)), lambda x: np.pad(x, ((0, 0), (0, 1), (1, 2))))

@pytest.mark.parametrize("mode,npmode", [("reflect", "reflect"), ("replicate", "edge"), ("circular", "wrap")])
def test_pad_modes(mode, npmode):
  check_op([(3, 5)], lambda t: t.pad(((1, 2), (2, 1)), mode=mode), lambda x: np.pad(x, ((1, 2), (2, 1)), mode=npmode))
  check_op([(2, 4, 4)], lambda t: t.pad((1, 1, 2, 0), mode=mode), lambda x: np.pad(x, ((0, 0), (2, 0), (1, 1)), mode=npmode))

def test_shrink_flip():
  check_op([(4, 5)], lambda t: t.shrink(((1, 3), None)), lambda x: x[1:3])
  check_op([(4, 5)], lambda t: t.flip(0), lambda x: x[::-1])
  check_op([(4, 5)], lambda t: t.flip((0, 1)), lambda x: x[::-1, ::-1])
  check_op([(4, 5)], lambda t: t.flip(-1), lambda x: x[:, ::-1])

def test_repeat():
  check_op([(2, 3)], lambda t: t.repeat(2, 3), lambda x: np.tile(x, (2, 3)))
  check_op([(2, 3)], lambda t: t.repeat(2, 1, 2), lambda x: np.tile(x, (2, 1, 2)))
  check_op([(3,)], lambda t: t.repeat_interleave(2), lambda x: np.repeat(x, 2))

def test_cat_stack():
  check_op([(2, 3), (4, 3)], lambda a, b: a.cat(b), lambda a, b: np.concatenate([a, b]))
  check_op([(2, 3), (2, 1), (2, 2)], lambda a, b, c: Tensor.cat(a, b, c, dim=1), lambda a, b, c: np.concatenate([a, b, c], 1))
  check_op([(2, 3), (0, 3)], lambda a, b: a.cat(b), lambda a, b: np.concatenate([a, b]))
  check_op([(2, 3), (2, 3)], lambda a, b: a.stack(b, dim=1), lambda a, b: np.stack([a, b], 1))
  check_op([(3,), (3,), (3,)], lambda a, b, c: Tensor.stack(a, b, c), lambda a, b, c: np.stack([a, b, c]))
  np.testing.assert_equal(Tensor([True]).cat(Tensor([False, True])).numpy(), [True, False, True])
  assert Tensor([1], dtype=dtypes.int8).cat(Tensor([2.0])).dtype is dtypes.float32
  with pytest.raises(ValueError, match="cat"): Tensor.ones(2, 3).cat(Tensor.ones(2, 4))

def test_split_chunk():
  x = rng(0).uniform(size=(7, 4)).astype(np.float32)
  for got, want in zip(Tensor(x).split(3), np.split(x, [3, 6])): np.testing.assert_equal(got.numpy(), want)
  for got, want in zip(Tensor(x).split([2, 5]), np.split(x, [2])): np.testing.assert_equal(got.numpy(), want)
  for got, want in zip(Tensor(x).chunk(2, 1), np.split(x, 2, 1)): np.testing.assert_equal(got.numpy(), want)
  assert [t.shape for t in Tensor(x).chunk(3)] == [(3, 4), (3, 4), (1, 4)]
  check_op([(6, 2)], lambda t: t.split(2)[1] * t.split(2)[2], lambda x: x[2:4] * x[4:6])

BASIC_INDICES = [
  (1,), (-1,), (slice(1, 3),), (slice(None, None, 2),), (slice(None, None, -1),), (slice(4, 0, -2),), (slice(None, None, 3),),
  (1, 2), (slice(None), 1), (Ellipsis, 1), (None, slice(1, None)), (1, None, slice(None, None, -2)), (slice(0, 0),),
  (Ellipsis,), (slice(-3, None), slice(None, 2)), (slice(1, 5, 3), Ellipsis, None), (slice(10, 20),), (slice(None, None, 7),),
]

@pytest.mark.parametrize("idx", BASIC_INDICES, ids=str)
def test_getitem_basic(idx):
  check_op([(5, 4, 3)], lambda t: t[idx], lambda x: x[idx])

def test_getitem_non_contiguous():
  check_op([(6, 4)], lambda t: t[1:5:2, ::-1], lambda x: x[1:5:2, ::-1], permute_inputs=True)

TENSOR_INDICES = [
  lambda T: (T([0, 2, 2, -1]),),
  lambda T: (slice(None), T([1, 0])),
  lambda T: (T([[0, 1], [2, 3]]), T([1, 0])),
  lambda T: (T([0, 1]), slice(None), T([2, 0])),
  lambda T: (Ellipsis, T([0, 0, 1])),
  lambda T: (1, T([3, 2])),
  lambda T: ([0, 3],),
]

@pytest.mark.parametrize("k", range(len(TENSOR_INDICES)))
def test_getitem_tensor(k):
  make = TENSOR_INDICES[k]
  check_op([(5, 4, 3)], lambda t: t[make(lambda v: Tensor(v, dtype=dtypes.int32))], lambda x: x[make(lambda v: np.array(v))])

def test_getitem_errors():
  with pytest.raises(IndexError, match=r"index 3 is out of bounds for dim 0 with size 3"): Tensor.ones(3)[3]
  with pytest.raises(IndexError, match=r"too many indices \(2\) .*shape \(3,\)"): Tensor.ones(3)[0, 0]

def test_gather():
  x = rng(1).uniform(size=(3, 4)).astype(np.float32)
  idx = np.array([[0, 3], [2, 2], [1, 0]])
  np.testing.assert_equal(Tensor(x).gather(1, Tensor(idx)).numpy(), np.take_along_axis(x, idx, 1))
  idx0 = np.array([[0, 2, 1, 1], [2, 0, 0, 1]])
  np.testing.assert_equal(Tensor(x).gather(0, Tensor(idx0)).numpy(), np.take_along_axis(x, idx0, 0))
  check_op([(3, 4)], lambda t: t.gather(1, Tensor(idx)), lambda a: np.take_along_axis(a, idx, 1))

@pytest.mark.parametrize("dt", dtype_params([dtypes.int32, dtypes.uint8, dtypes.bool, dtypes.float16]))
def test_int_getitem_dtypes(dt):
  x = Tensor([[1, 0, 1], [0, 1, 1]], dtype=dt)
  np.testing.assert_equal(x[:, Tensor([2, 0])].numpy(), np.array([[1, 1], [1, 0]], to_np(dt)))

@pytest.mark.parametrize("mode,npmode", [("reflect", "reflect"), ("replicate", "edge"), ("circular", "wrap")])
def test_pad_modes_negative(mode, npmode):
  # negative amounts crop; circular wraps what is left
  check_op([(4, 5)], lambda t: t.pad(((-1, 2), (2, -2)), mode=mode), lambda x: np.pad(x[1:, :3], ((0, 2), (2, 0)), mode=npmode))
  check_op([(2, 5)], lambda t: t.pad((-1, 3), mode=mode), lambda x: np.pad(x[:, 1:], ((0, 0), (0, 3)), mode=npmode))
  if mode != "circular":   # reflect and replicate pad from the whole input, then crop (torch's order)
    check_op([(2, 5)], lambda t: t.pad((3, -3), mode=mode), lambda x: np.pad(x, ((0, 0), (3, 0)), mode=npmode)[:, :-3])

@pytest.mark.parametrize("d", [-2, -1, 0, 1, 3])
def test_tril_triu(d):
  check_op([(4, 5)], lambda t: t.tril(d), lambda x: np.tril(x, d))
  check_op([(2, 3, 4)], lambda t: t.triu(d), lambda x: np.triu(x, d))
  np.testing.assert_equal(Tensor.ones(3, 3, dtype=dtypes.bool).tril(d).numpy(), np.tril(np.ones((3, 3), bool), d))

def test_roll():
  check_op([(3, 4)], lambda t: t.roll(1, 0), lambda x: np.roll(x, 1, 0))
  check_op([(3, 4)], lambda t: t.roll((-1, 6), (1, 0)), lambda x: np.roll(x, (-1, 6), (1, 0)))
  check_op([(3, 4)], lambda t: t.roll(5), lambda x: np.roll(x, 5))
  check_op([(2, 3, 4)], lambda t: t.roll(2, -1), lambda x: np.roll(x, 2, -1))
  assert Tensor.ones(0, 3).roll(1, 0).shape == (0, 3)
  with pytest.raises(RuntimeError, match="roll: 2 shifts for 1 dims"): Tensor.ones(3).roll((1, 2), 0)

def test_diag_diagonal():
  check_op([(4,)], lambda t: t.diag(), np.diag)
  for shape, off, d1, d2 in [((4, 4), 0, 0, 1), ((3, 5), 2, 0, 1), ((5, 3), -1, 0, 1), ((2, 3, 4), 0, -2, -1), ((2, 3, 4), 1, 2, 0),
                             ((3, 3), 4, 0, 1)]:
    check_op([shape], lambda t: t.diagonal(off, d1, d2), lambda x: np.diagonal(x, off, d1, d2))
  with pytest.raises(RuntimeError, match=r"diagonal: dim1 and dim2 are the same dim \(1\)"): Tensor.ones(3, 3).diagonal(dim1=1, dim2=1)
  with pytest.raises(ValueError, match=r"diag needs a 1-D tensor, got shape \(3, 3\)"): Tensor.ones(3, 3).diag()

def test_meshgrid():
  # float32: the test is about the grid, and a device without float64 (WEBGPU) must run it too
  a, b, c = np.arange(3, dtype=np.float32), np.arange(2, dtype=np.float32) + 5, np.arange(4, dtype=np.float32) - 1
  for indexing in ("ij", "xy"):
    got = Tensor(a).meshgrid(Tensor(b), Tensor(c), indexing=indexing)
    for g, w in zip(got, np.meshgrid(a, b, c, indexing=indexing)): np.testing.assert_equal(g.numpy(), w)
    gx, gy = Tensor(a).meshgrid(Tensor(b), indexing=indexing)
    wx, wy = np.meshgrid(a, b, indexing=indexing)
    np.testing.assert_equal(gx.numpy(), wx)
    np.testing.assert_equal(gy.numpy(), wy)
  with pytest.raises(RuntimeError, match="meshgrid: indexing must be .* got 'bad'"): Tensor(a).meshgrid(Tensor(b), indexing="bad")

@pytest.mark.parametrize("dim,size,step", [(0, 2, 2), (0, 3, 2), (1, 2, 1), (-1, 5, 3), (1, 0, 2)], ids=str)
def test_unfold(dim, size, step):
  def np_unfold(x):
    n = x.shape[dim]
    wins = [np.take(x, np.arange(i * step, i * step + size), axis=dim) for i in range((n - size) // step + 1)]
    return np.stack([np.moveaxis(w, dim, -1) for w in wins], dim % x.ndim)   # window count at dim, window elements last
  check_op([(6, 5)], lambda t: t.unfold(dim, size, step), np_unfold)

def test_unfold_errors():
  with pytest.raises(RuntimeError, match="unfold: size 9 is larger than dim 0 of size 8"): Tensor.ones(8).unfold(0, 9, 3)
  with pytest.raises(IndexError, match="unfold: dim 1 is out of range for a tensor with 1 dims"): Tensor.ones(8).unfold(1, 8, 3)
  with pytest.raises(RuntimeError, match="unfold: step must be > 0, got -1"): Tensor.ones(8).unfold(0, 1, -1)
