"""Property-based fuzzing of the public Tensor API (hypothesis): random methods on random tensors with random arguments,
valid and invalid. A call may succeed or raise one of the errors the API promises for bad input (TypeError, ValueError,
IndexError, RuntimeError, NotImplementedError, core's OutOfMemory) with a message; any other exception (AttributeError,
ZeroDivisionError, KeyError, AssertionError, RecursionError, ...) is an internal error and fails the test, as does a
call that hangs. Valid calls of methods with a numpy equivalent are compared with numpy. Derandomized, so CI is
reproducible; max_examples keeps the file under a minute on two cores."""
from __future__ import annotations
import math, signal, warnings
from typing import Any, Callable
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from core import Tensor, dtypes
from core.device.allocator import OutOfMemory

# methods the fuzzers leave out: they reach outside the tensor (network, raw pointers, files, global state) or are
# classes/context managers rather than operations
SKIP = {"from_url", "from_blob", "from_dlpack", "fs_store", "fs_load", "manual_seed", "train", "test", "training", "no_grad", "sequential",
        "to", "to_", "cpu"}
CALL_TIMEOUT_S = 60   # a single call (with its kernels) taking this long is a hang

def public_methods() -> list[str]:
  return sorted(n for n in dir(Tensor) if not n.startswith("_") and n not in SKIP and callable(getattr(Tensor, n)))

DTYPES = [dtypes.float32, dtypes.int32, dtypes.bool, dtypes.uint8, dtypes.float16, dtypes.int64]

@st.composite
def tensors(draw: Any, max_dims: int = 3) -> Tensor:
  shape = tuple(draw(st.lists(st.integers(0, 3), max_size=max_dims)))
  dt = draw(st.sampled_from(DTYPES))
  vals = np.asarray(draw(st.lists(st.integers(-4, 4), min_size=math.prod(shape), max_size=math.prod(shape))), dtype=np.float64)
  return Tensor(vals.reshape(shape).astype(np.float32), dtype=dt)

# argument values: mostly small ints (axes, sizes, indices), plus every other kind a user might pass by mistake
scalars = st.one_of(st.integers(-4, 5), st.floats(-3, 3, allow_nan=False), st.booleans(), st.none())
# SELF stands for the tensor the method is called on (so binary ops and losses get operands of a matching shape), in its own
# dtype or as int32/bool
SELF, SELF_INT, SELF_BOOL = "<self>", "<self int>", "<self bool>"
args = st.one_of(scalars, scalars, st.sampled_from(["sum", "mean", "none", "nearest", "linear", "float32", "int32", "bogus", ""]),
                 st.lists(st.integers(-4, 4), max_size=3).map(tuple), st.lists(st.integers(-4, 4), max_size=3), tensors(),
                 st.sampled_from([SELF, SELF_INT, SELF_BOOL]), st.sampled_from([SELF, SELF_INT]),
                 st.just([[1, 2], [3]]), st.just(2.5), st.just(float("nan")), st.just(object()))

def bind_self(a: Any, x: Tensor) -> Any:
  if isinstance(a, str) and a in (SELF, SELF_INT, SELF_BOOL): return {SELF: x, SELF_INT: x.cast(dtypes.int32), SELF_BOOL: x.cast(dtypes.bool)}[a]
  return a

ALLOWED = (TypeError, ValueError, IndexError, RuntimeError, NotImplementedError, OutOfMemory)

class Hang(Exception):
  pass

def _alarm(signum: int, frame: Any) -> None: raise Hang(f"a call ran longer than {CALL_TIMEOUT_S} s")

def realize_all(out: Any) -> None:
  """Runs whatever the call returned (a tensor, or tuples/lists of them): most internal errors show up in kernels."""
  if isinstance(out, Tensor): out.realize()
  elif isinstance(out, (tuple, list)):
    for o in out: realize_all(o)

def call_checked(fn: Callable[[], Any], what: str) -> tuple[bool, Any]:
  """(True, result) or (False, the allowed error); anything else fails the test with the call that caused it."""
  old = signal.signal(signal.SIGALRM, _alarm)
  signal.alarm(CALL_TIMEOUT_S)
  try:
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      out = fn()
      realize_all(out)
    return True, out
  except RecursionError as e: pytest.fail(f"internal error in {what}: RecursionError: {e}")
  except ALLOWED as e:
    if not str(e).strip(): pytest.fail(f"{what} raised {type(e).__name__} without a message")
    return False, e
  except Hang as e: pytest.fail(f"{what}: {e}")
  except Exception as e: pytest.fail(f"internal error in {what}: {type(e).__name__}: {e}")
  finally:
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)

