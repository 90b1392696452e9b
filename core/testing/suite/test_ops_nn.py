"""Convolutions, pooling, interpolation, normalization and losses against numpy reference implementations."""
from __future__ import annotations
import numpy as np
import pytest
from core.tensor.tensor import Tensor
from core.ir.dtype import dtypes
from core.testing.helpers import check_op, np_conv, np_conv_transpose, rng

CONVS = [((1, 2, 5, 5), (3, 2, 3, 3), {}), ((2, 4, 6, 5), (4, 2, 2, 3), {"groups": 2, "stride": 2}),
         ((1, 1, 7, 7), (2, 1, 3, 3), {"dilation": 2, "padding": 1}), ((1, 3, 8), (2, 3, 3), {"stride": 2, "padding": 1}),
         ((1, 1, 4, 4, 4), (1, 1, 2, 2, 2), {}), ((1, 2, 5, 6), (2, 2, 1, 1), {"stride": (2, 3)}), ((1, 1, 3, 3), (1, 1, 3, 3), {"padding": (1, 0)})]

@pytest.mark.parametrize("xs,ws,kw", CONVS, ids=str)
def test_conv(xs, ws, kw):
  check_op([xs, ws], lambda x, w: x.conv2d(w, **kw), lambda x, w: np_conv(x, w, **kw), atol=1e-4)

def test_conv_bias_non_contiguous():
  b = np.array([0.5, -1.0, 2.0], np.float32)
  check_op([(3, 2, 5, 5), (3, 2, 3, 3)], lambda x, w: x.conv2d(w, Tensor(b)), lambda x, w: np_conv(x, w) + b.reshape(1, 3, 1, 1),
           permute_inputs=True, atol=1e-4)

CONV_T = [{}, {"stride": 2}, {"padding": 1}, {"stride": 2, "padding": 1, "output_padding": 1}, {"dilation": 2}, {"groups": 2}]

@pytest.mark.parametrize("kw", CONV_T, ids=str)
def test_conv_transpose2d(kw):
  cin = 4 if kw.get("groups") else 2
  check_op([(1, cin, 4, 3), (cin, 3, 3, 2)], lambda x, w: x.conv_transpose2d(w, **kw), lambda x, w: np_conv_transpose(x, w, **kw), atol=1e-4)

def np_pool(x, k, s, fn, pad=0, padval=0.0):
  x = np.pad(x, [(0, 0)] * (x.ndim - 2) + [(pad, pad)] * 2, constant_values=padval)
  oh, ow = (x.shape[-2] - k) // s + 1, (x.shape[-1] - k) // s + 1
  return np.stack([np.stack([fn(x[..., i * s:i * s + k, j * s:j * s + k], axis=(-2, -1)) for j in range(ow)], -1) for i in range(oh)], -2)

@pytest.mark.parametrize("k,s,pad", [(2, 2, 0), (3, 1, 0), (3, 2, 1), (2, 3, 0)], ids=str)
def test_pools(k, s, pad):
  check_op([(2, 2, 7, 6)], lambda x: x.avg_pool2d(k, s, padding=pad), lambda x: np_pool(x, k, s, np.mean, pad))
  check_op([(2, 2, 7, 6)], lambda x: x.max_pool2d(k, s, padding=pad), lambda x: np_pool(x, k, s, np.max, pad, -np.inf))

def test_avg_pool_count_exclude_pad():
  x = rng(0).uniform(size=(1, 1, 4, 4)).astype(np.float32)
  got = Tensor(x).avg_pool2d(3, 1, padding=1, count_include_pad=False).numpy()
  want = np_pool(x, 3, 1, np.sum, 1) / np_pool(np.ones_like(x), 3, 1, np.sum, 1)
  np.testing.assert_allclose(got, want, rtol=1e-5)

def np_linear_resize(x, out, align_corners=False):
  """Separable linear resize of the last len(out) dims (torch's formula)."""
  for i, o in enumerate(out):
    ax = x.ndim - len(out) + i
    n = x.shape[ax]
    pos = np.arange(o, dtype=np.float64)
    src = pos * (n - 1) / (o - 1) if align_corners and o > 1 else np.maximum((pos + 0.5) * n / o - 0.5, 0)
    i0 = np.minimum(np.floor(src).astype(int), n - 1)
    i1 = np.minimum(i0 + 1, n - 1)
    w = (src - i0).reshape([-1 if j == ax else 1 for j in range(x.ndim)])
    x = np.take(x, i0, ax) * (1 - w) + np.take(x, i1, ax) * w
  return x

