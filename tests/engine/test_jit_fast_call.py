"""A Jit replay whose inputs are buffers or numpy arrays of the captured shapes is decided in Jit.__call__ itself (no _call), and
returned tensors that read no input are set back to their captured nodes; other calls still take _call's general path."""
import numpy as np
import pytest
from core import Jit, Tensor
from core.tensor.jit import JitError

def test_common_replay_skips_the_general_path(monkeypatch):
  @Jit
  def f(x): return (x * 2 + 1).reshape(2, 3), (x - 1).sum()
  rng = np.random.default_rng(0)
  for _ in range(2): f(Tensor(rng.standard_normal(6).astype(np.float32)))
  assert f.ret_fixed is not None and [t for t, _ in f.ret_fixed] == f.ret_tensors
  general: list[int] = []
  real = Jit._call
  def counting(self, args, kwargs):
    general.append(1)
    return real(self, args, kwargs)
  monkeypatch.setattr(Jit, "_call", counting)
  for i in range(4):
    x = rng.standard_normal(6).astype(np.float32)
    a, s = f(Tensor(x)) if i % 2 else f(x)   # a Tensor(ndarray) or the array itself
    np.testing.assert_allclose(a.numpy(), (x * 2 + 1).reshape(2, 3), rtol=1e-6)
    np.testing.assert_allclose(s.numpy(), (x - 1).sum(), rtol=1e-5)
  assert not general
  # a lazy input, a keyword input and a changed shape go the general way (and the last still raises)
  x = rng.standard_normal(6).astype(np.float32)
  np.testing.assert_allclose(f(Tensor(x) + 0)[0].numpy(), (x * 2 + 1).reshape(2, 3), rtol=1e-6)
  np.testing.assert_allclose(f(x=Tensor(x))[0].numpy(), (x * 2 + 1).reshape(2, 3), rtol=1e-6)
  with pytest.raises(JitError, match="inputs changed"): f(Tensor(x.reshape(2, 3)))
  assert len(general) == 3

def test_returned_tensor_gets_its_captured_node_back():
  @Jit
  def f(x): return (x + 1).reshape(2, 2)
  for i in range(3): r = f(Tensor(np.full(4, i, np.float32)))
  r.uop = (r + 5).uop   # the caller rebinds the returned tensor: the next replay hands it back over the Jit's buffer
  r2 = f(Tensor(np.full(4, 7, np.float32)))
  assert r2 is r
  np.testing.assert_array_equal(r2.numpy(), np.full((2, 2), 8, np.float32))
  assert f.reset() is None and f.ret_fixed is None
