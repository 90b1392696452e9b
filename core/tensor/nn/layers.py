"""Neural-network layers (Linear, convolutions, normalizations, Embedding, Dropout) with PyTorch-style initialisation."""
from __future__ import annotations
import math
from core.helpers import flatten, make_tuple, prod
from core.ir.dtype import DType, dtypes
from core.tensor.tensor import Tensor

def _fan_in_bound(fan_in: int) -> float: return 1 / math.sqrt(fan_in) if fan_in > 0 else 0.0

def filled(*shape: int, value: float, dtype: DType = dtypes.float32, device: str | None = None, requires_grad: bool | None = None) -> Tensor:
  """A constant-filled tensor with a buffer of its own.

  Tensor.zeros(n) is a CONST, and equal lazy graphs realize to one shared buffer: a BatchNorm bias and its running
  mean would then alias, and assigning one would change the other. A fresh (empty) buffer assigned the value can't alias."""
  return Tensor.empty(*shape, dtype=dtype, device=device, requires_grad=requires_grad).assign(Tensor.full(shape, value, dtype=dtype, device=device))

class Linear:
  """y = x @ weight.T + bias. weight is kaiming-uniform with a=sqrt(5) (bound 1/sqrt(in)), bias uniform in the same bound."""
  def __init__(self, in_features: int, out_features: int, bias: bool = True):
    self.weight = Tensor.kaiming_uniform(out_features, in_features, a=math.sqrt(5))
    bound = _fan_in_bound(in_features)
    self.bias: Tensor | None = Tensor.uniform(out_features, low=-bound, high=bound) if bias else None
  def __call__(self, x: Tensor) -> Tensor: return x.linear(self.weight.transpose(), self.bias)

