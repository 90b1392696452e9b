"""Argument checks for the public Tensor API: bad input raises TypeError/ValueError/IndexError naming the method, the
argument and what was expected, never an internal error from deep inside a graph builder.

Two layers. `install(cls)` wraps every public method whose annotations say something checkable (a Tensor, an int, a str,
a sequence, a dtype) with a type check generated from its signature, so a new method is covered by writing honest
annotations. Value rules that annotations can't say (a size must be positive, an axis in range, a scalar must fit a
dtype) are the small `check_*` helpers below, called by the methods themselves."""
from __future__ import annotations
import collections.abc, functools, inspect, numbers, types, typing
from typing import Any, Callable, Sequence
from core.ir.dtype import DType, dtypes
from core.helpers import ContextVar

# CHECK_BOUNDS=1: index tensors (gather, scatter, fancy indexing, one_hot, class labels of the losses) are checked when the
# op is built, and an out-of-range value raises IndexError naming the op and the index. Off, such values read 0 (docs)
CHECK_BOUNDS = ContextVar("CHECK_BOUNDS", 0)

def _name(v: Any) -> str: return "None" if v is None else type(v).__name__

def _what(method: str, arg: str) -> str: return f"Tensor.{method}: argument {arg!r}"

# *** value checks the methods call ***

def check_int(method: str, arg: str, v: Any, lo: int | None = None, hi: int | None = None) -> int:
  """`v` as an int (a bool or a float is a TypeError), in [lo, hi] when given (ValueError)."""
  if type(v) is not int:   # a plain int first: the ABC check of numbers.Integral costs ~0.3 us a value
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
      raise TypeError(f"{_what(method, arg)} must be an int, got {_name(v)} {v!r}")
    v = int(v)
  if (lo is not None and v < lo) or (hi is not None and v > hi):
    rng = f">= {lo}" if hi is None else f"<= {hi}" if lo is None else f"in [{lo}, {hi}]"
    raise ValueError(f"{_what(method, arg)} must be {rng}, got {v}")
  return v

def check_ints(method: str, arg: str, v: Any, lo: int | None = None, n: int | None = None) -> tuple[int, ...]:
  """An int or a sequence of ints (each >= lo), as a tuple; with `n`, exactly n values (a single one is repeated)."""
  vals = (v,) if type(v) is int or isinstance(v, numbers.Integral) and not isinstance(v, bool) else v
  if not isinstance(vals, (tuple, list)): raise TypeError(f"{_what(method, arg)} must be an int or a sequence of ints, got {_name(v)} {v!r}")
  if all([type(x) is int and (lo is None or x >= lo) for x in vals]): out = tuple(vals)   # plain ints: no per-value check
  else: out = tuple(check_int(method, f"{arg}[{i}]", x, lo) for i, x in enumerate(vals))
  if n is not None and len(out) not in (1, n): raise ValueError(f"{_what(method, arg)} must have 1 or {n} values, got {len(out)}")
  return out * n if n is not None and len(out) == 1 else out

def check_shape(method: str, arg: str, shape: Any, allow: Sequence[int | None] = ()) -> tuple[Any, ...]:
  """Every dim an int >= 0 (or one of `allow`, e.g. -1 for reshape's inferred dim), a symbolic dim (UOp), or None when
  None is in `allow`."""
  if not isinstance(shape, (tuple, list)): raise TypeError(f"{_what(method, arg)} must be a sequence of ints, got {_name(shape)} {shape!r}")
  # sizes that are plain ints >= 0 (nearly every call: a conv builds a dozen shapes) need none of the checks below
  if all([type(d) is int and d >= 0 for d in shape]): return tuple(shape)
  from core.ir.ops import UOp
  for i, d in enumerate(shape):
    if isinstance(d, UOp) or (d is None and None in allow): continue
    if isinstance(d, bool) or not isinstance(d, numbers.Integral):
      raise TypeError(f"{_what(method, arg)} must hold ints, but dim {i} is {_name(d)} {d!r}")
    if d < 0 and d not in allow: raise ValueError(f"{_what(method, arg)} must hold sizes >= 0, but dim {i} is {d}")
  return tuple(int(d) if isinstance(d, numbers.Integral) else d for d in shape)

def check_axis(method: str, arg: str, v: Any, ndim: int) -> int:
  """An axis of a tensor with `ndim` dims, as a non-negative int (a 0-d tensor takes 0 and -1)."""
  v = check_int(method, arg, v)
  n = max(ndim, 1)
  if not -n <= v < n: raise IndexError(f"{_what(method, arg)}: dim {v} is out of range for a tensor with {ndim} dims (expected [{-n}, {n - 1}])")
  return v + n if v < 0 else v

