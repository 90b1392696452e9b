"""Graph building's fast paths build the nodes the general paths build (hash-consing: the same objects), and the same values."""
import numpy as np
import pytest
from core.tensor import Tensor
from core.ir.dtype import dtypes
from core.ir.ops import UOp, Ops
from core.tensor.reduce import _axes

def _t(*shape: int, dtype=np.float32) -> Tensor:
  return Tensor((np.arange(int(np.prod(shape))) % 7 - 3).astype(dtype).reshape(shape)).realize()

def test_operands_of_one_dtype_and_shape_are_the_tensors_themselves() -> None:
  x, y = _t(4, 6), _t(4, 6)
  a, b = x._operands(y)
  assert a is x and b is y
  b2, a2 = x._operands(y, reverse=True)
  assert a2 is x and b2 is y
  # the general path (a dtype given) makes the same graph
  assert (x * y).uop is x.uop.alu(Ops.MUL, y.uop)
  ga, gb = x._operands(y, dtype=dtypes.float32)
  assert (ga.uop, gb.uop) == (x.uop, y.uop)
  np.testing.assert_array_equal((x * y - y).numpy(), x.numpy() * y.numpy() - y.numpy())

def test_operands_still_promote_and_broadcast() -> None:
  x, r, i = _t(4, 6), _t(6), _t(4, 6, dtype=np.int32)
  a, b = x._operands(r)
  assert a.shape == b.shape == (4, 6) and b.uop.op is Ops.EXPAND
  a, b = i._operands(x)
  assert a.dtype is b.dtype is dtypes.float32
  np.testing.assert_array_equal((i + x).numpy(), i.numpy() + x.numpy())
  with pytest.raises(ValueError, match="can't be broadcast"): x + _t(5)

@pytest.mark.parametrize("shapes, out", [(((4, 6), (4, 6)), (4, 6)), (((4, 1), (4, 1)), (4, 1)), (((), ()), ()),
                                         (((4, 6), (6,)), (4, 6)), (((4, 1), (1, 6)), (4, 6)), (((3,), (3,), (1, 3)), (1, 3))])
def test_broadcast_shape(shapes: tuple, out: tuple) -> None:
  assert Tensor._broadcast_shape(*shapes) == out and type(Tensor._broadcast_shape(*shapes)) is tuple

def test_broadcast_shape_errors_and_symbolic_dims() -> None:
  with pytest.raises(ValueError, match=r"shapes \(4, 6\) and \(5,\) can't be broadcast together \(dims \(6, 5\)\)"):
    Tensor._broadcast_shape((4, 6), (5,))
  v, w = UOp.variable("n", 1, 8), UOp.variable("m", 1, 8)
  assert Tensor._broadcast_shape((v, 1), (1, 3)) == (v, 3) and Tensor._broadcast_shape((1, v), (v,)) == (1, v)
  assert Tensor._broadcast_shape((v, 3), (v, 3)) == (v, 3)
  for a, b in [((v,), (w,)), ((v,), (3,))]:
    with pytest.raises(ValueError, match="can't be broadcast"): Tensor._broadcast_shape(a, b)

def test_broadcast_to_builds_reshape_then_expand() -> None:
  r = _t(6)
  assert r._broadcast_to((6,)) is r
  b = r._broadcast_to((4, 6))
  assert b.uop is r.uop.reshape((1, 6)).expand((4, 6))
  np.testing.assert_array_equal(b.numpy(), np.broadcast_to(r.numpy(), (4, 6)))

def test_axes_of_one_int_match_the_general_form() -> None:
  for ndim in (1, 2, 4):
    for a in range(-ndim, ndim):
      assert _axes(a, ndim, "sum") == _axes([a], ndim, "sum") == (a % ndim,)
  assert _axes(0, 0, "sum") == _axes(-1, 0, "sum") == ()
  with pytest.raises(IndexError, match="sum: dim 2 is out of range"): _axes(2, 2, "sum")
  with pytest.raises(IndexError, match="mean: dim -3"): _t(2, 3).mean(-3)

def test_mean_builds_the_graph_of_its_sum() -> None:
  x = _t(4, 6)
  m = x.mean(-1, keepdim=True)
  assert m.uop is (x.sum(-1, keepdim=True, dtype=dtypes.float32) * (1 / 6)).cast(dtypes.float32).uop
  np.testing.assert_allclose(x.mean((0, 1)).numpy(), x.numpy().mean(), rtol=1e-6)
  np.testing.assert_allclose(x.layernorm(-1).numpy(), (x.numpy() - x.numpy().mean(-1, keepdims=True)) /
                             np.sqrt(x.numpy().var(-1, keepdims=True) + 1e-5), rtol=1e-5, atol=1e-6)

def test_wrap_requires_grad_from_its_parents() -> None:
  def t(rg: bool | None) -> Tensor: return Tensor(np.ones(2, np.float32), requires_grad=rg)
  assert Tensor._wrap(t(None).uop)._requires_grad is None   # no parents
  for rgs, want in [((False,), False), ((None,), None), ((True,), True), ((False, None), None), ((None, True), True),
                    ((False, False), False), ((True, False, None), True)]:
    assert Tensor._wrap(t(None).uop, *[t(r) for r in rgs])._requires_grad is want, rgs

