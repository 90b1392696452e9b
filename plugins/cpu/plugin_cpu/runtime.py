"""The CPU plugin's runtime: 64-byte aligned host memory, kernels loaded from memory (memfd), and the device factory."""
from __future__ import annotations
import _ctypes, ctypes, functools, os, time
from typing import Any, Callable, NoReturn
from core.helpers import to_function_name
from core.device.allocator import BufferSpec
from core.device.host_memory import HostArrayAllocator
from core.device.compiled import Compiled, KernelFault
from core.device.target import Target

ALIGN = 64  # a cache line, and enough for any AVX-512 vector load
CPU_MAX_ARGS = 64  # as in native/pool.h
# A launch of several blocks whose whole work takes less than this many microseconds on one thread runs its blocks on the calling
# thread: handing blocks to the pool (waking its threads, waiting for the last) costs microseconds, more on a busy machine, and
# can only save part of a kernel this short. Each program times its first SERIAL_PROBES launches per global size on one thread
# and keeps the faster way; results are the same either way (blocks are independent). $CPU_SERIAL_US: 0 never runs them serially.
SERIAL_US = float(os.getenv("CPU_SERIAL_US", "") or 8.0)
SERIAL_PROBES = 3
# Command-queue launches are encoded before anything runs, so there the choice is made from the kernel's estimates instead: below
# both bounds (about the work of a few microseconds on one core) its blocks run on the queue's thread. $CPU_SERIAL_OPS: 0 never.
SERIAL_OPS = int(os.getenv("CPU_SERIAL_OPS", "") or 1 << 17)
SERIAL_MEM = 1 << 20   # bytes

def serial_by_estimate(estimates: dict[str, int]) -> bool:
  """Whether a kernel of these estimates (ProgramSpec.estimates: ops, mem bytes) is too small to hand its blocks to the pool;
  False when they are unknown (a program whose spec has none; a compiled file saves them with each program)."""
  return SERIAL_OPS > 0 and "ops" in estimates and estimates["ops"] < SERIAL_OPS and estimates.get("mem", 0) < SERIAL_MEM

class CPUAllocator(HostArrayAllocator):
  """Host memory as ctypes byte arrays whose address is 64-byte aligned. Views (`_offset`) keep their base alive."""
  supports_external_ptr = True
  def _alloc(self, size: int, options: BufferSpec) -> Any:
    if options.external_ptr is not None: return (ctypes.c_uint8 * size).from_address(options.external_ptr)
    from plugin_cpu.hostmem import alloc_host
    return alloc_host(size)   # 64-byte aligned; from 2 MiB on a mapping of its own on huge pages
  def _free(self, opaque: Any, options: BufferSpec) -> None: pass  # Python frees the array when the last reference goes

@functools.cache
def _guarded_launcher() -> Any:
  """cpu_launch_guarded, called like _launcher plus three pointers the launch fills when a block faults or is interrupted
  (signal, address, block). Kernels run under the native fault guard: a wild address or SIGINT leaves the kernel, not the
  process (native/pool.h)."""
  from plugin_cpu import native
  fn = native.lib()["cpu_launch_guarded"]
  fn.restype = ctypes.c_int
  return fn

@functools.cache
def _launcher() -> Any:
  """cpu_launch without argtypes: every argument arrives as a prebuilt ctypes object or a plain int (a C int), which skips
  ctypes' per-call conversion (about 0.4 us of a 1 us launch). The call releases the GIL."""
  from plugin_cpu import native
  fn = native.lib()["cpu_launch"]   # indexing makes a new function object, so lib().cpu_launch keeps its argtypes
  fn.restype = ctypes.c_int
  return fn

