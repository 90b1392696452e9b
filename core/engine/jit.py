"""Jit: run a function once, capture the kernels of its second call, then replay them with new input buffers."""
from __future__ import annotations
import functools
from typing import Any, Callable, Generic, TypeVar
from core.ir.ops import UOp, Ops
from core.helpers import JIT

R = TypeVar("R")

class _Capture:
  def __init__(self) -> None: self.items: list[Any] = []
  def add(self, items: list[Any]) -> None: self.items.extend(items)

capturing: _Capture | None = None

class JitError(RuntimeError): pass

def _tensors_in(args: tuple, kwargs: dict) -> list[Any]:
  from core.tensor.tensor import Tensor
  vals = list(args) + [kwargs[k] for k in sorted(kwargs)]
  return [v for v in vals if isinstance(v, Tensor)]

def _base_buffer(u: UOp) -> UOp:
  while u.op is Ops.RESHAPE: u = u.src[0]
  if u.op is not Ops.BUFFER: raise JitError(f"Jit input did not realize to a buffer ({u.op.name})")
  return u

class Jit(Generic[R]):
  """Decorate a function whose Tensor inputs change between calls but whose shapes and dtypes do not.
  Call 1 runs eagerly, call 2 records every kernel, later calls replay them on the new inputs' buffers."""
  def __init__(self, fxn: Callable[..., R]):
    self.fxn = fxn
    self.cnt = 0
    self.items: list[Any] = []
    self.input_bufs: list[UOp] = []
    self.signature: list[tuple] = []
    self.ret: Any = None
    functools.update_wrapper(self, fxn)  # type: ignore[arg-type]

  def reset(self) -> None: self.cnt, self.items, self.input_bufs, self.ret = 0, [], [], None

  def __get__(self, obj: Any, objtype: Any = None) -> Any: return functools.partial(self.__call__, obj)  # methods

  def __call__(self, *args: Any, **kwargs: Any) -> R:
    global capturing
    from core.engine.realize import realize
    from core.engine.run import buffer_of, run_item
    inputs = _tensors_in(args, kwargs)
    for t in inputs: t.realize()
    sig = [(tuple(t.shape), t.dtype, t.device) for t in inputs]
    if not JIT: return self.fxn(*args, **kwargs)
    if self.cnt == 0:
      self.cnt = 1
      return self.fxn(*args, **kwargs)
    if self.cnt == 1:
      capturing = _Capture()
      try: ret = self.fxn(*args, **kwargs)
      finally: cap, capturing = capturing, None
      # everything the function returns must be computed now, inside the capture
      capturing = cap
      try:
        for t in _tensors_in((ret,) if not isinstance(ret, (tuple, list)) else tuple(ret), {}): t.realize()
      finally: capturing = None
      self.items, self.signature, self.ret = cap.items, sig, ret
      self.input_bufs = [_base_buffer(t.uop) for t in inputs]
      self.cnt = 2
      return ret
    if sig != self.signature:
      raise JitError(f"Jit {getattr(self.fxn, '__name__', 'function')}: inputs changed from {self.signature} to {sig}; "
                     "a Jit replays fixed shapes and dtypes (make a new Jit, or call .reset())")
    mapping = {old: _base_buffer(t.uop) for old, t in zip(self.input_bufs, inputs)}
    for it in self.items: run_item(it.ast, [buffer_of(mapping.get(b, b)) for b in it.bufs])
    _ = realize
    return self.ret
