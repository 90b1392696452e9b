"""Tensor constructors that need no data from the host: empty, full, zeros, ones, arange, linspace, eye and *_like."""
from __future__ import annotations
import math
from typing import TYPE_CHECKING, Any
from core.helpers import LRUCache, prod, argfix
from core.ir.dtype import DType, DTypeLike, dtypes, to_dtype, from_np
from core.ir.ops import UOp
from core.tensor.validate import scalar_dtype, check_scalar_fits
from core.engine import realize_module

if TYPE_CHECKING:
  from core.tensor.tensor import Tensor

def _shape(shape: tuple[Any, ...]) -> tuple[int, ...]:
  s = argfix(*shape)
  if not all(isinstance(d, int) and d >= 0 for d in s): raise ValueError(f"a shape needs non-negative ints, got {s}")
  return s

_iotas: LRUCache = LRUCache("iotas", 256)   # (n, device) -> _iota's UOp

_np_storage: dict[Any, DType] = {}   # numpy dtype -> the DType holding it as it is, filled on first use of each

def ndarray_uop(arr: Any, device: str) -> UOp | None:
  """Tensor(ndarray)'s usual case in few steps (a Jit's input each call): a non-empty C-contiguous array of a dtype core holds
  as it is becomes a buffer with a copy of its bytes. None where the general conversion (tensor._host_bytes) must look: strided
  views, empty arrays, dtypes core has no equivalent for."""
  if not arr.flags.c_contiguous or not arr.size: return None
  if (dt := _np_storage.get(arr.dtype)) is None:
    try: dt = _np_storage[arr.dtype] = from_np(arr.dtype)
    except TypeError: return None
  return realize_module().from_host(arr.data.cast("B"), dt, device, arr.shape)

