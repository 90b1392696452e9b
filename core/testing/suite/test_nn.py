"""nn layers: each forward (and a few backwards) against numpy implementations of the same math with the same weights."""
from __future__ import annotations
import math
import numpy as np
import pytest
from core.tensor.tensor import Tensor
from core.tensor import nn
from core.helpers import Context
from core.testing.helpers import np_conv, np_conv_transpose

@pytest.fixture
def training():
  with Context(TRAINING=1): yield

@pytest.fixture
def evaluating():
  with Context(TRAINING=0): yield

def rand(*shape: int, seed: int = 0) -> np.ndarray: return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)

# *** numpy references ***

def np_layernorm(x: np.ndarray, axes: tuple[int, ...], eps: float) -> np.ndarray:
  x = x.astype(np.float64)
  return (x - x.mean(axis=axes, keepdims=True)) / np.sqrt(x.var(axis=axes, keepdims=True) + eps)

# *** Linear ***

def test_linear_forward_matches_numpy():
  layer = nn.Linear(5, 3)
  x = rand(4, 5)
  out = layer(Tensor(x)).numpy()
  assert out.shape == (4, 3)
  np.testing.assert_allclose(out, x @ layer.weight.numpy().T + layer.bias.numpy(), rtol=1e-5, atol=1e-5)

def test_linear_without_bias_and_batched_input():
  layer = nn.Linear(6, 2, bias=False)
  assert layer.bias is None
  x = rand(2, 3, 6, seed=1)
  np.testing.assert_allclose(layer(Tensor(x)).numpy(), x @ layer.weight.numpy().T, rtol=1e-5, atol=1e-5)

def test_linear_init_is_kaiming_uniform():
  layer = nn.Linear(64, 128)
  w, b, bound = layer.weight.numpy(), layer.bias.numpy(), 1 / math.sqrt(64)
  assert w.shape == (128, 64) and b.shape == (128,)
  assert np.abs(w).max() <= bound + 1e-6 and np.abs(b).max() <= bound + 1e-6
  # uniform over [-bound, bound]: the extremes are reached and the variance is bound^2/3
  assert np.abs(w).max() > 0.95 * bound and w.min() < -0.95 * bound
  assert abs(w.var() - bound ** 2 / 3) < 0.1 * bound ** 2 / 3
  assert abs(w.mean()) < 0.05 * bound

def test_linear_backward_matches_numpy():
  layer = nn.Linear(3, 2)
  layer.weight.requires_grad_(), layer.bias.requires_grad_()
  x = rand(4, 3, seed=2)
  g = rand(4, 2, seed=3)
  (layer(Tensor(x)) * Tensor(g)).sum().backward()
  np.testing.assert_allclose(layer.weight.grad.numpy(), g.T @ x, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(layer.bias.grad.numpy(), g.sum(0), rtol=1e-5, atol=1e-5)

# *** convolutions ***

@pytest.mark.parametrize("kw", [dict(), dict(stride=2), dict(padding=1), dict(dilation=2), dict(groups=2), dict(stride=2, padding=2, dilation=1)])
def test_conv2d_forward_matches_numpy(kw):
  layer = nn.Conv2d(4, 6, 3, **kw)
  x = rand(2, 4, 7, 8, seed=4)
  ref = np_conv(x, layer.weight.numpy(), layer.bias.numpy(), **kw)
  out = layer(Tensor(x)).numpy()
  assert out.shape == ref.shape
  np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)

def test_conv2d_weight_shape_and_init():
  Tensor.manual_seed(4)
  layer = nn.Conv2d(6, 9, (3, 2), groups=3)
  w, b, bound = layer.weight.numpy(), layer.bias.numpy(), 1 / math.sqrt(2 * 3 * 2)
  assert w.shape == (9, 2, 3, 2) and layer.bias.shape == (9,)
  assert np.abs(w).max() <= bound + 1e-6 and np.abs(b).max() <= bound + 1e-6
  # uniform over [-bound, bound] (fan_in 12, not 36: the groups split the input channels): 108 draws reach past 0.8 bound
  assert w.min() < -0.8 * bound and w.max() > 0.8 * bound and len(np.unique(b)) == 9

def test_conv2d_padding_same_keeps_spatial_size():
  layer = nn.Conv2d(2, 3, 3, padding="same", bias=False)
  x = rand(1, 2, 5, 6, seed=5)
  out = layer(Tensor(x)).numpy()
  assert out.shape == (1, 3, 5, 6)
  np.testing.assert_allclose(out, np_conv(x, layer.weight.numpy(), None, padding=1), rtol=1e-4, atol=1e-4)

