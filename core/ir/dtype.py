"""Data types: scalars, vectors and pointers, the promotion lattice and C-style value truncation."""
from __future__ import annotations
import builtins, functools, math, struct
from typing import Any, ClassVar, Union
from core.helpers import fast_members, int_enum, IntEnumBody

ConstType = Union[float, int, bool]

@fast_members
@int_enum
class AddrSpace(IntEnumBody):
  """Where a pointer points: device memory, a workgroup's shared memory, or registers."""
  GLOBAL = 0
  LOCAL = 1
  REG = 2
  def __repr__(self) -> str: return f"AddrSpace.{self.name}"

class DType:
  """A scalar or vector type. Interned: equal arguments give the same object, so `==` is identity."""
  __slots__ = ("priority", "itemsize", "name", "fmt", "count", "_scalar", "__weakref__")
  _cache: ClassVar[dict[tuple, DType]] = {}
  priority: int
  itemsize: int      # bytes of the whole (vector) value
  name: str          # canonical name, e.g. "float32"
  fmt: str | None    # struct format char of the scalar, None where Python has none (bf16, fp8)
  count: int
  _scalar: DType | None

  def __new__(cls, priority: int, itemsize: int, name: str, fmt: str | None, count: int = 1, scalar: DType | None = None):
    key = (cls, priority, itemsize, name, fmt, count, scalar)
    if (ret := DType._cache.get(key)) is not None: return ret
    ret = object.__new__(cls)
    for k, v in zip(("priority", "itemsize", "name", "fmt", "count", "_scalar"), key[1:]): object.__setattr__(ret, k, v)
    DType._cache[key] = ret
    return ret
  def __setattr__(self, k: str, v: Any) -> None: raise AttributeError(f"DType is immutable (tried to set {k})")
  def __reduce__(self): return (DType, (self.priority, self.itemsize, self.name, self.fmt, self.count, self._scalar))
  def __repr__(self) -> str: return f"dtypes.{self.scalar().name}" + (f".vec({self.count})" if self.count != 1 else "")
  def __lt__(self, other: DType) -> bool: return (self.priority, self.itemsize, self.name, self.count) < (other.priority, other.itemsize, other.name, other.count)

  @property
  def base(self) -> DType: return self
  @property
  def vcount(self) -> int: return self.count
  def scalar(self) -> DType: return self._scalar if self._scalar is not None else self
  def vec(self, n: int) -> DType:
    if self.count != 1: raise ValueError(f"can't vectorize {self}: it is already a vector")
    if n == 1 or self.name == "void": return self
    if n < 1: raise ValueError(f"vector width must be >= 1, got {n}")
    return DType(self.priority, self.itemsize * n, self.name, None, n, self)
  def ptr(self, size: int = -1, addrspace: AddrSpace = AddrSpace.GLOBAL) -> PtrDType:
    return PtrDType(self.priority, self.itemsize, self.name, self.fmt, self.count, None, self, addrspace, 1, size)
  @property
  def min(self) -> ConstType: return dtype_min(self)
  @property
  def max(self) -> ConstType: return dtype_max(self)