class CPUProgram:
  """A kernel from shared-object bytes, loaded through an anonymous memfd so no file is written, and launched on the thread
  pool: one call per block index in [0, global_size[0]), the index as a trailing argument (kernels without one ignore it).
  The loader recognizes an already loaded library by its path, so the fd (and with it the unique /proc/self/fd/N name) stays open
  while the library is loaded; both are released together when the program is garbage collected."""
  def __init__(self, name: str, lib: bytes):
    from plugin_cpu.native import load_library
    from plugin_cpu import elfload
    self.name = name
    fname = to_function_name(name)
    if elfload.is_relocatable(lib):
      # an object file (the LLVM path): placed and relocated in-process, no linker and no dlopen
      self.obj = elfload.LoadedObject(lib)
      if fname not in self.obj.symbols: raise RuntimeError(f"CPU: the compiled object has no kernel named {fname!r}")
      self.fxn = ctypes.CFUNCTYPE(None)(self.obj.symbols[fname])
    else:
      self.lib, self.fd = load_library(lib, f"core_{fname[:200]}")
      try: self.fxn = getattr(self.lib, fname)
      except AttributeError: raise RuntimeError(f"CPU: the compiled library has no kernel named {fname!r}") from None
      self.fxn.restype = None
    self.fn = ctypes.c_void_p(ctypes.cast(self.fxn, ctypes.c_void_p).value)
    self._launch = _launcher()
    self._guarded = _guarded_launcher()
    # the fault and interrupt handlers, (re)installed where someone (faulthandler, signal.signal) replaced them since
    from plugin_cpu import native
    native.lib().cpu_guard_check()
    # argument arrays not in use, each with the slots a faulting launch fills: a launch takes one and gives it back, so two
    # threads never fill the same one
    self._free: list[Any] = []
    # per global size: the block count passed to the launch (negative: run serially on the calling thread), and while it is
    # being decided the one-thread times of the launches so far
    self._nblocks: dict[tuple[int, ...], ctypes.c_int64] = {}
    self._probing: dict[tuple[int, ...], list[float]] = {}

  def __del__(self) -> None:
    # unload first: only then may the fd number (and so the path) be reused by another program
    try:
      if (lib := self.__dict__.pop("lib", None)) is not None:
        self.__dict__.pop("fxn", None)
        _ctypes.dlclose(lib._handle)
      if (fd := self.__dict__.pop("fd", None)) is not None: os.close(fd)
    except (OSError, AttributeError, TypeError): pass  # interpreter shutdown

  def __call__(self, *bufs: Any, global_size: tuple[int, ...] = (1, 1, 1), local_size: tuple[int, ...] = (1, 1, 1),
               vals: tuple[int, ...] = (), wait: bool = False) -> float | None:
    # the hot path of every kernel launch: each line here costs tens of ns (an empty launch is about 1 us in all)
    try: args, out, pout = self._free.pop()
    except IndexError: args, out, pout = _launch_arrays()
    i = 0
    try:
      for b in bufs:
        args[i] = ctypes.addressof(b)
        i += 1
      for v in vals:   # an int32 sign-extended into its 64-bit slot, as pool.h asks
        args[i] = v
        i += 1
    except TypeError: i = _fill_slow(args, bufs, vals)   # buffers given as addresses (int) or None
    except IndexError: raise ValueError(f"CPU: kernel {self.name} has {len(bufs) + len(vals)} arguments, more than the "
                                        f"{CPU_MAX_ARGS} a launch passes") from None
    try: return self._go(args, i, global_size, out, pout, wait)
    finally: self._free.append((args, out, pout))

  def _go(self, args: Any, n: int, global_size: tuple[int, ...], out: Any, pout: tuple[Any, ...], wait: bool) -> float | None:
    """One guarded launch of `n` prepared arguments; the seconds it took when `wait` (or while its block count is being decided)."""
    if (nb := self._nblocks.get(global_size)) is None: nb = self._new_nblocks(global_size)
    if wait or (self._probing and global_size in self._probing):
      st = time.perf_counter()
      ret = self._guarded(self.fn, n, args, nb, *pout)
      tm: float | None = time.perf_counter() - st
      if ret == 0 and (times := self._probing.get(global_size)) is not None: self._probed(global_size, times, tm or 0.0)
    else: ret, tm = self._guarded(self.fn, n, args, nb, *pout), None
    if ret != 0: self._failed(ret, n, global_size, out)
    return tm

  def _failed(self, ret: int, n: int, global_size: tuple[int, ...], out: Any) -> NoReturn:
    """Raises for a launch whose native call returned `ret` != 0: -2, a block faulted or was interrupted (`out`: signal, address,
    block); otherwise the launch itself was refused."""
    if ret == -2: self._stopped(int(out[0]) & 0xFFFFFFFF, int(out[1]) & (2**64 - 1), int(out[2]), global_size[0])
    raise RuntimeError(f"CPU: cpu_launch of {self.name} failed ({n} arguments, global size {global_size})")

  def _new_nblocks(self, global_size: tuple[int, ...]) -> ctypes.c_int64:
    nb = _nblocks_arg(self.name, global_size)
    if nb.value > 1 and SERIAL_US > 0:
      # serial while it is timed; _probed settles it
      self._probing[global_size] = []
      nb = ctypes.c_int64(-nb.value)
    self._nblocks[global_size] = nb
    return nb

  def _probed(self, global_size: tuple[int, ...], times: list[float], tm: float) -> None:
    times.append(tm)
    if len(times) >= SERIAL_PROBES:
      # the best time: a preempted probe on a busy machine says nothing about the kernel
      if min(times) * 1e6 >= SERIAL_US: self._nblocks[global_size] = ctypes.c_int64(global_size[0])
      self._probing.pop(global_size, None)

  def serial(self, global_size: tuple[int, ...]) -> bool | None:
    """Whether launches of `global_size` run their blocks on the calling thread (None: not decided yet, or one block)."""
    nb = self._nblocks.get(global_size)
    return None if nb is None or global_size in self._probing or abs(nb.value) <= 1 else nb.value < 0

  def prepare(self, *bufs: Any, global_size: tuple[int, ...] = (1, 1, 1), local_size: tuple[int, ...] = (1, 1, 1),
              vals: tuple[int, ...] = (), estimates: dict[str, int] | None = None) -> Callable[[], None]:
    """A guarded launch whose buffers and values never change (a replay's), its argument array built once: calling it skips the
    per-launch argument filling of __call__. With the kernel's `estimates` its blocks stay on the calling thread or go to the
    pool as a command-queue launch's would (serial_by_estimate), settled now: a compiled file's direct replay then launches
    each kernel as the Jit's queue replay of the same model does; without them the first launches are timed as __call__'s
    are. Faults and interrupts raise as from __call__."""
    if len(bufs) + len(vals) > CPU_MAX_ARGS:
      raise ValueError(f"CPU: kernel {self.name} has {len(bufs) + len(vals)} arguments, more than the {CPU_MAX_ARGS} a launch passes")
    args, out, pout = _launch_arrays()
    n = _fill_slow(args, bufs, vals)
    guarded, fn, failed = self._guarded, self.fn, self._failed
    p0, p1, p2 = pout
    if estimates:
      nb = _nblocks_arg(self.name, global_size)
      if nb.value > 1 and serial_by_estimate(estimates): nb = ctypes.c_int64(-nb.value)
      def call() -> None:
        if (ret := guarded(fn, n, args, nb, p0, p1, p2)) != 0: failed(ret, n, global_size, out)
    else:
      go, nblocks, probing = self._go, self._nblocks, self._probing
      def call() -> None:
        # once this size's block count is settled, the native launch itself (a replay calls this per kernel: _go's frame and
        # checks were a fifth of a small kernel's launch)
        if (nb := nblocks.get(global_size)) is None or (probing and global_size in probing): go(args, n, global_size, out, pout, False)
        elif (ret := guarded(fn, n, args, nb, p0, p1, p2)) != 0: failed(ret, n, global_size, out)
    call.keep = (self, bufs)   # type: ignore[attr-defined]  # the program and the buffers live as long as the prepared launch
    return call

  def _stopped(self, signo: int, addr: int, block: int, nblocks: int) -> None:
    """Raises for a launch that a signal stopped: KeyboardInterrupt for Ctrl-C (Python's own handler ran already), else
    KernelFault naming the kernel, the signal and the address."""
    import signal   # imported on this error path only: its enums cost a device open ~1 ms
    if signo == signal.SIGINT:
      ctypes.pythonapi.PyErr_CheckSignals()   # raises the KeyboardInterrupt (or whatever the SIGINT handler raises)
      raise KernelFault(f"CPU: kernel {self.name} was interrupted by SIGINT; its results are incomplete", self.name)
    if signo == signal.SIGURG: raise KernelFault(f"CPU: kernel {self.name} was interrupted; its results are incomplete", self.name)
    where = f" in block {block} of {nblocks}" if nblocks > 1 and block >= 0 else ""
    raise KernelFault(f"CPU: kernel {self.name} faulted: {signal.Signals(signo).name} ({signal.strsignal(signo)}) at address 0x{addr:x}{where}. "
                      "Its writes may be partial; the device stays usable", self.name, addr)

  def bind(self, *args: int, global_size: tuple[int, ...] = (1, 1, 1)) -> Callable[[], None]:
    """A launch with fixed integer arguments (addresses, int32 values), its argument array built once: calling it costs one
    ctypes call (core's HCQ pipeline calls its submit program this way on every run)."""
    if len(args) > CPU_MAX_ARGS: raise ValueError(f"CPU: a launch passes at most {CPU_MAX_ARGS} arguments, not {len(args)}")
    arr = (ctypes.c_int64 * max(len(args), 1))(*args)
    fn, launch, n, nb, name = self.fn, self._launch, len(args), _nblocks_arg(self.name, global_size), self.name
    def call() -> None:
      if launch(fn, n, arr, nb) != 0: raise RuntimeError(f"CPU: cpu_launch of {name} failed ({n} arguments, global size {global_size})")
    call.keep = self   # type: ignore[attr-defined]  # the program (its code) lives as long as the bound launch
    return call