def test_conv2d_bad_arguments_raise():
  with pytest.raises(ValueError, match="groups"): nn.Conv2d(3, 4, 3, groups=2)
  with pytest.raises(ValueError, match="same"): nn.Conv2d(3, 4, 3, padding="valid")
  with pytest.raises(ValueError, match="stride"): nn.Conv2d(3, 4, 3, padding="same", stride=2)

def test_conv1d_forward_matches_numpy():
  layer = nn.Conv1d(3, 4, 3, stride=2, padding=1)
  assert layer.weight.shape == (4, 3, 3)
  x = rand(2, 3, 9, seed=6)
  ref = np_conv(x, layer.weight.numpy(), layer.bias.numpy(), stride=2, padding=1)
  np.testing.assert_allclose(layer(Tensor(x)).numpy(), ref, rtol=1e-4, atol=1e-4)

@pytest.mark.parametrize("kw", [dict(), dict(stride=2), dict(stride=2, padding=1, output_padding=1), dict(groups=2), dict(dilation=2)])
def test_conv_transpose2d_forward_matches_numpy(kw):
  layer = nn.ConvTranspose2d(4, 6, 3, **kw)
  assert layer.weight.shape == (4, 6 // kw.get("groups", 1), 3, 3)
  x = rand(2, 4, 4, 5, seed=7)
  ref = np_conv_transpose(x, layer.weight.numpy(), layer.bias.numpy(), **kw)
  out = layer(Tensor(x)).numpy()
  assert out.shape == ref.shape
  np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)

# *** normalization ***

