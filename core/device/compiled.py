"""Compiled: one device instance = allocator + renderer + compiler + program runtime; and the Program protocol."""
from __future__ import annotations
import functools, inspect
from typing import TYPE_CHECKING, Any, Callable, Protocol, runtime_checkable

if TYPE_CHECKING:
  from core.device.hcq import HCQDevice
  from core.device.target import Target

class KernelFault(RuntimeError):
  """A kernel crashed on a device that runs it directly (a wild address, a division by zero): the message names the kernel,
  the signal and the address. The kernel's writes may be partial; the device stays usable for the next launch."""
  def __init__(self, msg: str, kernel: str, address: int | None = None):
    super().__init__(msg)
    self.kernel, self.address = kernel, address

class Program(Protocol):
  """A loaded kernel, built by `device.runtime(name, lib)`. Returns seconds taken when `wait`, else None."""
  def __call__(self, *bufs: Any, global_size: tuple[int, ...] = (1, 1, 1), local_size: tuple[int, ...] = (1, 1, 1),
               vals: tuple[int, ...] = (), wait: bool = False) -> float | None: ...

@runtime_checkable
class BindableProgram(Protocol):
  """A Program that can also fix its arguments once: `bind(*bufs)` returns a call without arguments that skips the per-call
  conversion (the HCQ submit program is called with the same host addresses on every run)."""
  def bind(self, *args: Any) -> Callable[[], Any]: ...

@runtime_checkable
class PreparableProgram(Protocol):
  """A Program that can build one launch's arguments once: `prepare(*bufs, ...)` (the arguments of __call__ without `wait`)
  returns a call without arguments that launches as __call__ would (a compiled file's replay: the same buffers on every run).
  `estimates` (the kernel's ProgramSpec.estimates, when known) let the device settle how to run it now, as for a command-queue
  launch. It is optional to implement: it came after `prepare` within PLUGIN_API 2, so core passes it only to a prepare that
  takes it (prepare_launch)."""
  def prepare(self, *bufs: Any, global_size: tuple[int, ...] = (1, 1, 1), local_size: tuple[int, ...] = (1, 1, 1),
              vals: tuple[int, ...] = (), estimates: dict[str, int] | None = None) -> Callable[[], None]: ...

def prepare_launch(prg: PreparableProgram, *bufs: Any, estimates: dict[str, int] | None = None, **launch: Any) -> Callable[[], None]:
  """prg.prepare(*bufs, **launch), with `estimates` where its prepare takes them: a runtime whose prepare predates the keyword
  (an out-of-tree plugin built for PLUGIN_API 2.0) still loads compiled files, run as without estimates. Called at load, not
  per launch; the check is made once per program class."""
  return prg.prepare(*bufs, **launch, estimates=estimates) if _takes_estimates(type(prg)) else prg.prepare(*bufs, **launch)

@functools.cache
def _takes_estimates(cls: type) -> bool:
  try: params = inspect.signature(cls.prepare).parameters.values()   # type: ignore[attr-defined]
  except (TypeError, ValueError): return True   # not introspectable (a C extension's method): assume today's contract
  return any(p.name == "estimates" or p.kind is p.VAR_KEYWORD for p in params)

class Compiled:
  """A device ready to use. `runtime(name, lib)` loads a compiled kernel as a Program; `target` is the DEV entry it came from.
  `hcq`: the device's command-queue side (core/device/hcq.py); when given, schedules run through core's HCQ pipeline."""
  def __init__(self, device: str, allocator: Any, renderer: Any, compiler: Any, runtime: Callable[[str, bytes], Program] | None,
               target: Target | None = None, hcq: HCQDevice | None = None):
    self.device, self.allocator, self.renderer, self.compiler, self.runtime, self.target = device, allocator, renderer, compiler, runtime, target
    self.hcq = hcq

  def synchronize(self) -> None:
    """Waits for all queued work on this device to finish (direct runs are synchronous: only the queues can have work left)."""
    if self.hcq is not None: self.hcq.synchronize()

  def __repr__(self) -> str:
    return f"<Compiled {self.device} renderer={type(self.renderer).__name__} compiler={type(self.compiler).__name__}>"
