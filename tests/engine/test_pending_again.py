"""An eager reduction, softmax or layernorm repeated on a tensor whose node is unchanged takes its pending result (a
plans.PendingPlan) from the tensor (plans.again): no key, check or plan lookup is made again. The pending result holds no
values, so each realize reads the buffers as they are then; results must be the ones the general path gives."""
import numpy as np
import pytest
from core import Tensor
from core.engine import realize as R
from core.tensor import plans, reduce as RD
from tests.engine.pending_helpers import calls

def _t(a: np.ndarray) -> Tensor: return Tensor(a).realize()

def _pendings(fn, monkeypatch) -> int:
  """How many times fn() makes a pending result the general way (plans.pending, which reductions and softmax call)."""
  return calls(RD, "pending", fn, monkeypatch)

CASES = [("sum", lambda x: x.sum(), lambda a: a.sum()), ("sum axis", lambda x: x.sum(1), lambda a: a.sum(1)),
         ("sum keepdim", lambda x: x.sum(-1, keepdim=True), lambda a: a.sum(-1, keepdims=True)),
         ("softmax", lambda x: x.softmax(-1), lambda a: np.exp(a) / np.exp(a).sum(-1, keepdims=True)),
         ("layernorm", lambda x: x.layernorm(-1), lambda a: (a - a.mean(-1, keepdims=True)) / np.sqrt(a.var(-1, keepdims=True) + 1e-5))]

@pytest.mark.parametrize("name,op,want", CASES, ids=[c[0] for c in CASES])
def test_a_repeat_takes_its_pending_result_from_the_tensor(name, op, want, monkeypatch):
  a = np.random.default_rng(0).standard_normal((16, 64)).astype(np.float32)
  x = _t(a)
  first = op(x)
  p = first.__dict__["_pending"]
  assert type(p) is plans.PendingPlan
  got: list[Tensor] = []
  assert _pendings(lambda: got.append(op(x)), monkeypatch) == 0
  assert got[0] is not first and got[0].__dict__["_pending"] is p   # a new tensor over the same pending result
  np.testing.assert_allclose(got[0].numpy(), want(a.astype(np.float64)), rtol=2e-5, atol=2e-6)
  np.testing.assert_allclose(first.numpy(), got[0].numpy())

def test_calls_with_other_arguments_are_kept_apart():
  a = np.random.default_rng(1).standard_normal((8, 32)).astype(np.float32)
  x = _t(a)
  ops = [(lambda: x.sum(), a.sum()), (lambda: x.sum(0), a.sum(0)), (lambda: x.sum(1), a.sum(1)), (lambda: x.sum(1, keepdim=True), a.sum(1, keepdims=True)),
         (lambda: x.sum(dtype="float32"), a.sum()), (lambda: x.softmax(0), np.exp(a) / np.exp(a).sum(0)),
         (lambda: x.layernorm(-1, eps=1e-3), (a - a.mean(-1, keepdims=True)) / np.sqrt(a.var(-1, keepdims=True) + 1e-3))]
  for _ in range(3):
    for op, want in ops:
      got = op()
      assert got.shape == want.shape
      np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-5)
  assert len(x.__dict__["_again"][1]) <= plans.AGAIN

def test_the_values_written_into_the_input_are_read():
  a = np.arange(64, dtype=np.float32)
  x = _t(a.copy())
  x.sum().realize()
  y = x.sum()
  x.assign(Tensor(a + 100)).realize()   # in place: x's buffer, maybe its node too
  z = x.sum()
  assert y.item() == z.item() == float((a + 100).sum())
  x[:8].assign(Tensor(np.zeros(8, dtype=np.float32))).realize()
  assert x.sum().item() == float((a + 100)[8:].sum())

def test_a_view_or_a_pending_tensor_keeps_nothing():
  a = np.arange(64, dtype=np.float32)
  x = _t(a)
  for _ in range(2):
    v, e = x[2:], x + 1
    assert v.sum().item() == float(a[2:].sum()) and e.sum().item() == float((a + 1).sum())
    assert "_again" not in v.__dict__ and "_again" not in e.__dict__
  r = x.reshape(8, 8)   # a realized reshape is its buffer: kept, and keyed apart from x's own
  for _ in range(2): np.testing.assert_array_equal(r.sum(0).numpy(), a.reshape(8, 8).sum(0))
  assert x.sum().item() == float(a.sum())

@pytest.mark.parametrize("dt", [np.float32, np.float64, np.float16, np.int32, np.int64, np.uint8, np.bool_])
def test_dtypes(dt):
  a = (np.arange(48) % 7).astype(dt).reshape(6, 8)
  x = _t(a)
  for _ in range(3):
    np.testing.assert_allclose(x.sum().numpy(), a.sum(dtype=np.float64), rtol=1e-3)
    np.testing.assert_allclose(x.sum(1).numpy(), a.sum(1, dtype=np.float64), rtol=1e-3)
  assert x.sum().dtype == Tensor(a).sum().dtype

def test_a_weight_broadcast_onto_a_repeated_layernorm():
  rng = np.random.default_rng(2)
  a, w, b = rng.standard_normal((8, 64)).astype(np.float32), rng.standard_normal(64).astype(np.float32), rng.standard_normal((8, 1)).astype(np.float32)
  x, tw, tb = _t(a), _t(w), _t(b)
  ln = (a - a.mean(-1, keepdims=True)) / np.sqrt(a.var(-1, keepdims=True) + 1e-5)
  for _ in range(3):
    np.testing.assert_allclose((x.layernorm(-1) * tw + tb).numpy(), ln * w + b, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose((x.layernorm(-1) + tb).numpy(), ln + b, rtol=1e-4, atol=1e-5)

def test_requires_grad_set_later_builds_the_node_and_gets_gradients():
  a = np.arange(8, dtype=np.float32)
  x = _t(a)
  x.sum().realize()
  x.requires_grad = True
  y = x.sum()
  assert "uop" in y.__dict__ and y.requires_grad
  y.backward()
  np.testing.assert_array_equal(x.grad.numpy(), np.ones(8, dtype=np.float32))

def test_a_zero_eps_layernorm_is_not_kept():
  # 0.0 and -0.0 are one dict key but two plans (x + 0.0 and x + -0.0 differ where x is -0.0)
  x = _t(np.random.default_rng(3).standard_normal((4, 16)).astype(np.float32))
  x.layernorm(-1, eps=0.0)
  x.layernorm(-1, eps=-0.0)
  assert "_again" not in x.__dict__

def test_a_kept_result_after_the_caches_are_cleared():
  a = np.arange(1 << 16, dtype=np.float32) / 1024
  x = _t(a)
  for _ in range(2): x.sum().realize()
  R.eager_ops.clear()
  plans._plans.clear()
  assert x.sum().item() == float(a.astype(np.float64).sum())
  assert x.sum().item() == float(a.astype(np.float64).sum())

def test_a_replaced_node_is_not_kept_alive():
  import gc, weakref
  n = 1 << 15   # over realize.HOST_POOL_BYTES: no pool of Tensor(ndarray)'s holds its node
  x = _t(np.arange(n, dtype=np.float32))
  x.sum().realize()
  old = weakref.ref(x.uop)
  x.replace(_t(np.ones(n, dtype=np.float32)))
  gc.collect()
  assert old() is None and x.sum().item() == n
  y = _t(np.arange(64, dtype=np.float32))
  y.sum()
  y.__dict__["uop"] = _t(np.full(64, 2, dtype=np.float32)).uop   # a node swapped by other means: dropped at the next call
  assert y.sum().item() == 128.0 and y.__dict__["_again"][0] is y.uop