def check_tensor(method: str, arg: str, v: Any) -> Any:
  from core.tensor.tensor import Tensor
  if not isinstance(v, Tensor): raise TypeError(f"{_what(method, arg)} must be a Tensor, got {_name(v)} {v!r}"[:300])
  return v

def check_index_values(method: str, values: Sequence[int], size: int, dim: int) -> list[int]:
  """Python ints used as indices into a dim of `size`: each in [-size, size) (IndexError), negatives wrapped."""
  out = []
  for v in values:
    if not -size <= v < size: raise IndexError(f"Tensor.{method}: index {v} is out of bounds for dim {dim} with size {size}")
    out.append(v + size if v < 0 else v)
  return out

def check_index_tensor(method: str, arg: str, idx: Any, lo: int, hi: int, dim: int | None = None, ignore: int | None = None) -> None:
  """With CHECK_BOUNDS=1, IndexError when a value of the int tensor `idx` (other than `ignore`) is outside [lo, hi). The check
  is a reduction kernel on idx's device (the first offending position) whose one-number result is read back now; so it runs
  on every device and renderer, and not inside a Jit capture (whose replays would not run it)."""
  if not CHECK_BOUNDS or idx.numel() == 0: return
  from core.engine import capture
  if capture.current() is not None: return
  from core.tensor.tensor import Tensor
  bad = (idx < lo) | (idx >= hi)
  if ignore is not None: bad = bad & (idx != ignore)
  flat = bad.flatten()
  n = flat.numel()
  first = int(flat.where(Tensor.arange(n, device=idx.device), n).min().item())
  if first == n: return
  import numpy as np
  value = int(idx.flatten()[first].item())
  where = tuple(int(p) for p in np.unravel_index(first, idx.shape)) if idx.ndim else ()
  span = f"dim {dim} of size {hi}" if dim is not None else f"[{lo}, {hi})"
  raise IndexError(f"Tensor.{method}: {arg}{list(where) if where else ''} = {value} is out of range for {span} (found by CHECK_BOUNDS=1; "
                   f"without it an out-of-range index reads 0)")

def scalar_dtype(v: Any) -> DType:
  """The dtype a Python scalar gets when none is given: ints beyond default_int take int64 (then uint64), as in tinygrad's
  arange; an int no 64-bit type holds is a ValueError rather than a silently wrapped value."""
  if isinstance(v, bool) or not isinstance(v, int): return dtypes.from_py(v)
  for dt in (dtypes.default_int, dtypes.int64, dtypes.uint64):
    if dt.min <= v <= dt.max: return dt
  raise ValueError(f"the Python int {v} doesn't fit any integer dtype (int64 or uint64)")

def check_scalar_fits(method: str, arg: str, v: Any, dt: DType) -> None:
  """A Python int given for an integer (or bool) dtype must fit it: wrapping it would be a silent wrong answer."""
  if isinstance(v, bool) or not isinstance(v, int) or not (dtypes.is_int(dt)): return
  if not dt.min <= v <= dt.max:
    raise ValueError(f"{_what(method, arg)}: the Python int {v} doesn't fit {dt} (range [{dt.min}, {dt.max}]); "
                     f"use a wider dtype (dtypes.int64) or cast the tensor first")

# *** type checks generated from annotations ***

def _accepts(hint: Any, tensor_cls: type) -> tuple[type, ...] | None:
  """The types a value of annotation `hint` may have, or None when the annotation is too loose to check (Any, TypeVars)."""
  from core.ir.ops import UOp
  import numpy as np
  if hint is Any or isinstance(hint, (typing.TypeVar, str)): return None
  origin = typing.get_origin(hint)
  if origin in (typing.Union, types.UnionType):
    parts = [_accepts(h, tensor_cls) for h in typing.get_args(hint)]
    return None if any(p is None for p in parts) else tuple(t for p in parts if p is not None for t in p)
  if origin is typing.Literal: return tuple({type(a) for a in typing.get_args(hint)})
  base = origin or hint
  if base is type(None): return (type(None),)
  if base is tensor_cls: return (tensor_cls,)
  if base is bool: return (bool, int, np.bool_, np.integer)
  if base is int: return (int, np.integer, UOp)   # UOp: a symbolic size
  if base is float: return (int, float, np.number, np.bool_)
  if base is str: return (str,)
  if base is DType: return (DType,)
  if base in (tuple, list, collections.abc.Sequence): return (tuple, list)
  return None   # Callable, Mapping and anything else: left to the method

def _hints(fn: Callable, tensor_cls: type) -> dict[str, Any]:
  from core.ir.dtype import DTypeLike, ConstType
  ns = {**getattr(fn, "__globals__", {}), "Tensor": tensor_cls, "DTypeLike": DTypeLike, "ConstType": ConstType}
  try: return typing.get_type_hints(fn, globalns=ns)
  except Exception: return {}   # an annotation this Python can't evaluate: no generated check, the method's own ones stay