def test_nested_tuple_args_keep_their_types_apart() -> None:
  # a pad's or shrink's pairs are their own key when they hold only ints: still apart from bools and floats
  x = _t(4).uop
  a, b, c = UOp(Ops.PAD, x.dtype, (x,), ((0, 1),)), UOp(Ops.PAD, x.dtype, (x,), ((0, True),)), UOp(Ops.PAD, x.dtype, (x,), ((0, 1.0),))
  assert a is not b and a is not c and b is not c
  assert UOp(Ops.PAD, x.dtype, (x,), ((0, 1),)) is a
  assert UOp(Ops.SHRINK, x.dtype, (x,), ((0, 0.0),)) is not UOp(Ops.SHRINK, x.dtype, (x,), ((0, -0.0),))

def _layernorm_by_tensor_ops(x: Tensor, axis: int, eps: float) -> Tensor:
  y = x - x.mean(axis, keepdim=True)
  return y * (y * y).mean(axis, keepdim=True).add(eps).rsqrt()

@pytest.mark.parametrize("shape, axis", [((64, 256), -1), ((64, 256), 0), ((4, 6, 8), 1), ((3, 2), -2), ((2, 3, 4), 2)])
@pytest.mark.parametrize("requires_grad", [None, True, False])
def test_row_ops_on_uops_build_the_tensor_ops_graph(shape: tuple, axis: int, requires_grad: bool | None) -> None:
  # softmax and layernorm of a float32 row build their graphs on UOps: the same nodes as the Tensor ops (dtype= takes those)
  rng = np.random.default_rng(1)
  xn = (rng.standard_normal(shape) * 3).astype(np.float32)
  x = Tensor(xn, requires_grad=requires_grad)
  sm, ln = x.softmax(axis), x.layernorm(axis)
  assert sm.uop is x.softmax(axis, dtype=dtypes.float32).uop
  for eps in (1e-5, 0, 0.25):
    assert x.layernorm(axis, eps).uop is _layernorm_by_tensor_ops(x, axis, eps).uop
  assert sm.requires_grad is requires_grad and ln.requires_grad is requires_grad
  e = np.exp(xn - xn.max(axis, keepdims=True))
  np.testing.assert_allclose(sm.numpy(), e / e.sum(axis, keepdims=True), rtol=1e-5, atol=1e-7)
  y = xn.astype(np.float64) - xn.mean(axis, keepdims=True)
  np.testing.assert_allclose(ln.numpy(), y / np.sqrt((y * y).mean(axis, keepdims=True) + 1e-5), rtol=1e-4, atol=1e-5)

def test_row_ops_leave_other_cases_to_the_tensor_ops() -> None:
  x16 = Tensor(np.ones((4, 6), np.float16))
  assert x16.softmax(-1).dtype is dtypes.float16 and x16.layernorm(-1).dtype is dtypes.float16
  x = _t(4, 1)
  assert x.softmax(-1).uop is x.softmax(-1, dtype=dtypes.float32).uop   # a one-element row: no reduction
  np.testing.assert_array_equal(x.softmax(-1).numpy(), np.ones((4, 1), np.float32))
  with pytest.raises(IndexError, match="max: dim 2 is out of range"): _t(4, 6).softmax(2)
  with pytest.raises(IndexError, match="mean: dim -3 is out of range"): _t(4, 6).layernorm(-3)
  np.testing.assert_allclose(_t(4, 6).layernorm((0, 1)).numpy().mean(), 0, atol=1e-6)

def test_row_ops_take_the_uop_path(monkeypatch: pytest.MonkeyPatch) -> None:
  x = _t(4, 6)
  def no(*a, **k): raise AssertionError("the Tensor ops ran")
  for name in ("mean", "max", "sum", "_operands", "_alu"): monkeypatch.setattr(Tensor, name, no)
  x.softmax(-1), x.layernorm(0)

def test_a_sum_in_its_own_dtype_calls_no_cast(monkeypatch: pytest.MonkeyPatch) -> None:
  # a float32 sum accumulates in float32: the cast (a checked call that returns the tensor itself) is skipped
  x = _t(4, 6)
  def no_cast(*a, **k): raise AssertionError("cast called")
  monkeypatch.setattr(Tensor, "cast", no_cast)
  for axis in (None, 0, 1, (0, 1), -1):
    np.testing.assert_array_equal(x.sum(axis).numpy(), x.numpy().sum(axis))
  monkeypatch.undo()
  # other dtypes still cast to their accumulator (and half back), with the same values and dtypes as before
  for dt, acc in ((np.int8, dtypes.int32), (np.uint8, dtypes.uint32), (np.bool_, dtypes.int32), (np.float16, dtypes.float16)):
    t = _t(4, 6, dtype=dt)
    assert t.sum().dtype is acc and t.sum(1).dtype is acc
    np.testing.assert_array_equal(t.sum(1).numpy(), t.numpy().sum(1, dtype=np.float64).astype(t.sum(1).numpy().dtype))
  with pytest.raises(IndexError, match="add: dim 2 is out of range"): x.sum(2)

def test_sum_acc_dtype_follows_the_default_float(monkeypatch: pytest.MonkeyPatch) -> None:
  from core.ir.dtype import sum_acc_dtype
  assert sum_acc_dtype(dtypes.float16) is dtypes.float32 and sum_acc_dtype(dtypes.int8) is dtypes.int32
  monkeypatch.setattr(dtypes, "default_float", dtypes.float64)   # cached per dtype and default float
  assert sum_acc_dtype(dtypes.float16) is dtypes.float64 and sum_acc_dtype(dtypes.float32) is dtypes.float64
