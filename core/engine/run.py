"""Execute schedule items on devices: compile-once runners, copies, DEBUG=2 kernel lines."""
from __future__ import annotations
import time, weakref
from typing import Any
from core.ir.ops import UOp, Ops
from core.device.buffer import Buffer
from core.device.counters import GlobalCounters
from core.codegen.program import get_program, ProgramSpec
from core.helpers import DEBUG, colored, prod

_buffers: weakref.WeakKeyDictionary[UOp, Buffer] = weakref.WeakKeyDictionary()

def buffer_of(u: UOp) -> Buffer:
  """The device Buffer behind a BUFFER uop (created, not yet allocated, on first ask)."""
  if u.op is not Ops.BUFFER: raise TypeError(f"buffer_of needs a BUFFER uop, got {u.op.name}")
  if (b := _buffers.get(u)) is None: b = _buffers[u] = Buffer(u.src[1].arg, u.arg, u.dtype)
  return b

def has_buffer(u: UOp) -> bool: return u in _buffers

class CompiledRunner:
  """A compiled kernel for one device: call it with Buffers."""
  def __init__(self, spec: ProgramSpec, device: Any):
    self.spec, self.device = spec, device
    st = time.perf_counter()
    self.lib = device.compiler.compile_cached(spec.src)
    self.prg = device.runtime(spec.name, self.lib)
    self.compile_s = time.perf_counter() - st
    if DEBUG >= 4: print(spec.src)
  def __call__(self, bufs: list[Buffer], var_vals: dict[UOp, int] | None = None, wait: bool = False) -> float | None:
    # kernel variables were narrowed to int32/int64 by codegen: match them by (name, min, max)
    by_arg = {v.arg: val for v, val in (var_vals or {}).items()}
    try: vals = tuple(by_arg[v.arg] for v in self.spec.vars)
    except KeyError as e: raise RuntimeError(f"kernel {self.spec.name} needs a value for variable {e.args[0][0]!r}") from None
    return self.prg(*[b._buf for b in bufs], global_size=self.spec.global_size, local_size=self.spec.local_size, vals=vals, wait=wait)

_runners: dict[tuple[UOp, str], CompiledRunner] = {}

def get_runner(ast: UOp, device_name: str) -> CompiledRunner:
  """Compile once per (kernel, device): the AST is hash-consed, so equal kernels share a runner (eager op cache)."""
  key = (ast, device_name)
  if (r := _runners.get(key)) is None:
    from core.device.registry import Device
    dev = Device[device_name]
    r = _runners[key] = CompiledRunner(get_program(ast, dev.renderer), dev)
  return r

def _ensure(b: Buffer) -> Buffer:
  if not b.is_allocated(): b.allocate()
  return b

def run_copy(dest: Buffer, src: Buffer) -> None:
  if dest.nbytes == 0: return
  if hasattr(src.allocator, "_as_buffer"): dest.copyin(src.as_buffer())
  else:
    tmp = memoryview(bytearray(src.nbytes))
    src.copyout(tmp)
    dest.copyin(tmp)

def run_item(ast: UOp, bufs: list[Buffer], var_vals: dict[UOp, int] | None = None) -> None:
  for b in bufs: _ensure(b)
  if ast.op is Ops.COPY:
    run_copy(bufs[0], bufs[1])
    if DEBUG >= 2: print(f"*** {bufs[0].device:8s} copy {bufs[0].nbytes:10d} bytes {bufs[1].device} -> {bufs[0].device}")
    return
  runner = get_runner(ast, bufs[0].device)
  if bufs[0].size == 0: return
  t = runner(bufs, var_vals, wait=DEBUG >= 2)
  GlobalCounters.kernel_count += 1
  GlobalCounters.global_ops += runner.spec.estimates.get("ops", 0)
  GlobalCounters.global_mem += runner.spec.estimates.get("mem", 0)
  if t is not None: GlobalCounters.time_sum_s += t
  if DEBUG >= 2:
    shape = [u.src[0].arg for u in runner.spec.uops if u.op in (Ops.RANGE, Ops.SPECIAL) and u.src[0].op is Ops.CONST]
    tm = t or 0.0
    gflops = runner.spec.estimates.get("ops", 0) / tm * 1e-9 if tm else 0.0
    gbs = runner.spec.estimates.get("mem", 0) / tm * 1e-9 if tm else 0.0
    print(f"*** {bufs[0].device:8s} {GlobalCounters.kernel_count:5d} {colored(runner.spec.name, 'cyan'):30s} "
          f"shape {str(shape):20s} tm {tm*1e6:9.2f}us ({gflops:8.2f} GFLOP/s {gbs:7.2f} GB/s)")

def sizes(u: UOp) -> int: return prod(u.shape or ())
