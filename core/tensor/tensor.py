"""The user-facing lazy Tensor: construction, dtype/device plumbing, realization, host transfer and autograd entry points."""
from __future__ import annotations
import builtins, contextlib, functools, struct, sys, threading, weakref
from typing import TYPE_CHECKING, Any, ClassVar
from core.helpers import TRAINING, prod
from core.ir.dtype import DType, DTypeLike, ConstType, dtypes, to_dtype, from_np, to_np, least_upper_dtype
from core.ir.ops import UOp, Ops
from core.tensor.creation import CreationMixin, ndarray_uop
from core.tensor.random import RandomMixin
from core.tensor.movement import MovementMixin
from core.tensor.indexing import IndexingMixin
from core.tensor.elementwise import ElementwiseMixin, PendingOp, PendingUop
from core.tensor.plans import PendingPlan, forget
from core.tensor.reduce import ReduceMixin
from core.tensor.conv import ConvMixin
from core.tensor.nnops import NNOpsMixin
from core.tensor.sort import SortMixin
from core.tensor.interop import InteropMixin, to_numpy
from core.tensor.fs import StoreMixin
from core.tensor.gradient import with_gradient
from core.tensor.validate import scalar_dtype, check_scalar_fits, checks_own_arguments, check_tensor
from core.tensor.disk import on_disk as _on_disk
from core.engine import realize_module

_all_lock = threading.Lock()   # Tensor._all is added to and read from any thread

def canonical_device(device: str | None) -> str:
  Device = _device_registry()
  return Device.DEFAULT if device is None else Device.canonicalize(device)

def _host_bytes(data: Any, dtype: DType | None) -> tuple[memoryview, DType, tuple[int, ...], DType | None]:
  """(row-major bytes, storage dtype, shape, dtype to cast to afterwards) for a list/tuple or numpy array: a view of the
  array itself when it is already contiguous in the storage dtype (the device buffer is the only copy)."""
  import numpy as np
  # a byte-swapped (big-endian) array is held in native order: ascontiguousarray below swaps it
  if isinstance(data, np.ndarray): arr, src = data, from_np(data.dtype if data.dtype.isnative else data.dtype.newbyteorder("="))
  else:
    src = dtypes.from_py(data) if dtype is None else dtype
    try: arr = np.array(data, dtype=to_np(src) if src.fmt is not None else np.float32)
    except OverflowError as e:
      # ints beyond the dtype: promoted (int64, uint64) as a scalar would be when no dtype was asked for, else an error
      if dtype is not None: raise ValueError(f"Tensor(list): a value doesn't fit {dtype} ({e})") from None
      arr = np.array(data)
      if arr.dtype.kind not in "iu": raise ValueError("Tensor(list): a Python int doesn't fit any integer dtype (int64 or uint64)") from None
      src = from_np(arr.dtype)
    except ValueError as e: raise ValueError(f"Tensor(list): the nested lists are ragged, can't make a rectangular tensor ({e})") from None
    if src.fmt is None: src, dtype = dtypes.float32, dtype
  want = src if dtype is None else dtype
  # bf16/fp8 have no numpy type: store as float32 and cast in the graph
  def raw(a: Any) -> memoryview: return memoryview(a.reshape(-1).view(np.uint8)) if a.size else memoryview(b"")
  try:
    if want.fmt is None: return raw(np.ascontiguousarray(arr, dtype=np.float32)), dtypes.float32, arr.shape, want
    return raw(np.ascontiguousarray(arr, dtype=to_np(want))), want, arr.shape, None
  except MemoryError as e:   # numpy's own: a broadcast or strided input whose contiguous copy doesn't fit in host memory
    from core.device.allocator import OutOfMemory
    from core.helpers import fmt_bytes
    n = prod(arr.shape) * (4 if want.fmt is None else want.itemsize)
    raise OutOfMemory(f"host: out of memory making the contiguous {fmt_bytes(n)} ({n} bytes) copy of a {arr.shape} input for Tensor(): {e}") from e