def _no_arguments(fn: Callable, skip_first: bool) -> bool:
  """Whether fn takes nothing past self/cls (t.numpy(), t.realize()), read from its code: nothing to check, so neither its
  annotations nor its signature are evaluated."""
  code = getattr(fn, "__code__", None)
  return code is not None and not code.co_flags & inspect.CO_VARARGS and code.co_argcount + code.co_kwonlyargcount == int(skip_first)

def _type_checked(fn: Callable, name: str, tensor_cls: type, skip_first: bool) -> Callable:
  """fn with a check of each argument whose annotation is checkable; fn itself when none is."""
  from core.ir.dtype import DTypeLike
  hints = _hints(fn, tensor_cls)
  sig = inspect.signature(fn)
  params = list(sig.parameters.values())[1 if skip_first else 0:]
  checks: list[tuple[int, str, tuple[type, ...], str]] = []   # (position or -1, name, accepted types, expected text)
  star: tuple[str, tuple[type, ...], str] | None = None
  for i, p in enumerate(params):
    h = hints.get(p.name)
    if h is None: continue
    if h == DTypeLike or h == (DTypeLike | None):
      import numpy as np
      ok: tuple[type, ...] | None = (DType, str, np.dtype, type) + ((type(None),) if h != DTypeLike else ())
      text = "a dtype (a DType or its name)"
    else:
      ok = _accepts(h, tensor_cls)
      text = str(h).replace("typing.", "").replace("core.ir.dtype.", "").replace(f"{tensor_cls.__module__}.", "").replace("NoneType", "None")
      text = text.replace("<class '", "").replace("'>", "")
    if ok is None: continue
    if p.kind is p.VAR_POSITIONAL: star = (p.name, ok, text)
    elif p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD): checks.append((i, p.name, ok, text))
    elif p.kind is p.KEYWORD_ONLY: checks.append((-1, p.name, ok, text))
  if not checks and star is None: return fn
  off = 1 if skip_first else 0
  nfixed = sum(1 for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))

  def fail(arg: str, v: Any, text: str) -> TypeError:
    return TypeError(f"{_what(name, arg)} must be {text}, got {_name(v)} {v!r}"[:300])

  @functools.wraps(fn)
  def checked(*args: Any, **kwargs: Any) -> Any:
    n = len(args) - off
    for pos, pname, ok_types, text in checks:
      if 0 <= pos < n: v = args[pos + off]
      elif pname in kwargs: v = kwargs[pname]
      else: continue
      if not isinstance(v, ok_types): raise fail(pname, v, text)
    if star is not None:
      for v in args[off + nfixed:]:
        if not isinstance(v, star[1]): raise fail(f"*{star[0]}", v, star[2])
    return fn(*args, **kwargs)
  checked.__wrapped_checks__ = checks   # type: ignore[attr-defined]
  return checked

def _on_first_call(owner: type, name: str, fn: Callable, kind: type | None, cls: type) -> Callable:
  """A stand-in for method `name` that builds its checked version when first called and puts that in its place: evaluating
  every annotation at import would cost `import core.tensor` about half a second."""
  @functools.wraps(fn)
  def first_call(*args: Any, **kwargs: Any) -> Any:
    checked = _type_checked(fn, name, cls, kind is not staticmethod)
    setattr(owner, name, kind(checked) if kind is not None else checked)
    return checked(*args, **kwargs)
  return first_call

_F = typing.TypeVar("_F", bound=Callable[..., Any])

def checks_own_arguments(fn: _F) -> _F:
  """Marks a method that checks its arguments itself, with the generated check's message: install leaves it unwrapped (the
  wrapper's call is a few percent of a tiny eager op's `.realize()`)."""
  fn.__checks_own_arguments__ = True   # type: ignore[attr-defined]
  return fn

def install(cls: type, names: Sequence[str] | None = None) -> None:
  """Wraps the public methods of `cls` (and of its mixins) with the argument type checks their annotations allow, each built
  on the method's first call. Methods, classmethods and staticmethods are wrapped; properties and classes are left alone."""
  for name in names if names is not None else [n for n in dir(cls) if not n.startswith("_")]:
    owner = next((c for c in cls.__mro__ if name in c.__dict__), None)
    if owner is None: continue
    raw = owner.__dict__[name]
    kind = type(raw) if isinstance(raw, (classmethod, staticmethod)) else None
    fn = raw.__func__ if kind is not None else raw
    if kind is None and not inspect.isfunction(raw) or _no_arguments(fn, kind is not staticmethod) or \
       getattr(fn, "__checks_own_arguments__", False): continue
    stub = _on_first_call(owner, name, fn, kind, cls)
    setattr(owner, name, kind(stub) if kind is not None else stub)
