"""Jit: run a function once, capture the kernels of its second call, then replay them with new input buffers. It lives at the
tensor level (it takes and returns Tensors); the engine only records schedules into the capture (core/engine/capture.py)."""
from __future__ import annotations
import contextlib, functools, struct, sys, threading, weakref
from typing import Any, Callable, Generic, TypeVar
from core.ir.dtype import dtypes
from core.ir.ops import UOp, Ops, arg_uops
from core.helpers import JIT, prod
from core.engine import capture
from core.engine.lock import engine_lock
from core.schedule.kernelize import rebind
from core.schedule.realize_points import contiguous_buffer
from core.engine.replay import DirectReplay
from core.engine.run import buffer_of, hcq_replay_for
from core.device.registry import Device
from core.tensor.tensor import Tensor

R = TypeVar("R")

class JitCapture(capture.Capture):
  """What a Jit records during its capturing call: the schedule items (the engine adds them), and the random-number
  counters it must refill before each replay."""
  def __init__(self) -> None:
    super().__init__()
    self.rng_start = Tensor._rng_counter
    self.rng_base: dict[str, Any] = {}   # device -> uint32 Tensor (a buffer) holding the counter at the start of a call
  def rng_key(self, device: str, counter: int) -> Any:
    """The random key of the draw numbered `counter`, as a graph value: base buffer + offset within the call."""
    if device not in self.rng_base:
      with capture.capturing(None):   # the buffer itself is set up outside the capture
        self.rng_base[device] = Tensor([self.rng_start & 0xFFFFFFFF], dtype=dtypes.uint32, device=device).contiguous().realize()
    return self.rng_base[device].reshape(()) + (counter - self.rng_start)

class JitError(RuntimeError): pass

_ndarray: Any = None   # numpy.ndarray once numpy is imported (a replay looks at it per argument)
def _ndarray_type() -> Any:
  """numpy.ndarray, or None when numpy was never imported (then no argument can be one)."""
  global _ndarray
  if _ndarray is None and (np := sys.modules.get("numpy")) is not None: _ndarray = np.ndarray
  return _ndarray

# the Jits with staging buffers: a staging copy keeps its device's allocator's copyin, so after a device change (Device.reset(): a
# device name means a new device object with its own allocator) their staging is dropped; the next call stages anew
_staging_jits: weakref.WeakSet[Jit] = weakref.WeakSet()
def _drop_staging() -> None:
  for jit in list(_staging_jits): jit.staging = {}
  _staging_jits.clear()
Device.on_change(_drop_staging)

