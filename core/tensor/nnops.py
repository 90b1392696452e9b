"""Neural-network functionals on Tensor: normalization and losses."""
from __future__ import annotations
from typing import TYPE_CHECKING, Callable, Sequence

if TYPE_CHECKING:
  from core.tensor.tensor import Tensor

def _reduction(x: Tensor, reduction: str) -> Tensor:
  if reduction == "none": return x
  if reduction == "sum": return x.sum()
  if reduction == "mean": return x.mean()
  raise ValueError(f"reduction must be 'none', 'sum' or 'mean', got {reduction!r}")

class NNOpsMixin:
  def sequential(self: Tensor, ll: Sequence[Callable[[Tensor], Tensor]]) -> Tensor:  # type: ignore[misc]
    x = self
    for f in ll: x = f(x)
    return x

  def layernorm(self: Tensor, axis: int | Sequence[int] = -1, eps: float = 1e-5) -> Tensor:  # type: ignore[misc]
    """(x - mean) / sqrt(var + eps) over `axis` (population variance), no affine part."""
    y = self - self.mean(axis, keepdim=True)
    return y * (y * y).mean(axis, keepdim=True).add(eps).rsqrt()
  def rms_norm(self: Tensor, axis: int = -1, eps: float = 1e-6) -> Tensor:  # type: ignore[misc]
    return self * (self * self).mean(axis, keepdim=True).add(eps).rsqrt()

  def batchnorm(self: Tensor, weight: Tensor | None, bias: Tensor | None, mean: Tensor, invstd: Tensor,  # type: ignore[misc]
                axis: int | Sequence[int] = 1) -> Tensor:
    """(x - mean) * weight * invstd + bias, with the per-channel tensors laid along `axis`."""
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    axes = tuple(a % self.ndim for a in axes)
    shape = tuple(s if i in axes else 1 for i, s in enumerate(self.shape))
    x = self - mean.reshape(shape)
    if weight is not None: x = x * weight.reshape(shape)
    ret = x * (invstd.reshape(shape) if invstd.ndim == len(axes) else invstd)
    return ret + bias.reshape(shape) if bias is not None else ret

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
    logp = self.log_softmax(-1)
    keep = (Y != ignore_index)
    onehot = (Y.unsqueeze(-1) == Tensor.arange(n, device=self.device)) & keep.unsqueeze(-1)
    nll = -(logp * onehot).sum(-1)
    smooth = -logp.mean(-1) * keep
    loss = nll * (1 - label_smoothing) + smooth * label_smoothing
    if reduction == "mean": return loss.sum() / keep.sum().maximum(1).cast(loss.dtype)
    return _reduction(loss, reduction)

  def cross_entropy(self: Tensor, Y: Tensor, reduction: str = "mean", label_smoothing: float = 0.0) -> Tensor:  # type: ignore[misc]
    """torch.nn.functional.cross_entropy: logits (N, C, ...) with class indices (N, ...) or probabilities (N, C, ...)."""
    from core.tensor.tensor import Tensor
    c = self.shape[1] if self.ndim > 1 else self.shape[0]
    cax = 1 if self.ndim > 1 else 0
    if Y.ndim < self.ndim:
      shape = [1] * Y.ndim
      shape.insert(cax, c)
      Y = (Y.unsqueeze(cax) == Tensor.arange(c, device=self.device).reshape(shape)).cast(self.dtype)
    Y = Y * (1 - label_smoothing) + label_smoothing / c
    return _reduction(-(self.log_softmax(cax) * Y).sum(cax), reduction)

  def nll_loss(self: Tensor, Y: Tensor, reduction: str = "mean", ignore_index: int | None = None) -> Tensor:  # type: ignore[misc]
    from core.tensor.tensor import Tensor
    c, cax = self.shape[1] if self.ndim > 1 else self.shape[0], 1 if self.ndim > 1 else 0
    shape = [1] * Y.ndim
    shape.insert(cax, c)
    keep = Y != (-100 if ignore_index is None else ignore_index)
    onehot = (Y.unsqueeze(cax) == Tensor.arange(c, device=self.device).reshape(shape)) & keep.unsqueeze(cax)
    loss = -(self * onehot).sum(cax)
    if reduction == "mean": return loss.sum() / keep.sum().cast(loss.dtype)
    return _reduction(loss, reduction)

  def mse_loss(self: Tensor, Y: Tensor, reduction: str = "mean") -> Tensor: return _reduction((self - Y).square(), reduction)  # type: ignore[misc]