class _TensorType(type):
  """Tensor's metaclass: `Tensor.training` reads and sets the TRAINING setting, so `Tensor.train()`, `Tensor.training = True`
  and `Context(TRAINING=1)` are one switch."""
  @property
  def training(cls) -> bool: return bool(TRAINING.value)
  @training.setter
  def training(cls, mode: bool) -> None: TRAINING.value = int(bool(mode))

class Tensor(CreationMixin, RandomMixin, MovementMixin, IndexingMixin, ElementwiseMixin, ReduceMixin, ConvMixin, NNOpsMixin, SortMixin,
             InteropMixin, StoreMixin, metaclass=_TensorType):
  """A lazily evaluated n-dimensional array. Operations build a UOp graph; `realize()`/`numpy()` run it on `device`."""
  no_grad: ClassVar[bool] = False
  # the live tensors that (ever) had requires_grad set true or were assigned to
  _all: ClassVar[weakref.WeakSet[Tensor]] = weakref.WeakSet()
  # every tensor made with requires_grad None ("may need a gradient"), for backward(): weak references in a plain list
  # (a cheap append per op), the dead ones dropped whenever the list has doubled since the last sweep
  _maybe: ClassVar[list[weakref.ref[Tensor]]] = []
  _maybe_sweep_at: ClassVar[int] = 4096
  __hash__ = object.__hash__  # __eq__ builds a comparison, so keep identity hashing

  def __init__(self, data: Any, device: str | None = None, dtype: DTypeLike | None = None, requires_grad: bool | None = None):
    self.grad: Tensor | None = None
    self._requires_grad: bool | None
    if requires_grad: self.requires_grad = requires_grad
    else:
      self._requires_grad = requires_grad   # the setter's work is for true only
      if requires_grad is None:
        maybe = Tensor._maybe
        maybe.append(weakref.ref(self))
        if len(maybe) > Tensor._maybe_sweep_at: Tensor._sweep_maybe()
    if type(data) is UOp and device is None and dtype is None:   # every op's result (_wrap): nothing to convert
      self.uop: UOp = data
      return
    if type(data) is PendingOp or type(data) is PendingPlan:   # an eager x + 1's or x.sum()'s result: its node is built only if
      self._pending: PendingOp | PendingPlan | None = data     # something asks for it (PendingUop)
      return
    # a numpy array (a Jit's input every call) before the checks for other kinds of data
    if dtype is None and (npmod := sys.modules.get("numpy")) is not None and type(data) is npmod.ndarray and \
       (fast := ndarray_uop(data, canonical_device(device))) is not None:
      self.uop = fast
      return
    dt = None if dtype is None else to_dtype(dtype)
    if isinstance(data, UOp):
      dev = canonical_device(device) if device is not None else None
      uop = data if dev is None or data.device == dev else data.copy_to_device(dev)
      uop = uop if dt is None else uop.cast(dt)
    elif isinstance(data, Tensor): uop = (data.to(device) if device is not None else data).cast(dt or data.dtype).uop
    else:
      dev = canonical_device(device)
      if data is None: data = []
      if isinstance(data, (bool, int, float)):
        if dt is not None: check_scalar_fits("__init__", "data", data, dt)
        uop = UOp.const(dt or scalar_dtype(data), data, dev, ())
      elif isinstance(data, (bytes, bytearray, memoryview)):
        from core.engine.realize import from_host
        uop = from_host(bytes(data), dtypes.uint8, dev, (len(data),))
        if dt is not None and dt is not dtypes.uint8: uop = uop.cast(dt)
      else:
        if not isinstance(data, (list, tuple)) and type(data).__module__ != "numpy":
          raise TypeError(f"Tensor: can't build from {type(data).__name__}; pass a scalar, list, numpy array, bytes or UOp")
        import numpy as np
        if isinstance(data, np.generic): data = np.array(data)
        if dt is None and type(data) is np.ndarray and (fast := ndarray_uop(data, dev)) is not None: uop = fast
        else:
          raw, store, shape, cast_to = _host_bytes(data, dt)
          from core.engine.realize import from_host
          uop = UOp.const(store, 0, dev, shape) if prod(shape) == 0 else from_host(raw, store, dev, tuple(shape))
          if cast_to is not None: uop = uop.cast(cast_to)
    self.uop = uop

  if not TYPE_CHECKING:   # to mypy `uop` is the UOp __init__ declares
    uop = PendingUop()

  # backward() finds its targets among the live tensors that require grad: a tensor joins `_all` when its requires_grad is
  # set true (a weak set entry for every eager intermediate would cost more than the op itself)
  @property
  def requires_grad(self) -> bool | None: return self._requires_grad
  @requires_grad.setter
  def requires_grad(self, v: bool | None) -> None:
    self._requires_grad = v
    if v: self._join_all()
  def _join_all(self) -> None:
    if "_in_all" not in self.__dict__:   # once: the weak set compares equal-hash entries with ==, which Tensor overloads
      self._in_all = True
      with _all_lock: Tensor._all.add(self)

  @staticmethod
  def _sweep_maybe() -> None:
    # only the first n entries are replaced (one atomic slice assignment): what other threads append meanwhile stays
    maybe = Tensor._maybe
    n = len(maybe)
    maybe[:n] = [r for r in maybe[:n] if r() is not None]
    Tensor._maybe_sweep_at = max(4096, 2 * len(maybe))

  @staticmethod
  def _grad_tensors() -> list[Tensor]:
    """A snapshot of the live tensors that had requires_grad set true or an assign (iterating the weak set itself fails when another
    thread adds to it meanwhile), without those another thread is still building (no uop yet)."""
    with _all_lock: ts = list(Tensor._all)
    return [t for t in ts if "uop" in t.__dict__]

  @classmethod
  def _wrap(cls, uop: UOp, *parents: Tensor) -> Tensor:
    """A result tensor: requires_grad is True if any parent's is, None if any is unset, else False."""
    # the property read without its call, and a loop, not a comprehension (its own frame): every op passes here
    rg: bool | None = None if not parents else False
    for p in parents:
      if (r := p._requires_grad) is None: rg = None
      elif r: return cls(uop, requires_grad=True)
    return cls(uop, requires_grad=rg)

  @classmethod
  def from_url(cls, url: str, gunzip: bool = False, name: str | None = None, allow_caching: bool = True, device: str | None = None,
               **kwargs: Any) -> Tensor:
    """The bytes at `url` as a 1-d uint8 tensor, downloaded once into core's cache folder (see core.fetch.fetch for kwargs)."""
    import numpy as np
    from core.fetch import fetch
    path = fetch(url, name=name, gunzip=gunzip, allow_caching=allow_caching, **kwargs)
    return cls(np.fromfile(path, dtype=np.uint8), device=device, requires_grad=False)

  # *** properties ***

  @property
  def shape(self) -> tuple[int, ...]: return s if (s := self.uop.shape) is not None else ()  # type: ignore[return-value]
  @property
  def dtype(self) -> DType: return self.uop.dtype
  @property
  def device(self) -> str: return self.uop.device  # type: ignore[return-value]
  @property
  def ndim(self) -> int: return len(self.shape)
  def numel(self) -> int: return prod(self.shape)
  def element_size(self) -> int: return self.dtype.itemsize
  def nbytes(self) -> int: return self.numel() * self.element_size()
  def is_floating_point(self) -> bool: return dtypes.is_float(self.dtype)
  def size(self, dim: int | None = None) -> int | tuple[int, ...]: return self.shape if dim is None else self.shape[dim]
  def __len__(self) -> int:
    if not self.shape: raise TypeError("len() of a 0-d tensor")
    return self.shape[0]
  def __repr__(self) -> str:
    return f"<Tensor shape={self.shape} dtype={self.dtype} device={self.device} requires_grad={self.requires_grad} op={self.uop.op.name}>"

  # *** realization and host transfer ***

  @checks_own_arguments   # the eager case without validate's wrapper
  def realize(self, *lst: Tensor) -> Tensor:
    """Computes this tensor (and `lst`) now; afterwards each one is backed by a device buffer."""
    if not lst:   # the eager case: one tensor
      realize_module().realize_uop_of(self)
      return self
    for v in lst: check_tensor("realize", "*lst", v)
    ts = [self, *lst]
    for t, u in zip(ts, realize_module().realize(*[t.uop for t in ts])): t.uop = u
    return self

  def numpy(self) -> Any:
    """The values as a numpy array: a read-only view of host memory (the CPU device), else a fresh copy (core.tensor.interop)."""
    if self.dtype.fmt is None: return self.cast(dtypes.float32).numpy()
    return to_numpy(self)
  def data(self) -> memoryview:
    return realize_module().to_host(self.uop)
  def tolist(self) -> Any: return self.numpy().tolist()
  def item(self) -> ConstType:
    if (p := self.__dict__.get("_pending")) is not None:
      # a pending op (x.sum().item()) realized in a stand-in: its node is not built, and this tensor stays lazy (its graph kept)
      (t := type(self)(p, None, None, False)).realize()
      u = t.uop
    else: u = self.uop
    if prod(s if (s := u.shape) is not None else ()) != 1:
      raise ValueError(f"item() needs a tensor with one element, this one has shape {self.shape}")
    # the element's bytes unpacked as its dtype's struct format: the value numpy's .item() gives (a Python float, int or bool),
    # without an array made over the buffer (most of a realized tensor's item())
    if (fmt := u.dtype.fmt) is not None: return struct.unpack_from(fmt, realize_module().to_host(u))[0]
    return self.numpy().reshape(()).item()
  def __bool__(self) -> bool:
    if self.numel() != 1: raise ValueError(f"the truth value of a tensor with shape {self.shape} is ambiguous; use .any() or .all()")
    return bool(self.item())
  def __float__(self) -> float: return float(self.item())
  def __int__(self) -> int: return int(self.item())
  def __index__(self) -> int:
    if dtypes.is_float(self.dtype): raise TypeError("only integer tensors can be used as an index")
    return int(self.item())

  def to(self, device: str | None) -> Tensor:
    """This tensor on `device` (the same tensor when it is there already)."""
    dev = canonical_device(device)
    if dev == self.device: return self
    ret = Tensor._wrap(self.uop.copy_to_device(dev), self)
    ret.grad = None if self.grad is None else self.grad.to(dev)
    return ret
  def to_(self, device: str | None) -> Tensor:
    dev = canonical_device(device)
    if dev != self.device:
      forget(self)   # its kept pending results would hold the old buffer
      self.uop = self.uop.copy_to_device(dev)
    return self
  def cpu(self) -> Tensor: return self.to("CPU")

  def detach(self) -> Tensor: return Tensor(UOp(Ops.DETACH, self.dtype, (self.uop,)), requires_grad=False)
  def _with_gradient(self, *pairs: tuple[Tensor, Tensor]) -> Tensor:
    """self's value, whose gradient with respect to each x of `pairs` (x, g) is the output gradient times g: a custom
    gradient for a composition whose own chain rule would meet 0 * inf (core.tensor.gradient.with_gradient)."""
    return Tensor._wrap(with_gradient(self.uop, *[(x.uop, g.uop) for x, g in pairs]), *[x for x, _ in pairs])
  def contiguous(self) -> Tensor: return Tensor._wrap(self.uop.contiguous(), self)
  def contiguous_backward(self) -> Tensor: return Tensor._wrap(UOp(Ops.CONTIGUOUS_BACKWARD, self.dtype, (self.uop,)), self)
  def clone(self) -> Tensor:
    """A copy in a buffer of its own (later assigns to either tensor don't affect the other)."""
    buf = Tensor(UOp.new_buffer(self.device, self.numel(), self.dtype).reshape(self.shape), requires_grad=False).realize()
    ret = Tensor._wrap(buf.uop.assign(self.uop), self)
    # copied now, so later assigns to the source don't show through (a clone that needs gradients stays lazy to keep
    # its link to the source in the graph)
    return ret if ret.requires_grad else ret.realize()

  def assign(self, x: Any) -> Tensor:
    """Writes `x` into this tensor's buffer (lazily, on the next realize). Shapes must match exactly after broadcasting."""
    if not isinstance(x, Tensor): x = Tensor(x, device=self.device, dtype=self.dtype)
    if x.shape != self.shape:
      try: ok = self.shape == Tensor._broadcast_shape(self.shape, x.shape)
      except ValueError: ok = False
      if not ok: raise ValueError(f"assign: can't write shape {x.shape} into shape {self.shape}")
      x = x.expand(self.shape)
    if x.device != self.device: raise ValueError(f"assign: value is on {x.device}, target is on {self.device}; move it with .to()")
    if x.dtype != self.dtype: x = x.cast(self.dtype)
    self._own_buffer()
    # a pending write is one of the live tensors Optimizer.step finds: a BatchNorm's running statistics read the forward pass,
    # which then runs once with the gradients instead of again (its buffers gone) when the next step's assign realizes them
    self._join_all()
    # a node of its own (the arg): hash-consing would make an equal assign built again later the node of one that ran, which the
    # engine takes as done (core/engine/realize.py: _assigned); the schedule cache key leaves the number out
    self.uop = self.uop.assign(x.uop, next(UOp.unique_ids))
    return self
  def _own_buffer(self) -> None:
    """Makes this tensor a view of a buffer before it is written to: a lazy value gets a fresh buffer of its own."""
    base = self.uop.base
    if base.op is Ops.BUFFER: return
    if base.op is Ops.ASSIGN: self.realize(); return
    buf = UOp.new_buffer(self.device, self.numel(), self.dtype).reshape(self.shape)
    from core.engine.realize import realize
    self.uop = realize(buf.assign(self.uop))[0]

  def replace(self, x: Tensor) -> Tensor:
    if x.shape != self.shape or x.dtype != self.dtype: raise ValueError(f"replace: {x.shape} {x.dtype} doesn't match {self.shape} {self.dtype}")
    forget(self)
    self.uop = x.uop
    return self

  # *** dtype ***

  def cast(self, dtype: DTypeLike) -> Tensor:
    dt = to_dtype(dtype)
    return self if dt is self.dtype else Tensor._wrap(self.uop.cast(dt), self)
  def bitcast(self, dtype: DTypeLike) -> Tensor:
    dt = to_dtype(dtype)
    if dt.itemsize != self.dtype.itemsize:
      raise ValueError(f"bitcast {self.dtype} -> {dt}: itemsizes differ ({self.dtype.itemsize} vs {dt.itemsize}); cast instead")
    return self if dt is self.dtype else Tensor(self.uop.bitcast(dt), requires_grad=False)
  def float(self) -> Tensor: return self.cast(dtypes.float32)
  def half(self) -> Tensor: return self.cast(dtypes.float16)
  def double(self) -> Tensor: return self.cast(dtypes.float64)
  def int(self) -> Tensor: return self.cast(dtypes.int32)
  def long(self) -> Tensor: return self.cast(dtypes.int64)
  def bool(self) -> Tensor: return self.cast(dtypes.bool)

  # *** plumbing shared by the mixins ***

  def _const(self, value: Any, dtype: DType | None = None, shape: tuple[builtins.int, ...] | None = None) -> Tensor:
    return Tensor(UOp.const(dtype or self.dtype, value, self.device, self.shape if shape is None else shape), requires_grad=False)

  @staticmethod
  def _broadcast_shape(*shapes: tuple[builtins.int, ...]) -> tuple[builtins.int, ...]:
    if len(shapes) == 2:   # a binary op's: a loop, without the general form's set (a frame of its own) per dim
      a, b = shapes
      if a == b: return tuple(a)
      if len(a) != len(b): a, b = (1,) * (len(b) - len(a)) + tuple(a), (1,) * (len(a) - len(b)) + tuple(b)
      out2 = []
      for d, e in zip(a, b):
        # `is` first: a symbolic dim is a node, equal only to itself, as in the set of the general form
        if d is e or d == 1 or d == e: out2.append(e)
        elif e == 1: out2.append(d)
        else: raise ValueError(f"shapes {' and '.join(map(str, shapes))} can't be broadcast together (dims {(d, e)})")
      return tuple(out2)
    n = max((len(s) for s in shapes), default=0)
    padded = [(1,) * (n - len(s)) + tuple(s) for s in shapes]
    out = []
    for dims in zip(*padded):
      big = {d for d in dims if d != 1}
      if len(big) > 1: raise ValueError(f"shapes {' and '.join(map(str, shapes))} can't be broadcast together (dims {dims})")
      out.append(big.pop() if big else 1)
    return tuple(out)

  def _broadcast_to(self, shape: tuple[builtins.int, ...]) -> Tensor:
    """self expanded to `shape`, which _broadcast_shape made (so no argument checks): built on UOps and wrapped once, the
    graph reshape+expand make, at a fraction of their cost (every broadcasting binary op passes here)."""
    u = self.uop
    if (ushape := u.shape or ()) == shape: return self
    if _on_disk(u): return self.reshape((1,) * (len(shape) - len(ushape)) + ushape).expand(shape)  # disk views
    if len(shape) != len(ushape): u = u.reshape((1,) * (len(shape) - len(ushape)) + ushape)
    return type(self)._wrap(u.expand(shape), self)

  def _operands(self, y: Any, reverse: builtins.bool = False, dtype: DType | None = None) -> tuple[Tensor, Tensor]:
    """Both operands of a binary op with the same dtype and shape. Python scalars are weak: they take the tensor's dtype
    unless the kinds differ (a float scalar makes an int tensor default_float; an int scalar makes a bool tensor default_int)."""
    x = self
    if isinstance(y, Tensor):
      xu, yu = x.uop, y.uop
      if yu.device != xu.device: raise ValueError(f"operands are on different devices ({x.device} and {y.device}); move one with .to()")
      # one dtype and shape (y * y, a layernorm's products): nothing to cast or broadcast
      if dtype is None and xu.dtype is yu.dtype and xu.shape == yu.shape: return (y, x) if reverse else (x, y)
      dt = dtype or least_upper_dtype(xu.dtype, yu.dtype)
    else:
      if not isinstance(y, (bool, int, float)): raise TypeError(f"can't combine a Tensor with {type(y).__name__}")
      xu = x.uop   # read once: this is the path of every eager op with a scalar
      xdt = xu.dtype
      if dtype is not None: dt = dtype
      elif isinstance(y, float) and not dtypes.is_float(xdt): dt = dtypes.default_float
      elif isinstance(y, int) and not isinstance(y, bool) and xdt is dtypes.bool: dt = dtypes.default_int
      else: dt = xdt
      # an int scalar the dtype can't hold promotes the operation (uint8 vs -1 compares in int32, int32 + 2**40 adds in
      # int64): wrapping it to the dtype would silently change the answer
      if type(y) is int and dtypes.is_int(dt) and not dt.min <= y <= dt.max: dt = least_upper_dtype(dt, scalar_dtype(y))
      xshape = x.shape
      if dt is xdt and all([type(d) is int for d in xshape]):
        # the common eager case (x + 1): the scalar built at x's shape directly, the same graph the general path makes
        y = Tensor(UOp.const(dt, y, xu.device, xshape), requires_grad=False)
        return (y, x) if reverse else (x, y)
      y = Tensor(UOp.const(dt, y, x.device, ()), requires_grad=False)
    if x.uop.dtype is not dt: x = x.cast(dt)
    if y.uop.dtype is not dt: y = y.cast(dt)
    shape = Tensor._broadcast_shape(x.shape, y.shape)
    x, y = x._broadcast_to(shape), y._broadcast_to(shape)
    return (y, x) if reverse else (x, y)

  def _alu(self, op: Ops, *srcs: Tensor) -> Tensor:
    u = self.uop.alu(op, srcs[0].uop) if len(srcs) == 1 else self.uop.alu(op, *[s.uop for s in srcs])   # binary ops: no comprehension frame
    return Tensor._wrap(u, self, *srcs)

  # *** autograd ***

  def requires_grad_(self, requires_grad: builtins.bool = True) -> Tensor:
    self.requires_grad = requires_grad
    return self

  def _gradients(self, targets: list[Tensor], gradient: Tensor | None, uops: list[UOp] | None = None) -> dict[UOp, UOp]:
    from core.tensor.gradient import compute_gradient
    if gradient is None:
      if self.numel() != 1: raise ValueError(f"gradient of a non-scalar tensor (shape {self.shape}) needs gradient=")
      gradient = Tensor(UOp.const(self.dtype, 1.0, self.device, self.shape), requires_grad=False)
    if gradient.shape != self.shape: raise ValueError(f"gradient shape {gradient.shape} doesn't match tensor shape {self.shape}")
    return compute_gradient(self.uop, gradient.uop.cast(self.dtype), [t.uop for t in targets] if uops is None else uops)

  def gradient(self, *targets: Tensor, gradient: Tensor | None = None, materialize_grads: builtins.bool = True) -> list[Tensor]:
    """d(self)/d(target) for each target (a leaf or an intermediate tensor of self's graph), as new lazy tensors. `self`
    must be a scalar unless `gradient` is given. A target no gradient reaches gets zeros, as in tinygrad (an empty sum
    doesn't read its input, a comparison has no gradient); materialize_grads=False raises instead."""
    grads = self._gradients(list(targets), gradient)
    out = []
    for t in targets:
      g = grads.get(t.uop)
      if g is None:
        if not materialize_grads:
          raise RuntimeError(f"target tensor {t!r} is not part of the graph of {self!r}; pass materialize_grads=True for zeros")
        g = t.uop.const_like(0)
      out.append(Tensor(g, requires_grad=False))
    return out

  def backward(self, gradient: Tensor | None = None) -> Tensor:
    """Accumulates d(self)/d(t) into `t.grad` for every live tensor `t` in self's graph whose requires_grad is not False:
    True ones always (zeros where no gradient reaches them), float ones left at None where a gradient reaches them."""
    nodes = self.uop.toposort()
    # other threads may be adding tensors (one still in its __init__ has no uop yet) or realizing them (a new uop) meanwhile:
    # snapshots, and each tensor's uop read once
    needed = {id(t): (t, u) for t in Tensor._grad_tensors() if t.requires_grad and (u := t.uop) in nodes}
    maybe = {id(t): (t, m) for r in Tensor._maybe[:] if (t := r()) is not None and t._requires_grad is None
             and (m := t.__dict__.get("uop")) is not None and dtypes.is_float(m.dtype) and id(t) not in needed and m in nodes}
    targets = list(needed.values()) + list(maybe.values())
    grads = self._gradients([t for t, _ in targets], gradient, [u for _, u in targets])
    if not needed and not any(u in grads for _, u in maybe.values()):
      raise RuntimeError("backward: no tensor in this graph needs a gradient (requires_grad is False or no gradient reaches it)")
    for t, u in targets:
      g = grads.get(u)
      if g is None:
        if id(t) in maybe: continue
        g = u.const_like(0)
      if g.shape != t.shape: raise RuntimeError(f"internal error: gradient shape {g.shape} for tensor of shape {t.shape}")
      gt = Tensor(g, requires_grad=False)
      t.grad = gt if t.grad is None else t.grad + gt
    return self

  class train(contextlib.ContextDecorator):
    """`with Tensor.train():` turns training mode (dropout, batchnorm statistics) on for a block; train(False) turns it off."""
    def __init__(self, mode: bool = True): self.mode = mode
    def __enter__(self) -> None: self.prev, Tensor.training = Tensor.training, self.mode
    def __exit__(self, *exc: object) -> None: Tensor.training = self.prev

  class test(train):
    def __init__(self, mode: bool = False): super().__init__(mode)

@functools.cache
def _device_registry() -> Any:
  """core.device.registry.Device, imported on first use (every Tensor made without a device asks it for the default)."""
  from core.device.registry import Device
  return Device