def _arrays_as_tensors(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
  """numpy array arguments become Tensors on the default device (as Tensor(array) makes them): they are inputs like Tensors, not
  constants the capture would keep."""
  if (nd := _ndarray_type()) is None: return args, kwargs
  return (tuple(Tensor(a) if isinstance(a, nd) else a for a in args), {k: Tensor(v) if isinstance(v, nd) else v for k, v in kwargs.items()})

def _tensors_in(args: tuple, kwargs: dict) -> list[Any]:
  vals = list(args) + [kwargs[k] for k in sorted(kwargs)]
  return [v for v in vals if isinstance(v, Tensor)]

def _base_buffer(u: UOp) -> UOp:
  if (cb := contiguous_buffer(u)) is None: raise JitError(f"Jit input did not realize to a buffer ({u.op.name})")
  return cb[0]

def _bound_vars(args: tuple, kwargs: dict, inputs: list[Any]) -> dict[UOp, int]:
  """{variable: value} of every bound Variable passed in, directly or inside an input's shape."""
  out: dict[UOp, int] = {}
  roots = [a for a in list(args) + list(kwargs.values()) if isinstance(a, UOp)]
  for t in inputs: roots += [u for d in t.shape if isinstance(d, UOp) for u in arg_uops(d)]
  for r in roots:
    for u in r.toposort():
      if u.op is Ops.BIND: out[u.src[0]] = u.src[1].arg
  return out

class Jit(Generic[R]):
  """Decorate a function whose Tensor inputs change between calls but whose shapes and dtypes do not.
  Call 1 runs eagerly, call 2 records every kernel, later calls replay them on the new inputs' buffers.
  numpy array arguments are inputs too, each as Tensor(array) on the default device; on a replay one of the captured shape and
  dtype is copied straight into a buffer the Jit keeps for that argument (unless the function returns a view of its inputs)."""
  def __init__(self, fxn: Callable[..., R]):
    self.fxn = fxn
    self.cnt = 0
    self.items: list[Any] = []
    self.input_bufs: list[UOp] = []
    self.signature: list[tuple] = []
    self.ret: Any = None
    self.rng_base: dict[str, Any] = {}
    self.rng_draws = 0
    self.ret_uops: list[UOp] = []
    self.ret_rebuild: list[bool] = []
    self.ret_tensors: list[Any] = []   # the Tensors in what the function returned, whose uops each replay sets
    # (Tensor, its captured uop) of each returned tensor when none reads an input or a variable (ret_rebuild all False): a replay
    # without variables only sets them back; None otherwise
    self.ret_fixed: list[tuple[Any, UOp]] | None = None
    self.concrete = False   # every captured input shape is plain ints: a call with exactly those shapes takes the fast check
    self.replay: Any = None
    self.graph_hcqs: list[Any] = []   # the HCQDevices an HCQ replay runs on, told of each replay (HCQDevice.graph_replay)
    # input position -> (numpy dtype, shape, BUFFER uop, its Buffer, the copy into it): where a replay copies a numpy array
    # argument (_staged)
    self.staging: dict[int, tuple[Any, tuple, UOp, Any, Callable[[memoryview], None]]] = {}
    # one call at a time per Jit: its calls count, capture and replay into the same buffers (threads sharing a Jit take turns)
    self._lock = threading.RLock()
    functools.update_wrapper(self, fxn)  # type: ignore[arg-type]

  def reset(self) -> None:
    self.cnt, self.items, self.input_bufs, self.ret, self.replay, self.graph_hcqs = 0, [], [], None, None, []
    self.ret_tensors, self.ret_fixed, self.concrete, self.staging = [], None, False, {}

  def __get__(self, obj: Any, objtype: Any = None) -> Any: return functools.partial(self.__call__, obj)  # methods

  def __call__(self, *args: Any, **kwargs: Any) -> R:
    with self._lock:
      # the common replay (inputs of the captured concrete shapes that are buffers or numpy arrays already), checked here:
      # _call's frame and argument packing were a tenth of a small replay's Python
      if self.cnt == 2 and self.concrete and not kwargs and JIT and (new := self._fast_inputs(args)) is not None:
        with engine_lock: return self._replay(new, {})
      return self._call(args, kwargs)

  def _fast_inputs(self, args: tuple) -> list[UOp] | None:
    """The base BUFFER uops of a replay call's inputs when every one is already a realized buffer (or a static reshape of one, as
    Tensor(ndarray) makes) or a numpy array (copied into its staging buffer) with exactly the captured concrete shape, dtype and
    device, and no Variable is passed: the common replay, bound without a realize call or a signature walk. None when the general
    path must look."""
    new: list[UOp] = []
    sig = self.signature
    # numpy.ndarray: set by the general path's _arrays_as_tensors once numpy is imported; until then that path takes every call
    if (nd := _ndarray) is None: return None
    for a in args:
      if type(a) is nd:
        if len(new) == len(sig) or (st := self._staged(len(new), a)) is None: return None
        new.append(st)
      elif isinstance(a, Tensor):
        if len(new) == len(sig): return None
        u = a.uop
        b = u.src[0] if u.op is Ops.RESHAPE and len(u.src) == 1 else u
        s, dt, dev = sig[len(new)]
        if b.op is not Ops.BUFFER or u.shape != s or (u.dtype is not dt and u.dtype != dt) or b.src[1].arg != dev: return None
        new.append(b)
      elif type(a) is UOp: return None
    return new if len(new) == len(sig) else None

  def _staged(self, i: int, a: Any) -> UOp | None:
    """Input i's staging buffer holding a copy of the numpy array `a`, when `a` has the captured shape and dtype and would land on
    the captured device; None otherwise, or when a returned tensor views an input (a buffer rewritten by the next call would then
    change an earlier call's result): the general path makes a Tensor of it."""
    if (st := self.staging.get(i)) is None:
      s, dt, dev = self.signature[i]
      # (an empty array has nothing to copy, and its memoryview no byte view: the general path takes it)
      if any(self.ret_rebuild) or dev != Device.DEFAULT or dt.fmt is None or prod(s) == 0: return None
      from core.ir.dtype import to_np
      u = UOp.new_buffer(dev, prod(s), dt)
      buf = buffer_of(u).allocate()
      buf.rewritten = True   # no zero-copy numpy view of it: the next call writes it again
      # straight to the allocator that gave the memory (Buffer.copyin's size and allocation checks hold once for all calls)
      st = self.staging[i] = (to_np(dt), s, u, buf, functools.partial(buf.allocator._copyin, buf._buf))
      _staging_jits.add(self)
    npdt, shape, u, _, copy = st
    if a.dtype != npdt or a.shape != shape or not (mv := a.data).c_contiguous: return None
    # a Jit-owned buffer (its lock is held): no other thread reads it, and the previous replay has finished with it
    copy(mv.cast("B"))
    return u

  def _call(self, args: tuple, kwargs: dict[str, Any]) -> R:
    args, kwargs = _arrays_as_tensors(args, kwargs)
    inputs = _tensors_in(args, kwargs)
    for t in inputs: t.realize()
    # the replay of a call whose inputs have exactly the captured concrete shapes and no Variable is passed: none of the symbolic
    # handling below applies, and the signature compares as plain tuples
    if self.cnt == 2 and self.concrete and JIT and len(inputs) == len(self.signature) and \
       not any(isinstance(a, UOp) for a in args) and not any(isinstance(a, UOp) for a in kwargs.values()) and \
       all(t.shape == s and t.dtype == dt and t.device == dev for t, (s, dt, dev) in zip(inputs, self.signature)):
      with engine_lock: return self._replay([_base_buffer(t.uop) for t in inputs], {})
    for t in inputs:
      # a symbolic input is read through its symbolic shape only (never through the concrete shape it came from), so
      # the captured kernels index it correctly for every value of its variables
      if any(not isinstance(d, int) for d in t.shape):
        buf = _base_buffer(t.uop)
        t.uop = buf.shrink(((0, prod(t.shape)),)).reshape(t.shape)
    var_vals = _bound_vars(args, kwargs, inputs)
    # shapes are compared with their variables unbound: a new value of a Variable is the point of a symbolic Jit
    sig = [(tuple(d if isinstance(d, int) else d.substitute({b: b.src[0] for b in d.toposort() if b.op is Ops.BIND}) for d in t.shape),
            t.dtype, t.device) for t in inputs]
    if not JIT: return self.fxn(*args, **kwargs)
    if self.cnt == 0:
      self.cnt = 1
      with capture.keeping_literals(): return self.fxn(*args, **kwargs)   # the kernels the capture will replay
    if self.cnt == 1:
      with capture.capturing(cap := JitCapture()):   # this thread's realizes only
        ret = self.fxn(*args, **kwargs)
        # everything the function returns must be computed now, inside the capture
        for t in _tensors_in((ret,) if not isinstance(ret, (tuple, list)) else tuple(ret), {}): t.realize()
      self.items, self.signature, self.ret = cap.items, sig, ret
      self.rng_base, self.rng_draws = cap.rng_base, Tensor._rng_counter - cap.rng_start
      self.input_bufs = [_base_buffer(t.uop) for t in inputs]
      # every replay writes the captured buffers again: a zero-copy numpy view of one would change under its owner
      for it in self.items:
        for b in it.bufs:
          if b not in self.input_bufs: buffer_of(b).rewritten = True
      self.ret_tensors = _tensors_in((ret,) if not isinstance(ret, (tuple, list)) else tuple(ret), {})
      self.ret_uops = [t.uop for t in self.ret_tensors]
      self.concrete = all(isinstance(d, int) for s, _, _ in sig for d in s)
      # per returned uop: whether it reads an input buffer or a variable (then each replay rebuilds it over that call's
      # inputs); the others, usually a reshape of a captured buffer, are returned as they are without a graph walk
      ins = set(self.input_bufs)
      self.ret_rebuild = [any(x in ins or x.op is Ops.BIND or x.op is Ops.DEFINE_VAR for x in u.toposort()) for u in self.ret_uops]
      self.ret_fixed = None if any(self.ret_rebuild) else list(zip(self.ret_tensors, self.ret_uops))
      self.cnt = 2
      return ret
    if sig != self.signature:
      raise JitError(f"Jit {getattr(self.fxn, '__name__', 'function')}: inputs changed from {self.signature} to {sig}; "
                     "a Jit replays fixed shapes and dtypes (make a new Jit, or call .reset())")
    with engine_lock: return self._replay([_base_buffer(t.uop) for t in inputs], var_vals)

  def _replay(self, new: list[UOp], var_vals: dict[UOp, int]) -> R:
    """Runs the captured kernels on this call's input buffers `new` (under the engine lock: the submission and buffers are shared
    state)."""
    if self.rng_draws:
      # fresh random numbers on every replay: the draws continue the global counter exactly as eager calls would
      for t in self.rng_base.values(): buffer_of(_base_buffer(t.uop)).copyin(struct.pack("<I", Tensor._rng_counter & 0xFFFFFFFF))
      Tensor._rng_counter += self.rng_draws
    # HCQ devices replay the captured submission, patched (core/hcq); the others kernel by kernel
    if self.replay is None:
      if (hr := hcq_replay_for(self.items, self.input_bufs)) is not None:
        from core.device.hcq import HCQDevice
        devs = dict.fromkeys(b.src[1].arg for it in self.items for b in it.bufs)
        # only devices that do something with the hint (the base class's graph_replay does nothing: skipped per replay)
        self.replay, self.graph_hcqs = hr, list(dict.fromkeys(h for d in devs if (h := Device[d].hcq) is not None and
                                                              getattr(h.graph_replay, "__func__", None) is not HCQDevice.graph_replay))
      else: self.replay = DirectReplay(self.items, self.input_bufs)
    bufs = list(map(buffer_of, new))
    if self.graph_hcqs:
      # each device knows the replay's work is this capture's, the same commands every time: it may run them as a device graph
      with contextlib.ExitStack() as graphs:
        for h in self.graph_hcqs: graphs.enter_context(h.graph_replay(self.replay))
        self.replay(bufs, var_vals)
    else: self.replay(bufs, var_vals)
    # the returned tensors keep the captured buffers, except where they are (views of) this call's inputs; their
    # symbolic shapes take this call's values
    if self.ret_fixed is not None and not var_vals:
      for t, u in self.ret_fixed: t.uop = u
      return self.ret
    mapping: dict[UOp, UOp] | None = None
    for t, u, rebuild in zip(self.ret_tensors, self.ret_uops, self.ret_rebuild):
      # a plain buffer (the usual return), or a view of captured buffers only, needs no graph walk
      if not rebuild and not var_vals: t.uop = u
      else:
        if mapping is None: mapping = dict(zip(self.input_bufs, new))
        t.uop = mapping.get(u, u) if u.op is Ops.BUFFER and not var_vals else rebind(u.substitute(mapping), var_vals)
    return self.ret