class PtrDType(DType):
  """A pointer to `base` in an address space; `size` is the number of elements (-1 when unknown)."""
  __slots__ = ("_base", "addrspace", "v", "size")
  _base: DType
  addrspace: AddrSpace
  v: int
  size: int
  def __new__(cls, priority: int, itemsize: int, name: str, fmt: str | None, count: int, scalar: DType | None,
              base: DType, addrspace: AddrSpace = AddrSpace.GLOBAL, v: int = 1, size: int = -1):
    key = (cls, priority, itemsize, name, fmt, count, scalar, base, addrspace, v, size)
    if (ret := DType._cache.get(key)) is not None: return ret
    ret = object.__new__(cls)
    for k, val in zip(("priority", "itemsize", "name", "fmt", "count", "_scalar", "_base", "addrspace", "v", "size"), key[1:]):
      object.__setattr__(ret, k, val)
    DType._cache[key] = ret
    return ret
  def __reduce__(self): return (PtrDType, (self.priority, self.itemsize, self.name, self.fmt, self.count, self._scalar, self._base,
                                           self.addrspace, self.v, self.size))
  @property
  def base(self) -> DType: return self._base
  @property
  def vcount(self) -> int: return self.v
  def scalar(self) -> PtrDType: return self if self.v == 1 else self._base.ptr(self.size, self.addrspace)
  def vec(self, n: int) -> PtrDType:
    if self.v != 1: raise ValueError(f"can't vectorize {self}: it is already a vector of pointers")
    if n == 1: return self
    return PtrDType(self.priority, self.itemsize, self.name, self.fmt, self.count, None, self._base, self.addrspace, n, self.size)
  def ptr(self, size: int = -1, addrspace: AddrSpace = AddrSpace.GLOBAL) -> PtrDType: raise TypeError("pointer to pointer is not supported")
  @property
  def nbytes(self) -> int:
    if self.size == -1: raise ValueError(f"{self} has no known size")
    return self.size * self._base.itemsize
  def __repr__(self) -> str:
    args = [] if self.size == -1 and self.addrspace == AddrSpace.GLOBAL else [str(self.size)]
    if self.addrspace != AddrSpace.GLOBAL: args.append(repr(self.addrspace))
    return f"{self._base!r}.ptr({', '.join(args)})" + (f".vec({self.v})" if self.v != 1 else "")

def global_nbytes(dt: DType) -> int:
  """Bytes of the global buffer a pointer of type `dt` spans; 0 for a LOCAL or REG pointer, an unknown size or no pointer (the
  optimizer and the CPU plugin weigh a kernel's buffers against cache sizes with it)."""
  return dt.nbytes if isinstance(dt, PtrDType) and dt.addrspace == AddrSpace.GLOBAL and dt.size > 0 else 0

class ImageDType(PtrDType):
  """A kernel parameter holding a 2-D RGBA image of `shape` (height, width) pixels of float32 or float16 channels: the same
  bytes as a row-major buffer of height*width*4 elements, read and written a pixel (4 channels) at (x, y) at a time."""
  __slots__ = ("shape",)
  shape: tuple[int, int]
  def __new__(cls, base: DType, shape: tuple[int, int]):   # type: ignore[override]
    key = (cls, base, tuple(shape))
    if (ret := DType._cache.get(key)) is not None: return ret
    ret = object.__new__(cls)
    vals = (base.priority, base.itemsize, base.name, base.fmt, 1, None, base, AddrSpace.GLOBAL, 1, shape[0] * shape[1] * 4, tuple(shape))
    for k, val in zip(("priority", "itemsize", "name", "fmt", "count", "_scalar", "_base", "addrspace", "v", "size", "shape"), vals):
      object.__setattr__(ret, k, val)
    DType._cache[key] = ret
    return ret
  def __reduce__(self): return (ImageDType, (self._base, self.shape))
  def vec(self, n: int) -> PtrDType: raise TypeError(f"{self} is read and written a pixel at a time: it has no vector of pointers")
  def __repr__(self) -> str: return f"dtypes.image{'h' if self._base is dtypes.float16 else 'f'}({self.shape})"

