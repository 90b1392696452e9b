"""Neural-network functionals on Tensor: normalization and losses."""
from __future__ import annotations
from typing import TYPE_CHECKING, Callable, Sequence
from core.ir.dtype import dtypes
from core.tensor.validate import check_index_tensor, check_axis
from core.tensor.reduce import layernorm_uops
from core.tensor.plans import PLANS, PendingPlan, again, keep, pending, replayable, replayed

if TYPE_CHECKING:
  from core.tensor.tensor import Tensor

def _reduction(x: Tensor, reduction: str) -> Tensor:
  if reduction == "none": return x
  if reduction == "sum": return x.sum()
  if reduction == "mean": return x.mean()
  raise ValueError(f"reduction must be 'none', 'sum' or 'mean', got {reduction!r}")

# multiply-adds from which a hot eager causal attention (below) splits its rows. Eager calls on 2 Zen 3 threads, A/B in one
# process, medians of 9 mins of 10, ms whole -> split: 1x4x256x64 (2**25) 1.20 -> 1.41, 1x8x256x64 (2**26) 1.72 -> 1.57,
# 1x12x256x64 2.49 -> 1.92, 1x12x512x64 9.47 -> 6.69
REPLAYED_SPLIT_WORK = 2 ** 26
# eager calls of one signature over realized inputs after which it is hot. The split compiles 13 kernels where the whole
# takes 3: 1x12x256x64's first call 0.7 -> 2.3-3.0 s with a cold compile cache (0.30 -> 0.88 warm), so a shape used a few
# times (a generation loop's growing keys: each step a new one) stays whole
SPLIT_HOT_CALLS = 8
_calls: dict[tuple, int] = {}   # eager calls per signature, up to SPLIT_HOT_CALLS; all dropped at PLANS signatures

def _hot(sig: tuple) -> bool:
  """Whether this signature was called SPLIT_HOT_CALLS times before (and count this call)."""
  if (n := _calls.get(sig, 0)) >= SPLIT_HOT_CALLS: return True
  if len(_calls) >= PLANS: _calls.clear()   # one step: safe while other threads build
  _calls[sig] = n + 1
  return False