@pytest.mark.parametrize("size,align", [((6, 4), False), ((2, 7), False), ((5, 5), True), ((3, 3), False)], ids=str)
def test_interpolate_linear(size, align):
  check_op([(1, 2, 3, 5)], lambda x: x.interpolate(size, mode="bilinear", align_corners=align), lambda x: np_linear_resize(x, size, align))

def test_interpolate_nearest():
  x = rng(1).uniform(size=(1, 1, 3, 4)).astype(np.float32)
  got = Tensor(x).interpolate((7, 2), mode="nearest").numpy()
  ri, ci = np.floor(np.arange(7) * 3 / 7).astype(int), np.floor(np.arange(2) * 4 / 2).astype(int)
  np.testing.assert_equal(got, x[:, :, ri][:, :, :, ci])

def test_layernorm_batchnorm():
  check_op([(3, 8)], lambda x: x.layernorm(), lambda x: (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5), grad_atol=2e-3)
  check_op([(2, 3, 4)], lambda x: x.layernorm((1, 2)), lambda x: (x - x.mean((1, 2), keepdims=True)) / np.sqrt(x.var((1, 2), keepdims=True) + 1e-5),
           grad_atol=2e-3)
  check_op([(2, 3, 4, 4), (3,), (3,), (3,), (3,)],
           lambda x, w, b, m, s: x.batchnorm(w, b, m, s.abs() + 0.5),
           lambda x, w, b, m, s: (x - m.reshape(1, 3, 1, 1)) * w.reshape(1, 3, 1, 1) * (np.abs(s) + 0.5).reshape(1, 3, 1, 1) + b.reshape(1, 3, 1, 1))

def np_log_softmax(x, axis): return x - np.log(np.exp(x).sum(axis, keepdims=True))

def test_cross_entropy():
  y = np.array([0, 3, 1, 4])
  onehot = np.eye(5)[y]
  check_op([(4, 5)], lambda x: x.cross_entropy(Tensor(y)), lambda x: -(np_log_softmax(x, 1) * onehot).sum(1).mean())
  check_op([(4, 5)], lambda x: x.cross_entropy(Tensor(y), label_smoothing=0.1, reduction="sum"),
           lambda x: -(np_log_softmax(x, 1) * (onehot * 0.9 + 0.02)).sum())
  check_op([(4, 5), (4, 5)], lambda x, p: x.cross_entropy(p.softmax(1), reduction="none"),
           lambda x, p: -(np_log_softmax(x, 1) * np.exp(np_log_softmax(p, 1))).sum(1))

def test_sparse_categorical_crossentropy():
  y = np.array([2, -1, 0])
  def want(x):
    lp = np_log_softmax(x, -1)
    return -(lp[[0, 2], [2, 0]]).sum() / 2
  check_op([(3, 4)], lambda x: x.sparse_categorical_crossentropy(Tensor(y)), want)

def test_binary_crossentropy():
  y = np.array([[1.0, 0.0, 1.0], [0.0, 0.0, 1.0]], np.float32)
  check_op([(2, 3)], lambda p: p.sigmoid().binary_crossentropy(Tensor(y)),
           lambda p: -(y * np.log(1 / (1 + np.exp(-p))) + (1 - y) * np.log(1 - 1 / (1 + np.exp(-p)))).mean())
  check_op([(2, 3)], lambda x: x.binary_crossentropy_logits(Tensor(y)),
           lambda x: (np.maximum(x, 0) - x * y + np.log1p(np.exp(-np.abs(x)))).mean(), low=-10, high=10)
  assert np.isfinite(Tensor([0.0, 1.0]).binary_crossentropy(Tensor([1.0, 0.0])).item())