class CreationMixin:
  @classmethod
  def empty(cls, *shape: Any, device: str | None = None, dtype: DTypeLike | None = None, **kwargs: Any) -> Tensor:
    """Uninitialized memory of `shape` (a fresh buffer of its own)."""
    from core.tensor.tensor import canonical_device
    s, dt = _shape(shape), to_dtype(dtype or dtypes.default_float)
    # cls is Tensor (or a subclass) at runtime; mypy only sees the mixin
    return cls(UOp.new_buffer(canonical_device(device), prod(s), dt).reshape(s), **kwargs)  # type: ignore[call-arg,return-value]

  @classmethod
  def full(cls, shape: tuple[int, ...] | int, fill_value: Any, device: str | None = None, dtype: DTypeLike | None = None, **kwargs: Any) -> Tensor:
    from core.tensor.tensor import canonical_device
    s = _shape((shape,) if isinstance(shape, int) else tuple(shape))
    if type(fill_value).__module__ == "numpy" and getattr(fill_value, "shape", None) == ():   # a numpy scalar keeps its dtype
      dtype, fill_value = dtype if dtype is not None else from_np(fill_value.dtype), fill_value.item()
    if not isinstance(fill_value, (bool, int, float)):
      raise TypeError(f"Tensor.full: argument 'fill_value' must be a number, got {type(fill_value).__name__} {fill_value!r}"[:300])
    dt = to_dtype(dtype) if dtype is not None else scalar_dtype(fill_value)
    check_scalar_fits("full", "fill_value", fill_value, dt)
    return cls(UOp.const(dt, fill_value, canonical_device(device), s), **kwargs)  # type: ignore[call-arg,return-value]
  @classmethod
  def zeros(cls, *shape: Any, **kwargs: Any) -> Tensor: return cls.full(_shape(shape), 0.0, **{"dtype": dtypes.default_float, **kwargs})
  @classmethod
  def ones(cls, *shape: Any, **kwargs: Any) -> Tensor: return cls.full(_shape(shape), 1.0, **{"dtype": dtypes.default_float, **kwargs})

  @classmethod
  def _iota(cls, n: int, device: str | None = None) -> Tensor:
    """int32 [0, 1, ..., n-1] from movement ops only. Small n: a running sum of ones; large n: a grid of two smaller
    iotas (i*b + j), so the work stays O(n) instead of the O(n^2) of one running sum. The graph holds no buffer and is
    the same every time, so it is built once per (n, device): building it took most of an eager causal sdpa's front end."""
    from core.tensor.tensor import canonical_device
    key = (n, canonical_device(device))
    if (u := _iotas.get(key)) is None:
      if n <= 16: t = cls.ones(n, dtype=dtypes.int32, device=key[1]).cumsum(0) - 1  # type: ignore[attr-defined]
      else:
        a = math.isqrt(n - 1) + 1
        b = -(-n // a)
        grid = cls._iota(a, key[1]).reshape(a, 1) * b + cls._iota(b, key[1]).reshape(1, b)  # type: ignore[attr-defined]
        t = grid.flatten()[:n]
      _iotas[key] = u = t.uop
    return cls(u)  # type: ignore[call-arg,return-value]

  @classmethod
  def arange(cls, start: Any, stop: Any = None, step: Any = 1, **kwargs: Any) -> Tensor:
    """[start, stop) in steps of `step`, like Python's range; float arguments give default_float."""
    if stop is None: start, stop = 0, start
    if step == 0: raise ValueError("arange: step must not be 0")
    n = max(0, math.ceil((stop - start) / step))
    last = start + (n - 1) * step if n else start
    if "dtype" in kwargs: dt = to_dtype(kwargs.pop("dtype"))
    elif any(isinstance(x, float) for x in (start, stop, step)): dt = dtypes.default_float
    # an int range beyond default_int's takes int64 (tinygrad's rule)
    else: dt = dtypes.default_int if dtypes.default_int.min <= min(start, last) and max(start, last) <= dtypes.default_int.max else dtypes.int64
    if dtypes.is_int(dt) and n and not (dt.min <= min(start, last) and max(start, last) <= dt.max):
      raise OverflowError(f"arange: values from {start} to {last} don't fit in {dt}")
    device, rg = kwargs.pop("device", None), kwargs.pop("requires_grad", None)
    if kwargs: raise TypeError(f"arange got unknown arguments {list(kwargs)}")
    if n == 0: return cls.full((0,), 0, dtype=dt, device=device, requires_grad=rg)
    idx = cls._iota(n, device)
    # floats and 64-bit ints compute in their own dtype; smaller ints in int32, then cast
    wide = dtypes.is_float(dt) or dt.itemsize > 4
    # a step of 1 and a start of 0 add no op: each one costs an eager caller as much as the cached index graph itself
    ret = idx.cast(dt) if wide else idx
    ret = ret if step == 1 else ret * step
    ret = (ret if start == 0 else ret + start).cast(dt)
    ret.requires_grad = rg
    return ret

  @classmethod
  def linspace(cls, start: float, stop: float, steps: int, **kwargs: Any) -> Tensor:
    if steps < 0: raise ValueError(f"linspace: steps must be >= 0, got {steps}")
    dt = to_dtype(kwargs.pop("dtype", dtypes.default_float))
    if dt is dtypes.bool: raise ValueError("linspace: a bool dtype has no evenly spaced values")
    if steps == 1: return cls.full((1,), start, dtype=dt, **kwargs)
    if steps == 0: return cls.full((0,), 0, dtype=dt, **kwargs)
    idx = cls._iota(steps, kwargs.get("device")).cast(dtypes.float32 if dt.itemsize <= 4 else dtypes.float64)  # type: ignore[attr-defined]
    ret = (idx * ((stop - start) / (steps - 1)) + start).cast(dt)
    ret.requires_grad = kwargs.get("requires_grad")
    return ret

  @classmethod
  def eye(cls, n: int, m: int | None = None, **kwargs: Any) -> Tensor:
    """n x m identity: a 1 followed by n zeros, tiled and cut (the diagonal comes from the period n+1)."""
    m = n if m is None else m
    if n < 0 or m < 0: raise ValueError(f"eye: sizes must be >= 0, got {n}, {m}")
    dt = to_dtype(kwargs.pop("dtype", dtypes.default_float))
    rg = kwargs.pop("requires_grad", None)
    k = max(n, m)
    if k == 0: return cls.full((n, m), 0, dtype=dt, requires_grad=rg, **kwargs)
    one = cls.ones(1, 1, dtype=dt, **kwargs).pad(((0, 0), (0, k)))  # type: ignore[attr-defined]
    ret = one.expand(k, k + 1).flatten()[:k * k].reshape(k, k)[:n, :m]
    ret.requires_grad = rg
    return ret

  def full_like(self: Tensor, fill_value: Any, **kwargs: Any) -> Tensor:  # type: ignore[misc]
    return type(self).full(self.shape, fill_value, **{"dtype": self.dtype, "device": self.device, **kwargs})
  def zeros_like(self: Tensor, **kwargs: Any) -> Tensor: return self.full_like(0, **kwargs)  # type: ignore[misc]
  def ones_like(self: Tensor, **kwargs: Any) -> Tensor: return self.full_like(1, **kwargs)  # type: ignore[misc]
  def empty_like(self: Tensor, **kwargs: Any) -> Tensor:  # type: ignore[misc]
    return type(self).empty(self.shape, **{"dtype": self.dtype, "device": self.device, **kwargs})