FUZZ = settings(max_examples=250, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])

@settings(FUZZ, max_examples=600)   # the broad searches take most of the budget
@given(name=st.sampled_from(public_methods()), x=tensors(), a=st.lists(args, max_size=3), kw=st.dictionaries(
  st.sampled_from(["axis", "dim", "keepdim", "dtype", "reduction", "padding", "stride", "value"]), scalars, max_size=1))
def test_random_calls_raise_only_documented_errors(name: str, x: Tensor, a: list[Any], kw: dict[str, Any]) -> None:
  attr = getattr(Tensor, name)
  fn = attr if isinstance(attr, type) or not callable(getattr(x, name, None)) else getattr(x, name)
  a = [bind_self(v, x) for v in a]
  call_checked(lambda: fn(*a, **kw), f"Tensor.{name}(*{a!r}, **{kw!r}) on shape {x.shape} {x.dtype}")

# *** valid calls against numpy ***

def _np_float(x: np.ndarray) -> np.ndarray: return x.astype(np.float32)
UNARY = {  # name -> (numpy function, allowed dtypes)
  "neg": (np.negative, (dtypes.float32, dtypes.int32)), "abs": (np.abs, (dtypes.float32, dtypes.int32)),
  "exp": (lambda v: np.exp(_np_float(v)), (dtypes.float32,)), "sqrt": (lambda v: np.sqrt(np.abs(_np_float(v))), (dtypes.float32,)),
  "relu": (lambda v: np.maximum(v, 0), (dtypes.float32, dtypes.int32)), "sign": (np.sign, (dtypes.float32, dtypes.int32)),
  "floor": (np.floor, (dtypes.float32,)), "ceil": (np.ceil, (dtypes.float32,)), "square": (np.square, (dtypes.float32, dtypes.int32)),
  "sigmoid": (lambda v: 1 / (1 + np.exp(-_np_float(v))), (dtypes.float32,)), "tanh": (lambda v: np.tanh(_np_float(v)), (dtypes.float32,)),
}
REDUCE = {"sum": np.sum, "max": np.max, "min": np.min, "prod": np.prod, "mean": np.mean}

@FUZZ
@given(name=st.sampled_from(sorted(UNARY)), x=tensors(), data=st.data())
def test_unary_ops_match_numpy(name: str, x: Tensor, data: Any) -> None:
  ref, allowed = UNARY[name]
  x = x.cast(data.draw(st.sampled_from(allowed)))
  if name == "sqrt": x = x.abs()
  ok, out = call_checked(lambda: getattr(x, name)(), f"Tensor.{name}() on {x.shape} {x.dtype}")
  assert ok, f"Tensor.{name}() on a valid {x.shape} {x.dtype} tensor raised {out!r}"
  with np.errstate(over="ignore"): want = ref(x.numpy())   # exp of a large uint8 value is inf on both sides
  np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-6)

@FUZZ
@given(name=st.sampled_from(sorted(REDUCE)), x=tensors(), data=st.data(), keepdim=st.booleans())
def test_reductions_match_numpy(name: str, x: Tensor, data: Any, keepdim: bool) -> None:
  x = x.cast(data.draw(st.sampled_from((dtypes.float32, dtypes.int32))))
  axis = data.draw(st.one_of(st.none(), st.integers(-x.ndim, x.ndim - 1))) if x.ndim else None
  xn = x.numpy()
  # numpy refuses max/min over no elements; we give the identity (-inf/+inf, int32's min/max), which numpy gives with initial=
  empty = name in ("max", "min") and (xn.size == 0 if axis is None else xn.shape[axis] == 0)
  lo, hi = (-np.inf, np.inf) if xn.dtype == np.float32 else (np.iinfo(xn.dtype).min, np.iinfo(xn.dtype).max)
  ok, out = call_checked(lambda: getattr(x, name)(axis, keepdim=keepdim), f"Tensor.{name}({axis}, keepdim={keepdim}) on {x.shape} {x.dtype}")
  assert ok, f"Tensor.{name}({axis}) on a valid tensor raised {out!r}"
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    # an int32 sum/prod wraps in int32 (numpy's would widen to int64)
    kw = {"initial": lo if name == "max" else hi} if empty else {"dtype": np.int32} if name in ("sum", "prod") and xn.dtype == np.int32 else {}
    want = REDUCE[name](xn, axis=axis, keepdims=keepdim, **kw)
  np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-6)