class dtypes:
  """All dtypes, their aliases, and predicates over them."""
  void: ClassVar[DType] = DType(-1, 0, "void", None)
  index: ClassVar[DType] = DType(-1, 8, "index", None)   # integer index math before it gets a concrete width
  bool: ClassVar[DType] = DType(0, 1, "bool", "?")
  int8: ClassVar[DType] = DType(1, 1, "int8", "b")
  uint8: ClassVar[DType] = DType(2, 1, "uint8", "B")
  int16: ClassVar[DType] = DType(3, 2, "int16", "h")
  uint16: ClassVar[DType] = DType(4, 2, "uint16", "H")
  int32: ClassVar[DType] = DType(5, 4, "int32", "i")
  uint32: ClassVar[DType] = DType(6, 4, "uint32", "I")
  int64: ClassVar[DType] = DType(7, 8, "int64", "q")
  uint64: ClassVar[DType] = DType(8, 8, "uint64", "Q")
  fp8e4m3: ClassVar[DType] = DType(9, 1, "fp8e4m3", None)
  fp8e5m2: ClassVar[DType] = DType(10, 1, "fp8e5m2", None)
  float16: ClassVar[DType] = DType(11, 2, "float16", "e")
  bfloat16: ClassVar[DType] = DType(12, 2, "bfloat16", None)
  float32: ClassVar[DType] = DType(13, 4, "float32", "f")
  float64: ClassVar[DType] = DType(14, 8, "float64", "d")

  # aliases
  half = float16; float = float32; double = float64  # noqa: E702
  uchar = uint8; ushort = uint16; uint = uint32; ulong = uint64  # noqa: E702
  char = int8; short = int16; int = int32; long = int64  # noqa: E702

  default_float: ClassVar[DType] = float32
  default_int: ClassVar[DType] = int32

  fp8s = (fp8e4m3, fp8e5m2)
  floats = fp8s + (float16, bfloat16, float32, float64)
  uints = (uint8, uint16, uint32, uint64)
  sints = (int8, int16, int32, int64)
  ints = uints + sints
  all = floats + ints + (bool,)

  @staticmethod
  def is_float(x: DType) -> builtins.bool: return (x._scalar or x) in _FLOATS
  @staticmethod
  def is_int(x: DType) -> builtins.bool: return (x._scalar or x) in _INTS
  @staticmethod
  def is_unsigned(x: DType) -> builtins.bool: return (x._scalar or x) in _UINTS
  @staticmethod
  def is_bool(x: DType) -> builtins.bool: return x.scalar() is dtypes.bool
  @staticmethod
  def from_py(x: Any) -> DType:
    """The dtype a Python value (or nested list of them) gets by default."""
    if isinstance(x, bool): return dtypes.bool
    if isinstance(x, int): return dtypes.default_int
    if isinstance(x, float): return dtypes.default_float
    if isinstance(x, (list, tuple)): return max((dtypes.from_py(v) for v in x), default=dtypes.default_float)
    raise TypeError(f"can't infer a dtype from {type(x).__name__} {x!r}")
  @staticmethod
  def as_const(x: Any, dtype: DType) -> ConstType:
    """A Python value cast the way a C cast to `dtype` would (vector dtypes take their scalar)."""
    return truncate(dtype.scalar(), x)
  @staticmethod
  def finfo(x: DType) -> tuple[builtins.int, builtins.int]:
    """(exponent bits, mantissa bits) of a float dtype."""
    if not dtypes.is_float(x): raise TypeError(f"finfo needs a float dtype, got {x}")
    return {dtypes.float16: (5, 10), dtypes.bfloat16: (8, 7), dtypes.float32: (8, 23), dtypes.float64: (11, 52),
            dtypes.fp8e4m3: (4, 3), dtypes.fp8e5m2: (5, 2)}[x.scalar()]
  @staticmethod
  def fields() -> dict[str, DType]: return DTYPES_DICT
  @staticmethod
  def imagef(shape: tuple[builtins.int, builtins.int]) -> ImageDType:
    """A (height, width) RGBA image of float32 channels (see ImageDType)."""
    return ImageDType(dtypes.float32, shape)
  @staticmethod
  def imageh(shape: tuple[builtins.int, builtins.int]) -> ImageDType:
    """A (height, width) RGBA image of float16 channels, read and written as float."""
    return ImageDType(dtypes.float16, shape)

# sets for the predicates above, which the simplifier calls on every node; a pointer's _scalar is None, so it tests itself
_FLOATS, _UINTS = frozenset(dtypes.floats), frozenset(dtypes.uints)
_INTS = frozenset(dtypes.ints + (dtypes.index,))

DTYPES_DICT: dict[str, DType] = {d.name: d for d in dtypes.all}
ALIASES: dict[str, DType] = {k: v for k, v in vars(dtypes).items() if isinstance(v, DType) and k not in ("default_float", "default_int")}

DTypeLike = Union[str, DType]
class UnknownDTypeError(ValueError, AttributeError):
  """A dtype name that names no dtype. Also an AttributeError: tinygrad looks names up as attributes of `dtypes`, so code
  written for it catches that."""

def to_dtype(x: DTypeLike) -> DType:
  """A DType from a DType, a name ("float32", "half") or a numpy dtype."""
  if isinstance(x, DType): return x
  if isinstance(x, str):
    if (d := ALIASES.get(x.lower())) is not None: return d
    raise UnknownDTypeError(f"unknown dtype {x!r}; known: {sorted(DTYPES_DICT)}")
  return from_np(x)