def np_pool_ref(x, k, s, p, ceil_mode, count_include_pad=True):
  """torch's pooling windows of the last two dims: (max, first argmax in the flattened input, average)."""
  H, W = x.shape[-2:]
  def size(n, k, s, p):
    if not ceil_mode: return (n + 2 * p - k) // s + 1
    o = -(-(n + 2 * p - k) // s) + 1
    return o - 1 if (o - 1) * s >= n + p else o
  oh, ow = size(H, k[0], s[0], p[0]), size(W, k[1], s[1], p[1])
  mx, arg, avg = (np.zeros(x.shape[:-2] + (oh, ow)) for _ in range(3))
  for i in range(oh):
    for j in range(ow):
      h0, w0 = i * s[0] - p[0], j * s[1] - p[1]
      h1, w1 = min(h0 + k[0], H + p[0]), min(w0 + k[1], W + p[1])
      a0, b0, a1, b1 = max(h0, 0), max(w0, 0), min(h1, H), min(w1, W)
      win = x[..., a0:a1, b0:b1].reshape(x.shape[:-2] + (-1,))
      mx[..., i, j] = win.max(-1)
      at = win.argmax(-1)
      arg[..., i, j] = (a0 + at // (b1 - b0)) * W + b0 + at % (b1 - b0)
      avg[..., i, j] = win.sum(-1) / ((h1 - h0) * (w1 - w0) if count_include_pad else (a1 - a0) * (b1 - b0))
  return mx, arg.astype(np.int32), avg

POOLS = [((2, 2), (2, 2), (0, 0)), ((3, 3), (2, 2), (1, 1)), ((3, 2), (2, 3), (1, 0)), ((2, 2), (1, 1), (0, 0))]

@pytest.mark.parametrize("k,s,p", POOLS, ids=str)
@pytest.mark.parametrize("ceil_mode", [False, True])
def test_pool_ceil_mode_and_indices(k, s, p, ceil_mode):
  check_op([(1, 2, 7, 6)], lambda t: t.max_pool2d(k, s, padding=p, ceil_mode=ceil_mode), lambda x: np_pool_ref(x, k, s, p, ceil_mode)[0])
  for cip in (True, False):
    check_op([(1, 2, 7, 6)], lambda t: t.avg_pool2d(k, s, padding=p, ceil_mode=ceil_mode, count_include_pad=cip),
             lambda x: np_pool_ref(x, k, s, p, ceil_mode, cip)[2])
  x = rng(7).integers(0, 4, size=(1, 2, 7, 6)).astype(np.float32)   # ties: the first maximum's index
  v, i = Tensor(x).max_pool2d(k, s, padding=p, ceil_mode=ceil_mode, return_indices=True)
  wv, wi, _ = np_pool_ref(x, k, s, p, ceil_mode)
  np.testing.assert_equal(v.numpy(), wv)
  np.testing.assert_equal(i.numpy(), wi)
  assert i.dtype is dtypes.int32

@pytest.mark.parametrize("k,s,p", POOLS, ids=str)
def test_max_unpool2d(k, s, p):
  x = rng(8).uniform(size=(1, 2, 6, 6)).astype(np.float32)
  v, i = Tensor(x).max_pool2d(k, s, padding=p, return_indices=True)
  vn, iN = v.numpy(), i.numpy()
  want = np.zeros((1, 2, 36), np.float32)
  for c in range(2): want[0, c, iN[0, c].ravel()] = vn[0, c].ravel()
  np.testing.assert_equal(Tensor(vn).max_unpool2d(i, k, s, padding=p, output_size=x.shape).numpy(), want.reshape(x.shape))
  if k == s and p == (0, 0):   # the default output size is the pooled input's
    check_op([vn.shape], lambda t: t.max_unpool2d(i, k, s), lambda y: _np_unpool(y, iN, (1, 2, 6, 6)), inputs=[vn])

def _np_unpool(y, idx, shape):
  out = np.zeros(shape[:2] + (shape[2] * shape[3],))
  for b in range(shape[0]):
    for c in range(shape[1]): out[b, c, idx[b, c].ravel()] = y[b, c].ravel()
  return out.reshape(shape)

@pytest.mark.parametrize("p,dim", [(2.0, 1), (1.0, 0), (3.0, -1), (float("inf"), 1), (0, 1), (-1, 0)], ids=str)
def test_normalize(p, dim):
  def want(x):
    if p == 0: return x / np.maximum((x != 0).sum(dim, keepdims=True), 1e-12)   # torch: the count of nonzero elements
    n = np.abs(x).max(dim, keepdims=True) if p == float("inf") else (np.abs(x) ** p).sum(dim, keepdims=True) ** (1 / p)
    return x / np.maximum(n, 1e-12)
  check_op([(3, 4)], lambda t: t.normalize(p, dim), want)

def np_sdpa(q, k, v, mask=None, causal=False):
  k, v = np.repeat(k, q.shape[-3] // k.shape[-3], -3), np.repeat(v, q.shape[-3] // v.shape[-3], -3)
  s = q @ k.swapaxes(-1, -2) / np.sqrt(q.shape[-1])
  if causal: mask = np.tril(np.ones(s.shape[-2:], bool))
  if mask is not None: s = s + (np.where(mask, 0, -np.inf) if mask.dtype == bool else mask)
  e = np.exp(s - s.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True) @ v

SDPA_MASK = np.array([[True, False, True, True, False], [True, True, False, False, False], [False, True, True, True, True]])

@pytest.mark.parametrize("case", ["plain", "causal", "bool_mask", "float_mask", "gqa"])
def test_scaled_dot_product_attention(case):
  kh = 1 if case == "gqa" else 2
  shapes = [(1, 2, 3, 4), (1, kh, 5, 4), (1, kh, 5, 3)]
  fmask = rng(9).uniform(-1, 1, size=(3, 5)).astype(np.float32)
  kw = {"causal": {"is_causal": True}, "bool_mask": {"attn_mask": Tensor(SDPA_MASK)}, "float_mask": {"attn_mask": Tensor(fmask)},
        "gqa": {"enable_gqa": True}}.get(case, {})
  nkw = {"causal": {"causal": True}, "bool_mask": {"mask": SDPA_MASK}, "float_mask": {"mask": fmask}}.get(case, {})
  check_op(shapes, lambda q, k, v: q.scaled_dot_product_attention(k, v, **kw), lambda q, k, v: np_sdpa(q, k, v, **nkw))

def test_sdpa_dropout_and_errors():
  q = Tensor(rng(10).uniform(size=(2, 3, 4)).astype(np.float32))
  base = q.scaled_dot_product_attention(q, q).numpy()
  np.testing.assert_allclose(q.scaled_dot_product_attention(q, q, dropout_p=0.5).numpy(), base, rtol=1e-6)   # not training: no dropout
  with Tensor.train():
    dropped = q.scaled_dot_product_attention(q, q, dropout_p=1.0).numpy()
  np.testing.assert_equal(dropped, np.zeros_like(base))
  with pytest.raises(RuntimeError, match="sdpa: attn_mask and is_causal=True can't be used together"): q.scaled_dot_product_attention(q, q, attn_mask=Tensor.ones(3, 3, dtype=dtypes.bool), is_causal=True)

def np_nll(lp, y, w, reduction, ignore=-100):
  keep = y != ignore
  yy = np.where(keep, y, 0)
  picked = np.take_along_axis(lp, np.expand_dims(yy, 1), 1).squeeze(1)
  ww = w[yy] * keep
  loss = -picked * ww
  return {"none": loss, "sum": loss.sum(), "mean": loss.sum() / ww.sum()}[reduction]

Y3 = np.array([[0, 2, 1, -100], [2, 2, 0, 1]])   # targets of a (2, 3, 4) input: 3 classes, one ignored
W3 = np.array([0.5, 2.0, 1.0], np.float32)

@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_nll_loss_cross_entropy_weights_3d(reduction):
  check_op([(2, 3, 4)], lambda x: x.log_softmax(1).nll_loss(Tensor(Y3), Tensor(W3), reduction=reduction),
           lambda x: np_nll(np_log_softmax(x, 1), Y3, W3, reduction))
  check_op([(2, 3, 4)], lambda x: x.cross_entropy(Tensor(Y3), reduction=reduction, weight=Tensor(W3)),
           lambda x: np_nll(np_log_softmax(x, 1), Y3, W3, reduction))
  check_op([(2, 3, 4)], lambda x: x.log_softmax(1).nll_loss(Tensor(Y3), reduction=reduction),
           lambda x: np_nll(np_log_softmax(x, 1), Y3, np.ones(3), reduction))

def test_cross_entropy_smoothing_weights_and_errors():
  y = np.array([0, 2, 1, 2])
  w = np.array([0.5, 2.0, 1.5], np.float32)
  def want(x):
    lp = np_log_softmax(x, 1)
    nll = np_nll(lp, y, w, "none")
    smooth = -(lp * w).sum(1)
    return (0.8 * nll + 0.2 / 3 * smooth).sum() / w[y].sum()
  check_op([(4, 3)], lambda x: x.cross_entropy(Tensor(y), label_smoothing=0.2, weight=Tensor(w)), want)
  check_op([(4, 3), (4, 3)], lambda x, p: x.cross_entropy(p.softmax(1), weight=Tensor(w), reduction="sum"),
           lambda x, p: -(np_log_softmax(x, 1) * np.exp(np_log_softmax(p, 1)) * w).sum())
  with pytest.raises(ValueError, match="reduction must be .* got 'typo'"): Tensor.ones(4, 3).cross_entropy(Tensor(y), reduction="typo")
  with pytest.raises(ValueError, match="reduction must be .* got 'typo'"): Tensor.ones(4, 3).nll_loss(Tensor(y), reduction="typo")
  with pytest.raises(RuntimeError, match=r"cross_entropy: target shape \(4, 1\) fits neither input \(4, 3\)"): Tensor.ones(4, 3).cross_entropy(Tensor([[0], [1], [2], [0]]))
