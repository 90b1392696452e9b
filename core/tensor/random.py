"""Deterministic random tensors: threefry-2x32 built from uint32 graph ops, keyed by (seed, per-call counter)."""
from __future__ import annotations
import math, threading
from typing import TYPE_CHECKING, Any, ClassVar
from core.helpers import prod, argfix
from core.ir.dtype import DTypeLike, dtypes, to_dtype
from core.tensor.validate import check_shape

if TYPE_CHECKING:
  from core.tensor.tensor import Tensor

# Threefry-2x32 with 20 rounds (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11)
THREEFRY_ROTATIONS = (13, 15, 26, 6, 17, 29, 16, 24)
THREEFRY_PARITY = 0x1BD11BDA
M32 = 0xFFFFFFFF
_counter_lock = threading.Lock()

def threefry2x32(x0: Any, x1: Any, k0: int, k1: int) -> tuple[Any, Any]:
  """Encrypts counters (x0, x1) with key (k0, k1). Works on uint32 Tensors (wrapping adds) and on Python ints
  (masked to 32 bits), so the tests can check the graph version against the same function on plain ints."""
  def wrap(v: Any) -> Any: return v & M32 if isinstance(v, int) else v
  def rotl(v: Any, r: int) -> Any: return wrap(v << r) | (v >> (32 - r))
  ks = (k0 & M32, k1 & M32, THREEFRY_PARITY ^ (k0 & M32) ^ (k1 & M32))
  x0, x1 = wrap(x0 + ks[0]), wrap(x1 + ks[1])
  for group in range(5):
    for r in THREEFRY_ROTATIONS[4 * (group % 2):4 * (group % 2) + 4]:
      x0 = wrap(x0 + x1)
      x1 = rotl(x1, r) ^ x0
    x0, x1 = wrap(x0 + ks[(group + 1) % 3]), wrap(x1 + ((ks[(group + 2) % 3] + group + 1) & M32))
  return x0, x1

def _fan_shape(method: str, shape: tuple[Any, ...]) -> tuple[int, ...]:
  """The shape of a fan-scaled init: at least one dim; a fan of 0 (no elements to draw) is scaled as a fan of 1."""
  s = check_shape(method, "shape", argfix(*shape))
  if not s: raise ValueError(f"Tensor.{method}: argument 'shape' needs at least one dim (the fan comes from it), got {s}")
  return s