# *** promotion: JAX's lattice (https://jax.readthedocs.io/en/latest/jep/9407-type-promotion.html), no weak types ***

_promo_lattice: dict[DType, tuple[DType, ...]] = {
  dtypes.bool: (dtypes.int8, dtypes.uint8), dtypes.int8: (dtypes.int16,), dtypes.int16: (dtypes.int32,), dtypes.int32: (dtypes.int64,),
  dtypes.int64: (dtypes.float16, dtypes.bfloat16), dtypes.uint8: (dtypes.int16, dtypes.uint16), dtypes.uint16: (dtypes.int32, dtypes.uint32),
  dtypes.uint32: (dtypes.int64, dtypes.uint64), dtypes.uint64: (dtypes.float16, dtypes.bfloat16),
  dtypes.fp8e4m3: (dtypes.float16, dtypes.bfloat16), dtypes.fp8e5m2: (dtypes.float16, dtypes.bfloat16),
  dtypes.float16: (dtypes.float32,), dtypes.bfloat16: (dtypes.float32,), dtypes.float32: (dtypes.float64,), dtypes.float64: (),
}

@functools.cache
def _upper_set(d: DType) -> frozenset[DType]:
  return frozenset({d}).union(*(_upper_set(p) for p in _promo_lattice[d]))

def least_upper_dtype(*ds: DType) -> DType:
  """The smallest dtype every argument promotes to."""
  if not ds: raise ValueError("least_upper_dtype needs at least one dtype")
  return _least_upper(ds)

@functools.lru_cache(maxsize=1024)
def _least_upper(ds: tuple[DType, ...]) -> DType:
  # cached: every eager binary op and sum asks, and min() over DTypes compares slowly; bounded, as vector and image dtypes are
  # many (a handful of scalar dtypes in practice)
  for d in ds:
    if d.scalar() not in _promo_lattice: raise TypeError(f"{d} takes no part in type promotion")
  return min(frozenset.intersection(*(_upper_set(d.scalar()) for d in ds)))

def least_upper_float(d: DType) -> DType: return d if dtypes.is_float(d) else least_upper_dtype(d, dtypes.default_float)

def sum_acc_dtype(d: DType) -> DType:
  """Accumulator for sums: ints widen to at least default_int, small floats accumulate in default_float."""
  return _sum_acc(d, dtypes.default_float)

@functools.cache   # dtypes are interned and few: one C call instead of three Python ones on every sum
def _sum_acc(d: DType, default_float: DType) -> DType:
  if dtypes.is_unsigned(d): return least_upper_dtype(d, dtypes.uint32)
  if dtypes.is_int(d) or d is dtypes.bool: return least_upper_dtype(d, dtypes.int32)
  return least_upper_dtype(d, default_float)

# *** bounds ***

def dtype_min(d: DType) -> ConstType:
  s = d.scalar()
  if s is dtypes.bool: return False
  if dtypes.is_unsigned(s): return 0
  if dtypes.is_int(s): return -(1 << (8 * s.itemsize - 1))
  return -math.inf

def dtype_max(d: DType) -> ConstType:
  s = d.scalar()
  if s is dtypes.bool: return True
  if dtypes.is_unsigned(s): return (1 << (8 * s.itemsize)) - 1
  if dtypes.is_int(s): return (1 << (8 * s.itemsize - 1)) - 1
  return math.inf

# *** C-style value conversion (used by constant folding and the reference interpreter) ***

def _wrap_int(bits: int, signed: bool, x: Any) -> int:
  if isinstance(x, float):
    if math.isnan(x) or math.isinf(x): return 0  # undefined in C; pick a stable answer
    x = int(x)  # truncation toward zero, like a C cast
  x = int(x) & ((1 << bits) - 1)
  return x - (1 << bits) if signed and x >> (bits - 1) else x

def _f32(x: float) -> float:
  try: return struct.unpack("<f", struct.pack("<f", x))[0]
  except OverflowError: return math.copysign(math.inf, x)

def _f16(x: float) -> float:
  try: return struct.unpack("<e", struct.pack("<e", x))[0]
  except OverflowError: return math.copysign(math.inf, x)