def _launch_arrays() -> tuple[Any, Any, tuple[Any, ...]]:
  """An argument array, and three int64 slots for a stopped launch's signal, address and block with pointers to them."""
  out = (ctypes.c_int64 * 3)()
  base = ctypes.addressof(out)
  return (ctypes.c_int64 * CPU_MAX_ARGS)(), out, tuple(ctypes.c_void_p(base + 8 * k) for k in range(3))

def _nblocks_arg(name: str, global_size: tuple[int, ...]) -> ctypes.c_int64:
  if global_size[1:] not in ((), (1,), (1, 1)) or not global_size or global_size[0] < 0:
    raise ValueError(f"CPU: kernel {name} has global size {global_size}; the CPU runs one-dimensional launches only")
  return ctypes.c_int64(global_size[0])

def _fill_slow(args: Any, bufs: tuple[Any, ...], vals: tuple[int, ...]) -> int:
  if len(bufs) + len(vals) > CPU_MAX_ARGS: raise ValueError(f"CPU: a launch passes at most {CPU_MAX_ARGS} arguments, not {len(bufs) + len(vals)}")
  for i, b in enumerate(bufs): args[i] = b if isinstance(b, int) else 0 if b is None else ctypes.addressof(b)
  for i, v in enumerate(vals, len(bufs)): args[i] = v
  return len(bufs) + len(vals)