class RandomMixin:
  _seed: ClassVar[int] = 0
  _rng_counter: ClassVar[int] = 0

  @staticmethod
  def manual_seed(seed: int = 0) -> None:
    """Sets the seed and restarts the per-call counter: the same calls then give the same numbers on every device."""
    from core.tensor.tensor import Tensor
    Tensor._seed, Tensor._rng_counter = int(seed), 0

  @classmethod
  def _random_bits(cls, n: int, device: str | None = None) -> Tensor:
    """n uint32 random words. Each call uses a new key (seed, counter); the counter words are 0..ceil(n/2)-1, and block i gives
    words 2i and 2i+1."""
    from core.tensor.tensor import Tensor
    with _counter_lock:   # threads drawing at once each get a counter value of their own
      counter = Tensor._rng_counter
      Tensor._rng_counter = counter + 1
    key0 = Tensor._seed & M32
    from core.engine import capture
    from core.tensor.jit import JitCapture
    # the counter is read from a buffer, never baked in as a constant: every draw of one size then shares one compiled
    # kernel (threefry kernels are big), and inside a Jit the buffer is refilled before each replay
    from core.tensor.tensor import canonical_device
    if isinstance(cap := capture.current(), JitCapture): key1 = cap.rng_key(canonical_device(device), counter)
    else: key1 = Tensor([counter & M32], dtype=dtypes.uint32, device=device).reshape(())
    half = -(-n // 2)
    ctr = cls._iota(half, device).cast(dtypes.uint32)  # type: ignore[attr-defined]
    hi = (Tensor._seed >> 32) & M32  # seeds wider than 32 bits feed the second counter word
    y0, y1 = threefry2x32(ctr, ctr._const(hi), key0, key1)
    # interleaved (word 2i and 2i+1 are one block's two outputs): a kernel computes each block once for its two lanes,
    # where concatenating the halves would compute every block twice, once per half
    return y0.stack(y1, dim=-1).flatten()[:n]

  @classmethod
  def rand(cls, *shape: Any, device: str | None = None, dtype: DTypeLike | None = None, **kwargs: Any) -> Tensor:
    """Uniform in [0, 1): the top 23 random bits become the mantissa of a float in [1, 2), minus 1."""
    from core.tensor.tensor import Tensor
    s, dt = check_shape("rand", "shape", argfix(*shape)), to_dtype(dtype or dtypes.default_float)
    if not dtypes.is_float(dt): raise TypeError(f"rand needs a float dtype, got {dt}")
    if prod(s) == 0: return Tensor.full(s, 0.0, dtype=dt, device=device, **kwargs)
    bits = cls._random_bits(prod(s), device)
    f = ((bits >> 9) | 0x3F800000).bitcast(dtypes.float32) - 1.0
    ret = f.reshape(s).cast(dt)
    ret.requires_grad = kwargs.get("requires_grad")
    return ret

  @classmethod
  def randn(cls, *shape: Any, dtype: DTypeLike | None = None, **kwargs: Any) -> Tensor:
    """Standard normal by the Box-Muller transform on two uniform draws."""
    s, dt = argfix(*shape), to_dtype(dtype or dtypes.default_float)
    u = cls.rand(2, *s, dtype=dtypes.float32, device=kwargs.get("device"))
    # 1-u is in (0, 1], so the log is finite
    ret = ((1 - u[0]).log() * -2).sqrt() * (u[1] * (2 * math.pi)).cos()
    ret = ret.cast(dt)
    ret.requires_grad = kwargs.get("requires_grad")
    return ret

  @classmethod
  def randint(cls, *shape: Any, low: int = 0, high: int = 10, dtype: DTypeLike = dtypes.int32, **kwargs: Any) -> Tensor:
    """Uniform integers in [low, high)."""
    dt = to_dtype(dtype)
    if not dtypes.is_int(dt): raise TypeError(f"randint needs an int dtype, got {dt}")
    if high <= low: raise ValueError(f"randint: high ({high}) must be > low ({low})")
    r = cls.rand(*shape, dtype=dtypes.float32, device=kwargs.get("device"))
    ret = (r * (high - low)).floor().cast(dtypes.int64 if dt.itemsize == 8 else dtypes.int32).minimum(high - low - 1) + low
    return ret.cast(dt)

  @classmethod
  def uniform(cls, *shape: Any, low: float = 0.0, high: float = 1.0, dtype: DTypeLike | None = None, **kwargs: Any) -> Tensor:
    dt = to_dtype(dtype or dtypes.default_float)
    ret = (cls.rand(*shape, dtype=dtypes.float32, device=kwargs.get("device")) * (high - low) + low).cast(dt)
    ret.requires_grad = kwargs.get("requires_grad")
    return ret
  @classmethod
  def normal(cls, *shape: Any, mean: float = 0.0, std: float = 1.0, dtype: DTypeLike | None = None, **kwargs: Any) -> Tensor:
    dt = to_dtype(dtype or dtypes.default_float)
    ret = (cls.randn(*shape, dtype=dtypes.float32, device=kwargs.get("device")) * std + mean).cast(dt)
    ret.requires_grad = kwargs.get("requires_grad")
    return ret

  @classmethod
  def scaled_uniform(cls, *shape: Any, **kwargs: Any) -> Tensor:
    s = check_shape("scaled_uniform", "shape", argfix(*shape))
    return cls.uniform(*s, low=-1.0, high=1.0, **kwargs) * (max(prod(s), 1) ** -0.5)   # no elements: nothing to scale
  @classmethod
  def glorot_uniform(cls, *shape: Any, **kwargs: Any) -> Tensor:
    s = _fan_shape("glorot_uniform", shape)
    bound = math.sqrt(6 / max(s[0] + prod(s[1:]), 1))
    return cls.uniform(*s, low=-bound, high=bound, **kwargs)
  @classmethod
  def kaiming_uniform(cls, *shape: Any, a: float = 0.01, **kwargs: Any) -> Tensor:
    """He init for leaky_relu(a): bound = gain * sqrt(3 / fan_in), fan_in = prod(shape[1:])."""
    s = _fan_shape("kaiming_uniform", shape)
    bound = math.sqrt(2.0 / (1 + a * a)) * math.sqrt(3.0 / max(prod(s[1:]), 1))
    return cls.uniform(*s, low=-bound, high=bound, **kwargs)
  @classmethod
  def kaiming_normal(cls, *shape: Any, a: float = 0.01, **kwargs: Any) -> Tensor:
    s = _fan_shape("kaiming_normal", shape)
    return cls.normal(*s, std=math.sqrt(2.0 / (1 + a * a)) / math.sqrt(max(prod(s[1:]), 1)), **kwargs)

  def rand_like(self: Tensor, **kwargs: Any) -> Tensor:  # type: ignore[misc]
    return type(self).rand(*self.shape, **{"dtype": self.dtype, "device": self.device, **kwargs})
  def randn_like(self: Tensor, **kwargs: Any) -> Tensor:  # type: ignore[misc]
    return type(self).randn(*self.shape, **{"dtype": self.dtype, "device": self.device, **kwargs})

  def dropout(self: Tensor, p: float = 0.5) -> Tensor:  # type: ignore[misc]
    """Zeroes elements with probability p and scales the rest by 1/(1-p), only when Tensor.training is set."""
    if not type(self).training or p == 0: return self
    if p == 1: return self * 0
    keep = type(self).rand(*self.shape, device=self.device, dtype=dtypes.float32) >= p
    return keep.where(self, 0) * (1 / (1 - p))