def float_to_bf16_bits(x: float) -> int:
  """Round-to-nearest-even float32 -> bfloat16, NaN kept quiet."""
  if math.isnan(x): return 0x7fc0
  u = struct.unpack("<I", struct.pack("<f", _f32(x)))[0]
  return ((u + 0x7fff + ((u >> 16) & 1)) >> 16) & 0xffff

def bf16_bits_to_float(b: int) -> float: return struct.unpack("<f", struct.pack("<I", (b & 0xffff) << 16))[0]

# fp8: e4m3 is the "fn" variant (no inf, one NaN 0x7f/0xff, max 448); e5m2 is IEEE-like (inf, max 57344)
_FP8 = {"fp8e4m3": (4, 3, 7, False), "fp8e5m2": (5, 2, 15, True)}

def fp8_bits_to_float(b: int, name: str) -> float:
  ebits, mbits, bias, ieee = _FP8[name]
  sign = -1.0 if b & 0x80 else 1.0
  e, m = (b >> mbits) & ((1 << ebits) - 1), b & ((1 << mbits) - 1)
  if ieee and e == (1 << ebits) - 1: return sign * math.inf if m == 0 else math.nan
  if not ieee and e == (1 << ebits) - 1 and m == (1 << mbits) - 1: return math.nan
  if e == 0: return sign * m * 2.0 ** (1 - bias - mbits)
  return sign * (1 + m / (1 << mbits)) * 2.0 ** (e - bias)

@functools.cache
def _fp8_table(name: str) -> list[tuple[float, int]]:
  vals = [(fp8_bits_to_float(b, name), b) for b in range(128)]
  return sorted((v, b) for v, b in vals if not math.isnan(v) and not math.isinf(v))

def float_to_fp8_bits(x: float, name: str) -> int:
  """Round to nearest (ties to even mantissa), saturating to the largest finite value."""
  if math.isnan(x): return 0x7f
  sign = 0x80 if math.copysign(1.0, x) < 0 else 0
  a = abs(x)
  table = _fp8_table(name)
  if math.isinf(a): return sign | (0x7c if _FP8[name][3] else table[-1][1])
  if a >= table[-1][0]: return sign | table[-1][1]
  lo, hi = 0, len(table) - 1
  while hi - lo > 1:
    mid = (lo + hi) // 2
    if table[mid][0] <= a: lo = mid
    else: hi = mid
  (vl, bl), (vh, bh) = table[lo], table[hi]
  if a - vl < vh - a: return sign | bl
  if a - vl > vh - a: return sign | bh
  return sign | (bl if bl % 2 == 0 else bh)

def truncate(d: DType, x: Any) -> ConstType:
  """`x` converted the way a C cast to the scalar dtype `d` converts it."""
  if d is dtypes.bool: return bool(x)
  if d is dtypes.index: return int(x)
  if dtypes.is_int(d): return _wrap_int(8 * d.itemsize, not dtypes.is_unsigned(d), x)
  x = float(x)
  if d is dtypes.float64: return x
  if d is dtypes.float32: return _f32(x)
  if d is dtypes.float16: return _f16(x)
  if d is dtypes.bfloat16: return bf16_bits_to_float(float_to_bf16_bits(x))
  if d in dtypes.fp8s: return fp8_bits_to_float(float_to_fp8_bits(x, d.name), d.name)
  raise TypeError(f"can't truncate to {d}")

# *** numpy ***

def to_np(d: DType) -> Any:
  """The numpy dtype for `d`; bfloat16 and fp8 have none and raise."""
  if (fmt := d.scalar().fmt) is None: raise TypeError(f"{d} has no numpy equivalent")
  return _np_dtype(fmt)

@functools.cache
def _np_dtype(fmt: str) -> Any:   # a struct format letter: a handful of them; every .numpy() of a Jit output asks
  import numpy as np
  return np.dtype(fmt)

def from_np(x: Any) -> DType:
  """The DType for a numpy dtype (or anything np.dtype accepts)."""
  import numpy as np
  nd = np.dtype(x)
  for d in dtypes.all:
    if d.fmt is not None and np.dtype(d.fmt) == nd: return d
  raise TypeError(f"numpy dtype {nd} has no core equivalent")