def _causal_row_cuts(L: int, S: int, work: int, keep_whole: bool, hot: bool = False) -> list[int]:
  """Where a causal attention's query rows split into blocks: up to 4 blocks of at least 64 rows (a multiple of 16), while the
  keys reach that far. Each block's products skip the keys above the diagonal: 4 blocks do 5/8 of the multiply work in 13
  kernels instead of 3 (1x12x256x64 in a Jit, one Zen 3 thread: 5.1 -> 3.6 ms a replay). Eager, the split's four times the
  tensor ops cost ~3 ms more to build than a 1x12x256x64 saves, so there it waits for `work` (multiply-adds) of 2**30
  (1x12x1024x64: 62 -> 49 ms); a `hot` one (a signature of realized inputs, replayed by plans.replayed: it costs only its
  nodes, ~0.4 ms for 4 blocks on a Zen 3, and realizes as one eager op cache entry) from REPLAYED_SPLIT_WORK. Not
  for training: the split's backward is four times the kernels (a GPT-2 block's first call 5.9 -> 11.6 s) for about no
  time saved (its step 159 -> 155 ms); keep_whole says a gradient is needed (or a shape is symbolic)."""
  from core.engine.capture import state
  if keep_whole or not (state()[1] or work >= (REPLAYED_SPLIT_WORK if hot else 2 ** 30)): return [0, L]
  n = max(1, min(4, L // 64, S // 64))
  rows = (-(-L // n) + 15) // 16 * 16
  return sorted({min(L, b * rows) for b in range(n + 1)})

def _attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, scale: float, dropout_p: float, row0: int, causal: bool = False) -> Tensor:
  """softmax(q k^T * scale + mask) v; causal masks keys past each query row, rows counted from row0."""
  import math
  qk = q.matmul(k.transpose(-2, -1)) * scale
  if causal: mask = qk._tri_mask(row0, False)   # rows >= cols: the lower triangle, as tril of ones would give, in fewer ops
  if mask is not None: qk = qk + (mask.where(0.0, -math.inf) if mask.dtype is dtypes.bool else mask)
  return qk.softmax(-1).cast(q.dtype).dropout(dropout_p) @ v

class NNOpsMixin:
  def sequential(self: Tensor, ll: Sequence[Callable[[Tensor], Tensor]]) -> Tensor:  # type: ignore[misc]
    x = self
    for f in ll: x = f(x)
    return x

  def layernorm(self: Tensor, axis: int | Sequence[int] = -1, eps: float = 1e-5) -> Tensor:  # type: ignore[misc]
    """(x - mean) / sqrt(var + eps) over `axis` (population variance), no affine part."""
    # an eager repeat takes its pending result from x (plans.again); not for a zero eps: 0.0 and -0.0 are one key but two plans
    call = ("layernorm", axis, type(eps), eps) if type(axis) is int and eps else None
    if call is not None and (r := again(self, call)) is not None: return r
    if (fast := layernorm_uops(self, axis, eps)) is not None: return fast if call is None else keep(self, call, fast)   # built on UOps
    y = self - self.mean(axis, keepdim=True)
    return y * (y * y).mean(axis, keepdim=True).add(eps).rsqrt()
  def rms_norm(self: Tensor, axis: int = -1, eps: float = 1e-6) -> Tensor:  # type: ignore[misc]
    return self * (self * self).mean(axis, keepdim=True).add(eps).rsqrt()

  def batchnorm(self: Tensor, weight: Tensor | None, bias: Tensor | None, mean: Tensor, invstd: Tensor,  # type: ignore[misc]
                axis: int | Sequence[int] = 1) -> Tensor:
    """(x - mean) * weight * invstd + bias, with the per-channel tensors laid along `axis`.

    Computed as (x - m) * scale + shift, m the detached mean, scale = weight * invstd and shift = bias + (m - mean) * scale (= bias;
    its gradient is the mean's): the backward then takes two per-channel sums of the output gradient g, sum(g) (bias and mean)
    and sum(g * (x - m)) (weight and invstd), where the plain form took one for each of the four. BatchNorm uses it in training
    and eval alike. An infinite mean or invstd makes the shift, and so every output, NaN (inf - inf, 0 * inf)."""
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    axes = tuple(check_axis("batchnorm", "axis", a, self.ndim) for a in axes)
    shape = tuple(s if i in axes else 1 for i, s in enumerate(self.shape))
    # scale and shift are made per channel, then laid along `axis` (made in x's layout, a ResNet-18 step took 17 more kernels)
    per_channel = invstd.ndim == len(axes)
    def lay(t: Tensor) -> Tensor: return t.reshape(shape) if per_channel else t
    if not per_channel:   # an invstd that broadcasts against x as it is: the others are laid along `axis` first
      mean = mean.reshape(shape)
      weight = None if weight is None else weight.reshape(shape)
      bias = None if bias is None else bias.reshape(shape)
    m = mean.detach()
    scale = invstd if weight is None else weight * invstd
    shift = (m - mean) * scale
    return (self - lay(m)) * lay(scale) + lay(shift if bias is None else bias + shift)

  def binary_crossentropy(self: Tensor, Y: Tensor, reduction: str = "mean") -> Tensor:  # type: ignore[misc]
    """-(y log p + (1-y) log(1-p)); the logs are clamped at -100 like torch so p in {0, 1} stays finite."""
    lp, l1p = self.log().maximum(-100.0), (1 - self).log().maximum(-100.0)
    return _reduction(-(Y * lp + (1 - Y) * l1p), reduction)
  def binary_crossentropy_logits(self: Tensor, Y: Tensor, reduction: str = "mean", pos_weight: Tensor | None = None) -> Tensor:  # type: ignore[misc]
    """BCE on logits, stable form: (1 - y) x + (1 + (pw-1) y) * softplus(-x)."""
    lw = 1 if pos_weight is None else (pos_weight - 1) * Y + 1
    return _reduction((1 - Y) * self + lw * (-self).softplus(), reduction)

  def sparse_categorical_crossentropy(self: Tensor, Y: Tensor, ignore_index: int = -1, label_smoothing: float = 0.0,  # type: ignore[misc]
                                      reduction: str = "mean") -> Tensor:
    """Cross entropy of logits (..., classes) against int labels Y (...); labels equal to ignore_index don't count."""
    from core.tensor.tensor import Tensor
    n = self.shape[-1]
    check_index_tensor("sparse_categorical_crossentropy", "Y", Y, 0, n, ignore=ignore_index)
    logp = self.log_softmax(-1)
    keep = (Y != ignore_index)
    onehot = (Y.unsqueeze(-1) == Tensor.arange(n, device=self.device)) & keep.unsqueeze(-1)
    nll = -(logp * onehot).sum(-1)
    smooth = -logp.mean(-1) * keep
    loss = nll * (1 - label_smoothing) + smooth * label_smoothing
    if reduction == "mean": return loss.sum() / keep.sum().maximum(1).cast(loss.dtype)
    return _reduction(loss, reduction)

  def cross_entropy(self: Tensor, Y: Tensor, reduction: str = "mean", label_smoothing: float = 0.0,  # type: ignore[misc]
                    weight: Tensor | None = None, ignore_index: int = -100) -> Tensor:
    """torch.nn.functional.cross_entropy: logits (N, C, ...) (or (C,)) with class indices (N, ...) or probabilities of
    self's shape. `weight` scales each class; "mean" over indices divides by the summed weights of the counted targets.
    weight and ignore_index are keywords after tinygrad's arguments (tinygrad has neither)."""
    from core.tensor.tensor import Tensor
    if not 0.0 <= label_smoothing <= 1.0: raise ValueError(f"cross_entropy: label_smoothing must be in [0, 1], got {label_smoothing}")
    if reduction not in ("none", "sum", "mean"): raise ValueError(f"reduction must be 'none', 'sum' or 'mean', got {reduction!r}")
    if self.ndim == 0: raise ValueError("Tensor.cross_entropy: the logits need a class dim, got a 0-d tensor")
    cax = 1 if self.ndim > 1 else 0
    c = self.shape[cax]
    if c == 0: raise ValueError(f"Tensor.cross_entropy: the logits {self.shape} have no classes (dim {cax} is 0)")
    along = [c if i == cax else 1 for i in range(self.ndim)]
    w = Tensor.ones(c, device=self.device) if weight is None else weight
    logp = self.log_softmax(cax)
    if Y.shape == self.shape:   # class probabilities
      Yp = Y * (1 - label_smoothing) + label_smoothing / c
      return _reduction(-(logp * Yp * w.reshape(along)).sum(cax), reduction)
    if Y.shape != self.shape[:cax] + self.shape[cax + 1:]:
      raise RuntimeError(f"cross_entropy: target shape {Y.shape} fits neither input {self.shape} nor its shape without dim {cax}")
    check_index_tensor("cross_entropy", "Y", Y, 0, c, ignore=ignore_index)
    keep = Y != ignore_index
    onehot = (Y.unsqueeze(cax) == Tensor.arange(c, device=self.device).reshape(along)) & keep.unsqueeze(cax)
    wl = logp * w.reshape(along)
    loss = -(wl * onehot).sum(cax) * (1 - label_smoothing) - wl.sum(cax) * keep * (label_smoothing / c)
    if reduction == "mean": return loss.sum() / (onehot * w.reshape(along)).sum()
    return _reduction(loss, reduction)

  def nll_loss(self: Tensor, Y: Tensor, weight: Tensor | None = None, ignore_index: int | None = None,  # type: ignore[misc]
               reduction: str = "mean") -> Tensor:
    """Negative log likelihood of log-probabilities (N, C, ...) (or (C,)) at class indices Y (N, ...); `weight` scales
    each class and "mean" divides by the summed weights of the targets that count (those != ignore_index)."""
    from core.tensor.tensor import Tensor
    if reduction not in ("none", "sum", "mean"): raise ValueError(f"reduction must be 'none', 'sum' or 'mean', got {reduction!r}")
    cax = 1 if self.ndim > 1 else 0
    c = self.shape[cax]
    along = [c if i == cax else 1 for i in range(self.ndim)]
    check_index_tensor("nll_loss", "Y", Y, 0, c, ignore=-100 if ignore_index is None else ignore_index)
    keep = Y != (-100 if ignore_index is None else ignore_index)
    onehot = (Y.unsqueeze(cax) == Tensor.arange(c, device=self.device).reshape(along)) & keep.unsqueeze(cax)
    wy = onehot.cast(self.dtype) if weight is None else onehot.where(weight.reshape(along).cast(self.dtype), 0)
    loss = -(self * wy).sum(cax)
    if reduction == "mean": return loss.sum() / wy.sum()
    return _reduction(loss, reduction)

  def normalize(self: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Tensor:  # type: ignore[misc]
    """self / max(||self||_p along dim, eps) (torch.nn.functional.normalize)."""
    a = self._float().abs()
    if p == 0: norm = (a != 0).sum(dim, keepdim=True).cast(a.dtype)   # the count of nonzero elements, as torch
    elif p == 2: norm = (a * a).sum(dim, keepdim=True).sqrt()
    elif p == 1: norm = a.sum(dim, keepdim=True)
    elif p == float("inf"): norm = a.max(dim, keepdim=True)
    else: norm = a.pow(p).sum(dim, keepdim=True).pow(1 / p)
    return self / norm.maximum(eps)

  def scaled_dot_product_attention(self: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None = None,  # type: ignore[misc]
                                   dropout_p: float = 0.0, is_causal: bool = False, enable_gqa: bool = False,
                                   scale: float | None = None) -> Tensor:
    """softmax(q k^T * scale + mask) v with q = self (..., L, E), k (..., S, E), v (..., S, Ev). A bool mask says where to
    attend, a float mask is added; is_causal masks the upper triangle (top-left aligned, as in torch); enable_gqa
    repeats each key/value head for its group of query heads; dropout_p applies in training mode only."""
    import math
    if self.ndim < 2 or key.ndim < 2: raise ValueError(f"Tensor.scaled_dot_product_attention: query {self.shape} and key {key.shape} need (..., L, E) dims")
    if scale is None and self.shape[-1] == 0:
      raise ValueError("Tensor.scaled_dot_product_attention: the default scale 1/sqrt(E) needs E > 0; pass scale= for an empty embedding")
    if enable_gqa and self.ndim >= 3 and key.shape[-3] != self.shape[-3]:
      if self.shape[-3] % key.shape[-3]: raise ValueError(f"sdpa: {self.shape[-3]} query heads aren't a multiple of {key.shape[-3]} key heads")
      key = key.repeat_interleave(self.shape[-3] // key.shape[-3], dim=-3)
      value = value.repeat_interleave(self.shape[-3] // value.shape[-3], dim=-3)
    scale = 1 / math.sqrt(self.shape[-1]) if scale is None else scale
    if is_causal and attn_mask is not None: raise RuntimeError("sdpa: attn_mask and is_causal=True can't be used together")
    if not is_causal: return _attention(self, key, value, attn_mask, scale, dropout_p, 0)
    # causal: row i attends keys j <= i, so a block of query rows needs only the keys up to its last row; the rows split into
    # blocks whose products skip the keys above the diagonal
    L, S = self.shape[-2], key.shape[-2]
    static = all(isinstance(d, int) for d in (*self.shape, *key.shape, *value.shape))
    needs_grad = not type(self).no_grad and any(t.requires_grad for t in (self, key, value))
    inputs = (self.uop, key.uop, value.uop)
    # realized inputs (an eager call's, a bench's) replay the graph per signature: no dropout, whose mask is drawn per call
    replay = static and type(scale) in (int, float) and (dropout_p == 0 or not type(self).training) and replayable(inputs)
    sig = ("sdpa_causal", self.device, tuple(t.shape for t in (self, key, value)), tuple(t.dtype for t in (self, key, value)),
           type(scale), scale, type(self).training)
    cuts = _causal_row_cuts(L, S, math.prod(self.shape[:-1]) * S * (self.shape[-1] + value.shape[-1]) if static else 0,
                            needs_grad or not static, replay and _hot(sig))
    def build(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
      if len(cuts) <= 2: return _attention(q, k, v, None, scale, dropout_p, 0, causal=True)
      outs = [_attention(q[..., lo:hi, :], k[..., :min(hi, S), :], v[..., :min(hi, S), :], None, scale, dropout_p, lo, causal=True)
              for lo, hi in zip(cuts, cuts[1:])]
      return outs[0].cat(*outs[1:], dim=-2)
    if not replay: return build(self, key, value)
    plan, rgs = (*sig, tuple(cuts)), [t._requires_grad for t in (self, key, value)]
    if True in rgs: return type(self)._wrap(replayed(plan, inputs, lambda: build(self, key, value).uop), self, key, value)
    # pending: a steady call is one eager op cache hit keyed by the plan, its ~140 nodes neither rebuilt nor torn down. Its
    # builder may run when the result is asked for its node (plans.PendingPlan): over this call's input nodes, not the tensors'
    out = pending(plan, inputs, lambda: build(*(type(self)(u, None, None, False) for u in inputs)).uop)
    if isinstance(out, PendingPlan): return type(self)(out, None, None, None if None in rgs else False)
    return type(self)._wrap(out, self, key, value)

  def mse_loss(self: Tensor, Y: Tensor, reduction: str = "mean") -> Tensor: return _reduction((self - Y).square(), reduction)  # type: ignore[misc]