@FUZZ
@given(x=tensors(), data=st.data())
def test_movement_ops_match_numpy(x: Tensor, data: Any) -> None:
  xn = x.numpy()
  # only the ops that take a tensor of x's rank: flip and indexing need an axis, transpose two
  ops = ["reshape", "permute", "flatten", "unsqueeze"] + (["flip", "getitem"] if x.ndim else []) + (["transpose"] if x.ndim >= 2 else [])
  op = data.draw(st.sampled_from(ops))
  if op == "reshape": got, want = x.reshape(-1), xn.reshape(-1)
  elif op == "permute":
    order = data.draw(st.permutations(list(range(x.ndim))))
    got, want = x.permute(order), xn.transpose(order)
  elif op == "flip":
    ax = data.draw(st.integers(-x.ndim, x.ndim - 1))
    got, want = x.flip(ax), np.flip(xn, ax)
  elif op == "transpose": got, want = x.transpose(0, -1), np.swapaxes(xn, 0, -1)
  elif op == "flatten": got, want = x.flatten(), xn.reshape(-1)
  elif op == "unsqueeze":
    ax = data.draw(st.integers(-x.ndim - 1, x.ndim))
    got, want = x.unsqueeze(ax), np.expand_dims(xn, ax)
  else:
    idx = tuple(data.draw(st.one_of(st.integers(-n, n - 1), st.slices(n))) if n else slice(None) for n in x.shape)
    got, want = x[idx], xn[idx]
  assert got.shape == want.shape
  np.testing.assert_array_equal(got.numpy(), want)

# *** arguments guided by each method's signature: mostly plausible values, so the calls get past the first check ***

AXIS_NAMES = {"dim", "axis", "dim0", "dim1", "dim2", "start_dim", "end_dim", "source", "destination", "dims"}
SHAPE_NAMES = {"shape", "sizes", "repeats", "kernel_size", "stride", "dilation", "padding", "size", "output_size", "output_padding"}
WORDS = ["sum", "mean", "none", "prod", "amax", "add", "multiply", "constant", "reflect", "replicate", "circular", "nearest", "linear",
         "tanh", "ij", "xy", "trunc", "floor", "ij,jk->ik", "i->", "float32", "int32", "bogus"]

def guided_value(data: Any, name: str, annotation: Any, x: Tensor) -> Any:
  ann = str(annotation)
  if name in AXIS_NAMES: return data.draw(st.one_of(st.integers(-x.ndim - 1, x.ndim), st.none(), st.lists(st.integers(-x.ndim, x.ndim), max_size=2)))
  if name in SHAPE_NAMES: return data.draw(st.one_of(st.integers(-1, 4), st.lists(st.integers(-1, 4), max_size=3).map(tuple)))
  if "Tensor" in ann: return data.draw(st.sampled_from([x, x.cast(dtypes.int32), x.cast(dtypes.bool), x.float(), x.sum(), x.flatten()]))
  if "bool" in ann: return data.draw(st.booleans())
  if "DType" in ann: return data.draw(st.sampled_from(DTYPES + ["float32", "int8", "nope"]))
  if "str" in ann: return data.draw(st.sampled_from(WORDS))
  if "float" in ann: return data.draw(st.one_of(st.floats(-3, 3, allow_nan=False), st.sampled_from([0.0, 1.0, float("inf"), float("nan")])))
  if "int" in ann: return data.draw(st.integers(-2, 5))
  return bind_self(data.draw(args), x)

@settings(FUZZ, max_examples=600)
@given(name=st.sampled_from(public_methods()), x=tensors(), data=st.data())
def test_signature_guided_calls_raise_only_documented_errors(name: str, x: Tensor, data: Any) -> None:
  import inspect
  attr = getattr(Tensor, name)
  fn = attr if isinstance(attr, type) or not callable(getattr(x, name, None)) else getattr(x, name)
  params = list(inspect.signature(fn).parameters.values())   # each of Tensor's public methods has one
  a: list[Any] = []
  kw: dict[str, Any] = {}
  for p in params:
    if p.kind is p.VAR_KEYWORD: continue
    if p.kind is p.VAR_POSITIONAL:
      a += [guided_value(data, p.name, p.annotation, x) for _ in range(data.draw(st.integers(0, 2)))]
      continue
    if p.default is not p.empty and not data.draw(st.booleans()): continue   # optional: given half of the time
    v = guided_value(data, p.name, p.annotation, x)
    if p.kind is p.KEYWORD_ONLY or (p.default is not p.empty and data.draw(st.booleans())): kw[p.name] = v
    elif not kw: a.append(v)
    else: kw[p.name] = v
  call_checked(lambda: fn(*a, **kw), f"Tensor.{name}(*{a!r}, **{kw!r}) on shape {x.shape} {x.dtype}")