def test_batchnorm_training_normalizes_with_batch_stats_and_updates_running_stats(training):
  bn = nn.BatchNorm2d(3, momentum=0.1)
  bn.weight.assign(Tensor([1.0, 2.0, 0.5])).realize()
  bn.bias.assign(Tensor([0.0, -1.0, 3.0])).realize()
  x = rand(4, 3, 2, 5, seed=8) * 3 + 1
  out = bn(Tensor(x)).numpy()
  mean, var = x.astype(np.float64).mean(axis=(0, 2, 3)), x.astype(np.float64).var(axis=(0, 2, 3))
  ref = (x - mean[None, :, None, None]) / np.sqrt(var[None, :, None, None] + 1e-5) * np.array([1, 2, .5])[None, :, None, None] \
    + np.array([0, -1, 3])[None, :, None, None]
  np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
  bn.running_mean.realize(), bn.running_var.realize(), bn.num_batches_tracked.realize()
  n = x.size / 3
  np.testing.assert_allclose(bn.running_mean.numpy(), 0.1 * mean, rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(bn.running_var.numpy(), 0.9 + 0.1 * var * n / (n - 1), rtol=1e-4, atol=1e-5)
  assert bn.num_batches_tracked.numpy().tolist() == [1]

def test_batchnorm_eval_uses_running_stats(evaluating):
  bn = nn.BatchNorm(2)
  bn.running_mean.assign(Tensor([1.0, -2.0])).realize()
  bn.running_var.assign(Tensor([4.0, 0.25])).realize()
  x = rand(3, 2, seed=9)
  ref = (x - np.array([1.0, -2.0])) / np.sqrt(np.array([4.0, 0.25]) + 1e-5)
  np.testing.assert_allclose(bn(Tensor(x)).numpy(), ref, rtol=1e-5, atol=1e-5)
  # eval mode leaves the running statistics alone
  np.testing.assert_allclose(bn.running_mean.numpy(), [1.0, -2.0])

def test_batchnorm_without_affine_or_tracking(training):
  bn = nn.BatchNorm(3, affine=False, track_running_stats=False)
  assert bn.weight is None and bn.bias is None and not hasattr(bn, "running_mean")
  x = rand(5, 3, 4, seed=10)
  np.testing.assert_allclose(bn(Tensor(x)).numpy(), np_layernorm(x, (0, 2), 1e-5), rtol=1e-4, atol=1e-4)

def test_layernorm_matches_numpy():
  ln = nn.LayerNorm((3, 4), eps=1e-5)
  ln.weight.assign(Tensor(rand(3, 4, seed=11))).realize()
  ln.bias.assign(Tensor(rand(3, 4, seed=12))).realize()
  x = rand(2, 3, 4, seed=13) * 2 + 5
  ref = np_layernorm(x, (1, 2), 1e-5) * ln.weight.numpy() + ln.bias.numpy()
  np.testing.assert_allclose(ln(Tensor(x)).numpy(), ref, rtol=1e-4, atol=1e-4)

def test_layernorm_no_affine_and_shape_check():
  ln = nn.LayerNorm(5, elementwise_affine=False)
  assert ln.weight is None
  x = rand(3, 5, seed=14)
  np.testing.assert_allclose(ln(Tensor(x)).numpy(), np_layernorm(x, (1,), 1e-5), rtol=1e-4, atol=1e-4)
  with pytest.raises(ValueError, match="normalized_shape"): ln(Tensor(rand(5, 3)))

def test_groupnorm_matches_numpy():
  gn = nn.GroupNorm(2, 4)
  gn.weight.assign(Tensor([1.0, 2.0, 3.0, 4.0])).realize()
  gn.bias.assign(Tensor([0.5, 0.0, -0.5, 1.0])).realize()
  x = rand(2, 4, 3, 3, seed=15)
  grouped = np_layernorm(x.reshape(2, 2, -1), (2,), 1e-5).reshape(x.shape)
  ref = grouped * np.array([1, 2, 3, 4.0])[None, :, None, None] + np.array([.5, 0, -.5, 1])[None, :, None, None]
  np.testing.assert_allclose(gn(Tensor(x)).numpy(), ref, rtol=1e-4, atol=1e-4)
  with pytest.raises(ValueError, match="divisible"): nn.GroupNorm(3, 4)

def test_rmsnorm_matches_numpy():
  rn = nn.RMSNorm(6, eps=1e-6)
  rn.weight.assign(Tensor(rand(6, seed=16))).realize()
  x = rand(2, 3, 6, seed=17)
  ref = x / np.sqrt((x.astype(np.float64) ** 2).mean(-1, keepdims=True) + 1e-6) * rn.weight.numpy()
  np.testing.assert_allclose(rn(Tensor(x)).numpy(), ref, rtol=1e-4, atol=1e-5)
  assert nn.RMSNorm(6, elementwise_affine=False).weight is None

# *** Embedding, Dropout ***

def test_embedding_looks_up_rows():
  emb = nn.Embedding(7, 4)
  w = emb.weight.numpy()
  bound = math.sqrt(6 / (7 + 4))
  assert w.shape == (7, 4) and np.abs(w).max() <= bound + 1e-6 and len(np.unique(w)) == 28   # drawn, not a constant
  idx = np.array([[0, 6, 3], [3, 3, 1]], dtype=np.int32)
  out = emb(Tensor(idx)).numpy()
  assert out.shape == (2, 3, 4)
  np.testing.assert_array_equal(out, w[idx])

def test_embedding_gradient_counts_rows():
  emb = nn.Embedding(5, 2)
  emb.weight.requires_grad_()
  idx = np.array([1, 4, 1, 1], dtype=np.int32)
  emb(Tensor(idx)).sum().backward()
  ref = np.zeros((5, 2), np.float32)
  np.add.at(ref, idx, 1.0)
  np.testing.assert_array_equal(emb.weight.grad.numpy(), ref)

def test_embedding_rejects_float_indices():
  with pytest.raises(TypeError, match="integer"): nn.Embedding(3, 2)(Tensor([0.0, 1.0]))

def test_dropout_eval_is_identity(evaluating):
  x = rand(4, 5, seed=18)
  np.testing.assert_array_equal(nn.Dropout(0.5)(Tensor(x)).numpy(), x)

def test_dropout_training_zeroes_and_rescales(training):
  x = np.ones((64, 64), np.float32)
  out = nn.Dropout(0.25)(Tensor(x)).numpy()
  kept = out != 0
  np.testing.assert_allclose(out[kept], 1 / 0.75, rtol=1e-6)
  assert 0.2 < 1 - kept.mean() < 0.3
  np.testing.assert_array_equal(nn.Dropout(0.0)(Tensor(x)).numpy(), x)
  with pytest.raises(ValueError, match="p must be"): nn.Dropout(1.5)

def test_batchnorm_state_tensors_do_not_share_buffers(training):
  # zeros/ones tensors are equal lazy graphs; realizing them together must still give each its own buffer
  bn = nn.BatchNorm(2)
  Tensor.realize(*nn.state.get_parameters(bn))
  bn(Tensor(np.array([[1.0, 2.0], [3.0, 6.0]], np.float32))).realize()
  bn.running_mean.realize(), bn.running_var.realize()
  np.testing.assert_allclose(bn.running_mean.numpy(), [0.2, 0.4], rtol=1e-6)
  np.testing.assert_array_equal(bn.bias.numpy(), [0.0, 0.0])
  np.testing.assert_array_equal(bn.weight.numpy(), [1.0, 1.0])