def _same_padding(kernel_size: tuple[int, ...], dilation: int | tuple[int, ...]) -> tuple[int, ...]:
  # conv2d's flat padding list runs from the last spatial axis to the first, (left, right) per axis;
  # an even receptive field puts the extra element on the right, like PyTorch
  pads = [(d * (k - 1) // 2, d * (k - 1) - d * (k - 1) // 2) for d, k in zip(make_tuple(dilation, len(kernel_size))[::-1], kernel_size[::-1])]
  return tuple(flatten(pads))

class Conv2d:
  """A 2d (or n-d, by the length of kernel_size) convolution; weight (out, in/groups, *kernel), kaiming-uniform."""
  def __init__(self, in_channels: int, out_channels: int, kernel_size: int | tuple[int, ...], stride: int | tuple[int, ...] = 1,
               padding: int | tuple[int, ...] | str = 0, dilation: int | tuple[int, ...] = 1, groups: int = 1, bias: bool = True):
    if in_channels % groups or out_channels % groups:
      raise ValueError(f"Conv2d: in_channels={in_channels} and out_channels={out_channels} must both be divisible by groups={groups}")
    self.kernel_size = make_tuple(kernel_size, 2)
    if isinstance(padding, str):
      if padding.lower() != "same": raise ValueError(f"Conv2d: padding={padding!r} is not supported; use an int, a tuple or 'same'")
      if any(s != 1 for s in make_tuple(stride, len(self.kernel_size))): raise ValueError("Conv2d: padding='same' needs stride=1")
      padding = _same_padding(self.kernel_size, dilation)
    self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
    self.weight = Tensor.kaiming_uniform(out_channels, in_channels // groups, *self.kernel_size, a=math.sqrt(5))
    bound = _fan_in_bound(in_channels // groups * prod(self.kernel_size))
    self.bias: Tensor | None = Tensor.uniform(out_channels, low=-bound, high=bound) if bias else None
  def __call__(self, x: Tensor) -> Tensor:
    return x.conv2d(self.weight, self.bias, groups=self.groups, stride=self.stride, dilation=self.dilation, padding=self.padding)

def Conv1d(in_channels: int, out_channels: int, kernel_size: int, stride: int = 1, padding: int | str = 0, dilation: int = 1,
           groups: int = 1, bias: bool = True) -> Conv2d:
  """A 1d convolution over (N, C, L): Conv2d with a one-element kernel_size tuple."""
  return Conv2d(in_channels, out_channels, (kernel_size,), stride, padding, dilation, groups, bias)

class ConvTranspose2d(Conv2d):
  """The gradient of Conv2d with respect to its input; weight (in, out/groups, *kernel)."""
  def __init__(self, in_channels: int, out_channels: int, kernel_size: int | tuple[int, ...], stride: int | tuple[int, ...] = 1,
               padding: int | tuple[int, ...] = 0, output_padding: int | tuple[int, ...] = 0, dilation: int | tuple[int, ...] = 1,
               groups: int = 1, bias: bool = True):
    super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias=False)
    # PyTorch computes the fan-in of a transposed conv from weight.shape[1:], i.e. out_channels/groups * prod(kernel)
    self.weight = Tensor.kaiming_uniform(in_channels, out_channels // groups, *self.kernel_size, a=math.sqrt(5))
    bound = _fan_in_bound(out_channels // groups * prod(self.kernel_size))
    self.bias = Tensor.uniform(out_channels, low=-bound, high=bound) if bias else None
    self.output_padding = output_padding
  def __call__(self, x: Tensor) -> Tensor:
    return x.conv_transpose2d(self.weight, self.bias, groups=self.groups, stride=self.stride, dilation=self.dilation, padding=self.padding,
                              output_padding=self.output_padding)

def _channel_mean(x: Tensor) -> Tensor:
  """The mean over every axis but 1: over the trailing (spatial) axes first, then the batch. Each (sample, channel) row is
  contiguous in memory; one reduction over (0, 2, ...) flattens them into a long sum the Tensor layer splits in two stages
  by rows that cross samples (8x64x112x112: a scalar kernel with index divisions, 13.5 -> 2.0 ms one thread)."""
  return (x.mean(axis=tuple(range(2, x.ndim))) if x.ndim > 2 else x).mean(axis=0)

class BatchNorm:
  """Normalizes over every axis but 1 (channels); tracks running mean/var (unbiased) for eval mode."""
  def __init__(self, sz: int, eps: float = 1e-5, affine: bool = True, track_running_stats: bool = True, momentum: float = 0.1):
    self.eps, self.track_running_stats, self.momentum = eps, track_running_stats, momentum
    self.weight: Tensor | None = filled(sz, value=1.0) if affine else None
    self.bias: Tensor | None = filled(sz, value=0.0) if affine else None
    self.num_batches_tracked = filled(1, value=0, dtype=dtypes.int64, requires_grad=False)
    if track_running_stats:
      self.running_mean, self.running_var = filled(sz, value=0.0, requires_grad=False), filled(sz, value=1.0, requires_grad=False)

  def calc_stats(self, x: Tensor) -> tuple[Tensor, Tensor]:
    """(mean, biased variance) per channel: the running ones in eval mode, the batch's in training."""
    if self.track_running_stats and not Tensor.training: return self.running_mean, self.running_var
    # the mean is detached inside the variance because d(var)/d(mean) is zero; this keeps the backward graph small
    centered = x - (mean := _channel_mean(x)).detach().reshape(1, -1, *[1] * (x.ndim - 2))
    return mean, _channel_mean(centered * centered)

  def __call__(self, x: Tensor) -> Tensor:
    if x.ndim < 2: raise ValueError(f"BatchNorm needs an input of shape (N, C, ...), got {x.shape}")
    mean, var = self.calc_stats(x)
    if self.track_running_stats and Tensor.training:
      n = x.numel() // x.shape[1]
      # the running variance is the unbiased estimate (n/(n-1)), as in PyTorch
      unbiased = var.detach() * (n / max(n - 1, 1))
      self.running_mean.assign((1 - self.momentum) * self.running_mean + self.momentum * mean.detach())
      self.running_var.assign((1 - self.momentum) * self.running_var + self.momentum * unbiased)
      self.num_batches_tracked.assign(self.num_batches_tracked + 1)
    return x.batchnorm(self.weight, self.bias, mean, (var + self.eps).rsqrt())
BatchNorm1d = BatchNorm2d = BatchNorm3d = BatchNorm

class LayerNorm:
  """Normalizes over the trailing `normalized_shape` axes, then scales and shifts elementwise."""
  def __init__(self, normalized_shape: int | tuple[int, ...], eps: float = 1e-5, elementwise_affine: bool = True):
    self.normalized_shape = make_tuple(normalized_shape, 1)
    self.axis = tuple(-1 - i for i in range(len(self.normalized_shape)))
    self.eps, self.elementwise_affine = eps, elementwise_affine
    self.weight: Tensor | None = filled(*self.normalized_shape, value=1.0) if elementwise_affine else None
    self.bias: Tensor | None = filled(*self.normalized_shape, value=0.0) if elementwise_affine else None
  def __call__(self, x: Tensor) -> Tensor:
    if tuple(x.shape[-len(self.normalized_shape):]) != self.normalized_shape:
      raise ValueError(f"LayerNorm: input shape {x.shape} does not end with normalized_shape {self.normalized_shape}")
    x = x.layernorm(axis=self.axis, eps=self.eps)
    if self.weight is None or self.bias is None: return x
    return x * self.weight + self.bias

class GroupNorm:
  """Splits the channels into groups and normalizes each group over its channels and spatial axes."""
  def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True):
    if num_channels % num_groups: raise ValueError(f"GroupNorm: num_channels={num_channels} is not divisible by num_groups={num_groups}")
    self.num_groups, self.num_channels, self.eps = num_groups, num_channels, eps
    self.weight: Tensor | None = filled(num_channels, value=1.0) if affine else None
    self.bias: Tensor | None = filled(num_channels, value=0.0) if affine else None
  def __call__(self, x: Tensor) -> Tensor:
    if x.ndim < 2 or x.shape[1] != self.num_channels: raise ValueError(f"GroupNorm: expected (N, {self.num_channels}, ...), got {x.shape}")
    x = x.reshape(x.shape[0], self.num_groups, -1).layernorm(axis=-1, eps=self.eps).reshape(x.shape)
    if self.weight is None or self.bias is None: return x
    bshape = (1, -1, *[1] * (x.ndim - 2))
    return x * self.weight.reshape(bshape) + self.bias.reshape(bshape)

class RMSNorm:
  """x / sqrt(mean(x^2, last axis) + eps) * weight, computed in float32 at least."""
  def __init__(self, dim: int, eps: float = 1e-6, elementwise_affine: bool = True):
    self.eps = eps
    self.weight: Tensor | None = filled(dim, value=1.0) if elementwise_affine else None
  def _norm(self, x: Tensor) -> Tensor: return x * ((x * x).mean(axis=-1, keepdim=True) + self.eps).rsqrt()
  def __call__(self, x: Tensor) -> Tensor:
    # small floats lose too much precision in the mean of squares, so normalize in float32 and cast back
    y = self._norm(x.cast(dtypes.float32) if x.dtype in (dtypes.float16, dtypes.bfloat16) else x).cast(x.dtype)
    return y if self.weight is None else y * self.weight

class Embedding:
  """Looks rows of a (vocab_size, embed_size) table up by integer index (a one-hot matmul, so it is differentiable)."""
  def __init__(self, vocab_size: int, embed_size: int):
    self.vocab_sz, self.embed_sz = vocab_size, embed_size
    bound = math.sqrt(6 / (vocab_size + embed_size))  # glorot (xavier) uniform
    self.weight = Tensor.uniform(vocab_size, embed_size, low=-bound, high=bound)
  def __call__(self, idx: Tensor) -> Tensor:
    if not dtypes.is_int(idx.dtype): raise TypeError(f"Embedding needs integer indices, got {idx.dtype}")
    vocab = Tensor.arange(self.vocab_sz, device=self.weight.device, requires_grad=False)
    onehot = (idx.unsqueeze(-1) == vocab).cast(self.weight.dtype)
    return onehot @ self.weight

class Dropout:
  """Zeroes each element with probability p in training mode and scales the rest by 1/(1-p); identity in eval mode."""
  def __init__(self, p: float = 0.5):
    if not 0 <= p <= 1: raise ValueError(f"Dropout: p must be in [0, 1], got {p}")
    self.p = p
  def __call__(self, x: Tensor) -> Tensor: return x.dropout(self.p)