def llvmlite_available() -> bool:
  # found, not imported: importing llvmlite.binding loads LLVM (tens of ms); whoever compiles imports it
  import importlib.util
  try: return importlib.util.find_spec("llvmlite") is not None
  except (ImportError, ValueError): return False

def make_device(name: str, target: Target | None = None) -> Compiled:
  """The CPU device for DEV target `target`: renderer LLVM (the default when llvmlite is installed: as fast and it compiles
  in-process) or C; ARCH is -march/cpu. Interface HCQ (the default): schedules run through core's HCQ pipeline on this
  device's command processor (iface_hcq.py); DIRECT: kernels are called one by one."""
  from plugin_cpu import make_c, make_llvm
  target = target or Target(device=name)
  which = (target.renderer or ("LLVM" if llvmlite_available() else "C")).upper()
  arch = target.arch
  makers = {"C": make_c, "LLVM": make_llvm}
  if which not in makers: raise ValueError(f"{name} has no renderer {which!r}; choose one of {', '.join(makers)} (DEV={name}:LLVM or DEV={name}:C)")
  if which == "LLVM" and not llvmlite_available(): raise RuntimeError(f"{name}:LLVM needs llvmlite: pip install llvmlite, or use DEV={name}:C")
  renderer, compiler = makers[which](arch)
  renderer.device, renderer.arch = name, arch
  if which == "LLVM":   # tile kernels run only in a process Linux gave the tile registers (plugin_cpu/amx.py); asked with CPU_AMX=0
    # too, where the renderer writes none but a compiled file made without it may hold some
    from plugin_cpu.amx import request_tile_data
    renderer.amx = request_tile_data() and renderer.amx
  iface = (target.interface or "HCQ").upper()
  if iface not in ("HCQ", "DIRECT"): raise ValueError(f"{name} has no interface {iface!r}; choose HCQ (the default) or DIRECT (DEV=DIRECT+{name})")
  from plugin_cpu.iface_hcq import device_hcq
  return Compiled(name, CPUAllocator(name), renderer, compiler, CPUProgram, target, hcq=device_hcq(name) if iface == "HCQ" else None)
