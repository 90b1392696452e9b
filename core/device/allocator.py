"""Allocator bases: raw device memory behind opaque handles, an LRU cache of freed blocks, honest OutOfMemory errors."""
from __future__ import annotations
import collections, dataclasses, os, threading
from typing import Any, Callable, Generic, TypeVar
from core.helpers import fmt_bytes, frozen_record

T = TypeVar("T")

# guards the allocators' caches and counters: buffers are freed on whichever thread drops their last reference, at any time.
# Reentrant: a garbage collection during an alloc can free a buffer on the same thread
_lock = threading.RLock()

@frozen_record
class BufferSpec:
  """How a buffer is allocated. Hashable: the LRU cache keys freed blocks by (size, BufferSpec)."""
  uncached: bool = False          # bypass the device cache (signals, doorbells)
  cpu_access: bool = False        # host-visible device memory
  host: bool = False              # pinned host memory
  nolru: bool = False             # never keep in the LRU cache (freed at once)
  external_ptr: int | None = None # wrap memory someone else owns; never freed by us
  # the LRU cache hashes the spec on every alloc and free: computed once (the generated __hash__ hashes every field each time)
  def __hash__(self) -> int:
    if (h := self.__dict__.get("_hash")) is None:
      h = hash(tuple(getattr(self, f.name) for f in dataclasses.fields(self)))
      object.__setattr__(self, "_hash", h)
    return h
  def __getstate__(self) -> dict[str, Any]: return {k: v for k, v in self.__dict__.items() if k != "_hash"}   # str hashes differ per process

class OutOfMemory(MemoryError):
  """A device allocation failed; the message says what was asked, what is in use and what was tried."""

class Allocator(Generic[T]):
  """Allocates opaque handles of device memory. Subclasses implement _alloc/_free and the copies they support."""
  default_spec = BufferSpec()
  # whether _alloc honours BufferSpec.external_ptr (wraps memory at a host address someone else owns): Tensor.from_blob needs it
  supports_external_ptr: bool = False
  device: str = "?"
  used: int = 0   # bytes handed out and not yet freed (cache excluded); class defaults so a subclass may skip __init__

  def __init__(self, device: str = "?"):
    # the name is what every error message and Buffer reads: a device object here would only fail later, far from the mistake
    if not isinstance(device, str):
      raise TypeError(f"{type(self).__name__}(device): device is the device's name (a str such as 'CPU'), not a {type(device).__name__}; "
                      f"pass the name (a Compiled device's .device)")
    self.device = device

  def alloc(self, size: int, options: BufferSpec | None = None) -> T:
    if not isinstance(size, int) or size <= 0: raise ValueError(f"{self.device}: can't allocate {size!r} bytes, size must be a positive int")
    try: ret = self._alloc(size, options or self.default_spec)
    except OutOfMemory: raise
    except MemoryError as e:
      raise OutOfMemory(f"{self.device}: out of memory allocating {fmt_bytes(size)} ({size} bytes) with {fmt_bytes(self.used)} in use: {e}") from e
    self.used += size
    return ret

  def free(self, opaque: T, size: int, options: BufferSpec | None = None) -> None:
    self.used -= size
    self._free(opaque, options or self.default_spec)

  def _alloc(self, size: int, options: BufferSpec) -> T: raise NotImplementedError(f"{type(self).__name__} must implement _alloc")
  def _free(self, opaque: T, options: BufferSpec) -> None: pass
  def _copyin(self, dest: T, src: memoryview) -> None: raise NotImplementedError(f"{type(self).__name__} can't copy into device memory")
  def _copyout(self, dest: memoryview, src: T) -> None: raise NotImplementedError(f"{type(self).__name__} can't copy out of device memory")
  def _offset(self, opaque: T, size: int, offset: int) -> T:
    """A handle to `size` bytes at `offset` into `opaque` (what Buffer views need); allocators without views keep this."""
    raise NotImplementedError(f"{self.device}'s allocator ({type(self).__name__}) can't make views (it has no _offset)")
  def _as_buffer(self, opaque: T) -> memoryview | None:
    """A zero-copy host view of the memory, or None when the host can't address it (copies go through _copyout)."""
    return None

# run, in order, when an allocation fails, before the cache is flushed and the allocation tried once more: each lets go of
# memory held elsewhere for reuse (the engine's shared pool of eager results: core/engine/realize.py)
oom_hooks: list[Callable[[], None]] = []

# bytes of freed blocks an LRUAllocator keeps for reuse (CORE_ALLOC_CACHE_MB): beyond it the blocks freed longest ago go back
# to the device, so a run of ever-new sizes (eager ops on new shapes) does not hold every size it ever freed
ALLOC_CACHE_BYTES = int(os.getenv("CORE_ALLOC_CACHE_MB", "128")) << 20

class LRUAllocator(Allocator[T]):
  """Keeps freed blocks by (size, options) and hands them out again, up to ALLOC_CACHE_BYTES (the least recently freed sizes
  go back to the device first); flushes them all before giving up on memory."""
  @property
  def cache(self) -> collections.OrderedDict[tuple[int, BufferSpec], list[T]]:
    # created on first use so subclasses need not call __init__; ordered by when a size was last freed (oldest first)
    if "_cache" not in self.__dict__: self.__dict__["_cache"] = collections.OrderedDict()
    return self.__dict__["_cache"]

  @property
  def cached_bytes(self) -> int: return self.__dict__.get("_cached", 0)

  def alloc(self, size: int, options: BufferSpec | None = None) -> T:
    opts = options or self.default_spec
    with _lock:
      if (cache := self.__dict__.get("_cache")) is not None and (blocks := cache.get((size, opts))):
        self.used += size
        self.__dict__["_cached"] = self.__dict__.get("_cached", 0) - size
        return blocks.pop()
      try: return super().alloc(size, opts)
      except MemoryError:
        # the memory may be sitting in our own cache (or held for reuse elsewhere): give it back to the device and try once more
        for hook in oom_hooks: hook()
        n, nbytes = sum(len(v) for v in self.cache.values()), self.cached_bytes
        self.free_cache()
        try: return super().alloc(size, opts)
        except MemoryError as e:
          raise OutOfMemory(f"{self.device}: out of memory allocating {fmt_bytes(size)} ({size} bytes): {fmt_bytes(self.used)} in use, "
                            f"and the cache of {n} freed buffers ({fmt_bytes(nbytes)}) was flushed first. Free tensors you no longer need "
                            f"or use smaller batches.") from e

  def free(self, opaque: T, size: int, options: BufferSpec | None = None) -> None:
    opts = options or self.default_spec
    with _lock:
      if opts.nolru or opts.external_ptr is not None or size > ALLOC_CACHE_BYTES: return super().free(opaque, size, opts)
      self.used -= size
      cache = self.cache
      if (blocks := cache.get(key := (size, opts))) is None: blocks = cache[key] = []
      else: cache.move_to_end(key)
      blocks.append(opaque)
      self.__dict__["_cached"] = cached = self.__dict__.get("_cached", 0) + size
      while cached > ALLOC_CACHE_BYTES:
        (old_size, old_opts), old = next(iter(cache.items()))
        if old:
          self._free(old.pop(0), old_opts)
          cached -= old_size
        if not old: del cache[(old_size, old_opts)]   # (emptied by allocs too: those are dropped here)
      self.__dict__["_cached"] = cached

  def free_cache(self) -> None:
    """Returns every cached block to the device."""
    with _lock:
      for (_, opts), blocks in self.cache.items():
        for b in blocks: self._free(b, opts)
      self.cache.clear()
      self.__dict__["_cached"] = 0
