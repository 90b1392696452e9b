"""Environment flags, Context, and the small utilities every layer shares."""
from __future__ import annotations
import collections, contextlib, dataclasses, enum, functools, gc, operator, os, pathlib, sys, threading, time, types
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Iterable, Iterator, Sequence, TypeVar

T = TypeVar("T")

if TYPE_CHECKING: from typing_extensions import dataclass_transform
else:
  def dataclass_transform(**_: Any) -> Callable[[T], T]: return lambda fn: fn

# *** enums whose members read as fast as class attributes ***

class _EnumMembers(type):
  """The metaclass of a `fast_members` enum: lookups of members are plain class attributes; iteration, `E(value)`,
  `E[name]`, `len`, `in` and `isinstance` are the enum's."""
  def __iter__(cls) -> Iterator[Any]: return iter(cls._enum)  # type: ignore[attr-defined]
  def __len__(cls) -> int: return len(cls._enum)  # type: ignore[attr-defined]
  def __getitem__(cls, name: str) -> Any: return cls._enum[name]  # type: ignore[attr-defined]
  def __call__(cls, value: Any) -> Any: return cls._enum(value)  # type: ignore[attr-defined]
  def __contains__(cls, x: Any) -> bool: return x in cls._enum  # type: ignore[attr-defined]
  def __instancecheck__(cls, x: Any) -> bool: return isinstance(x, cls._enum)  # type: ignore[attr-defined]
  def __repr__(cls) -> str: return f"<enum {cls.__name__!r}>"

def fast_members(e: T) -> T:
  """Class decorator for the enums the compiler compares on every node (`u.op is Ops.ADD`). Python 3.11's EnumType has
  a `__getattr__`, which sends every attribute read of the class through a Python-level hook (~100 ns instead of ~20);
  3.12 dropped it. The members themselves are unchanged (same objects, repr, ordering); only the class is a namespace."""
  if sys.version_info >= (3, 12): return e
  members = dict(e.__members__)  # type: ignore[attr-defined]
  ns = {"_enum": e, "__module__": e.__module__, "__qualname__": e.__qualname__, "__doc__": e.__doc__, **members}  # type: ignore[attr-defined]
  return _EnumMembers(e.__name__, (), ns)  # type: ignore[return-value,attr-defined]

# what an `int_enum` class derives from: IntEnum for type checkers (members typed as members), nothing at run time, so that
# the class statement makes a plain class and int_enum makes the enum
if TYPE_CHECKING: IntEnumBody = enum.IntEnum
else:
  class IntEnumBody:
    """The base of a plain class body that `int_enum` turns into an IntEnum."""

def int_enum(cls: type[T]) -> type[T]:
  """Class decorator: a plain class body (deriving from IntEnumBody) as an IntEnum with the same members, values, order and
  methods. Built by enum._simple_enum on 3.11+ (the stdlib's own enums use it: no per-member _EnumDict and __set_name__
  steps), which for Ops' 84 members is ~4M instructions less of every start; the class statement's route elsewhere."""
  if sys.version_info >= (3, 11): e = enum._simple_enum(enum.IntEnum)(cls)  # type: ignore[attr-defined]
  else:
    body = {k: v for k, v in cls.__dict__.items() if k not in ("__dict__", "__weakref__")}
    e = types.new_class(cls.__name__, (enum.IntEnum,), exec_body=lambda ns: [ns.__setitem__(k, v) for k, v in body.items()])
  e.__qualname__ = cls.__qualname__   # both routes name the class by its bare name
  return e

# *** records: dataclasses without a compile of generated source at import ***

class _FactoryDefault:
  def __repr__(self) -> str: return "<factory>"
_FACTORY_DEFAULT = _FactoryDefault()

def _fields_tuple(names: list[str]) -> Callable[[Any], tuple]:
  """The fields `names` of an object as a tuple (attrgetter gives a bare value for one name, dataclass() a 1-tuple)."""
  if not names: return lambda obj: ()
  get = operator.attrgetter(*names)
  return get if len(names) > 1 else lambda obj: (get(obj),)

def _make_init(cls: type, frozen: bool) -> Callable[..., None]:
  """The __init__ dataclass() would give `cls`: its init fields as parameters in order (defaults, default factories), each
  stored (by object.__setattr__ when frozen), then __post_init__ when the class has one."""
  ns: dict[str, Any] = {"__rec_setattr": object.__setattr__, "__rec_factory": _FACTORY_DEFAULT}
  params, body = [], []
  for f in dataclasses.fields(cls):
    default, factory = f"__rec_d_{f.name}", f"__rec_f_{f.name}"
    if f.default_factory is not dataclasses.MISSING:
      ns[default], ns[factory] = _FACTORY_DEFAULT, f.default_factory
      value = f"{factory}() if {f.name} is __rec_factory else {f.name}" if f.init else f"{factory}()"
    elif f.default is not dataclasses.MISSING: ns[default], value = f.default, f.name if f.init else default
    elif f.init: value = f.name
    else: continue   # no init and no default: dataclass() leaves it unset too
    if f.init: params.append(f.name if default not in ns else f"{f.name}={default}")
    body.append(f"  __rec_setattr(self, {f.name!r}, {value})" if frozen else f"  self.{f.name} = {value}")
  if hasattr(cls, "__post_init__"): body.append("  self.__post_init__()")
  exec(f"def __init__(self, {', '.join(params)}):\n" + ("\n".join(body) or "  pass"), ns)
  fn = ns["__init__"]
  fn.__qualname__ = f"{cls.__qualname__}.__init__"
  return fn

def _record(cls: type[T], frozen: bool) -> type[T]:
  if own := [m for m in ("__eq__", "__setattr__", "__delattr__") if m in cls.__dict__]:
    raise TypeError(f"record {cls.__qualname__} defines {', '.join(own)}: a record makes its own")
  # dataclass() lets a frozen class derive only from frozen ones: under a frozen base it also writes the two frozen methods
  frozen_base = any(dataclasses.is_dataclass(b) and b.__dataclass_params__.frozen for b in cls.__mro__[1:])  # type: ignore[attr-defined]
  c: Any = dataclasses.dataclass(init=False, repr=False, eq=False, frozen=frozen and frozen_base)(cls)
  fields = dataclasses.fields(c)
  init_fields = [f for f in fields if f.init]
  has_default = [f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING for f in init_fields]
  if has_default != sorted(has_default) or any(f.kw_only for f in fields) or \
     any("InitVar" in str(a) for k in c.__mro__ for a in k.__dict__.get("__annotations__", {}).values()):
    raise TypeError(f"record {cls.__qualname__}: fields with defaults go last, and kw_only fields and InitVars are not supported")
  compared = _fields_tuple([f.name for f in fields if f.compare])
  def __eq__(self: Any, other: Any) -> Any: return compared(self) == compared(other) if other.__class__ is self.__class__ else NotImplemented
  shown = [f.name for f in fields if f.repr]
  def __repr__(self: Any) -> str: return f"{self.__class__.__qualname__}(" + ", ".join(f"{n}={getattr(self, n)!r}" for n in shown) + ")"
  methods: dict[str, Any] = {"__eq__": __eq__, "__hash__": None}
  if "__repr__" not in c.__dict__: methods["__repr__"] = __repr__
  if frozen:
    hashed = _fields_tuple([f.name for f in fields if (f.compare if f.hash is None else f.hash)])
    names = frozenset(f.name for f in fields)
    def __hash__(self: Any) -> int: return hash(hashed(self))
    def __setattr__(self: Any, name: str, value: Any) -> None:
      if type(self) is c or name in names: raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
      super(c, self).__setattr__(name, value)
    def __delattr__(self: Any, name: str) -> None:
      if type(self) is c or name in names: raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")
      super(c, self).__delattr__(name)
    methods.update(__hash__=__hash__, __setattr__=__setattr__, __delattr__=__delattr__)
  if cls.__dict__.get("__hash__") is not None: del methods["__hash__"]   # the class's own hash stays (as dataclass() leaves it)
  if "__init__" not in c.__dict__:
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
      c.__init__ = init = _make_init(c, frozen)   # built on the first instance: a class never made costs no compile
      init(self, *args, **kwargs)
    methods["__init__"] = __init__
  for name, fn in methods.items():
    if fn is not None: fn.__qualname__ = f"{c.__qualname__}.{name}"
    setattr(c, name, fn)
  # what the class is, as dataclass() reads it from a subclass (plugins derive frozen dataclasses from core's records)
  params = c.__dataclass_params__
  params.init = params.repr = params.eq = True
  params.frozen = frozen
  return c

@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field,))
def frozen_record(cls: type[T]) -> type[T]:
  """Class decorator, for `@dataclass(frozen=True)`: the same class (fields(), replace(), asdict(); equality and hash by the
  fields with compare=True as a tuple, the same repr, FrozenInstanceError on assignment), but dataclass() builds its six
  methods from source text by exec at every import, ~3.9M instructions a class (Python's parser and compiler), where these
  are functions of this module and the __init__ is generated on the class's first instance. Fields with defaults go last;
  no kw_only fields or InitVars. A record derived from a frozen one gets dataclass()'s two frozen methods built as well."""
  return _record(cls, frozen=True)

@dataclass_transform(field_specifiers=(dataclasses.field,))
def mutable_record(cls: type[T]) -> type[T]:
  """Class decorator, for `@dataclass`: `frozen_record` without the freezing (assignable fields; unhashable, as dataclass() makes it)."""
  return _record(cls, frozen=False)

# *** collections ***

def prod(xs: Iterable[Any], start: Any = 1) -> Any: return functools.reduce(lambda a, b: a * b, xs, start)
def flatten(xss: Iterable[Iterable[T]]) -> list[T]: return [x for xs in xss for x in xs]
def all_int(xs: Iterable[Any]) -> bool: return all(isinstance(x, int) for x in xs)
def argsort(xs: Sequence[Any]) -> list[int]: return sorted(range(len(xs)), key=xs.__getitem__)
def partition(xs: Iterable[T], fn: Callable[[T], bool]) -> tuple[list[T], list[T]]:
  yes: list[T] = []
  no: list[T] = []
  for x in xs: (yes if fn(x) else no).append(x)
  return yes, no
def make_tuple(x: int | Sequence[int], n: int) -> tuple[int, ...]: return (x,) * n if isinstance(x, int) else tuple(x)
def argfix(*x: Any) -> tuple[Any, ...]:
  """Lets `f(1, 2)`, `f((1, 2))` and `f([1, 2])` mean the same thing."""
  if x and isinstance(x[0], (tuple, list)):
    if len(x) != 1: raise ValueError(f"pass either one sequence or several values, not {x!r}")
    return tuple(x[0])
  return tuple(x)
def round_up(n: int, align: int) -> int: return (n + align - 1) // align * align
def is_pow2(n: int) -> bool: return n > 0 and n & (n - 1) == 0

def to_function_name(s: str) -> str:
  """A C identifier made from an arbitrary kernel name."""
  return "".join(c if c.isalnum() or c == "_" else f"{ord(c):02X}" for c in s)

def colored(s: str, color: str | None = None) -> str:
  if color is None or not sys.stdout.isatty(): return s
  codes = {"black": 30, "red": 31, "green": 32, "yellow": 33, "blue": 34, "magenta": 35, "cyan": 36, "white": 37}
  return f"\u001b[{codes[color]}m{s}\u001b[0m"

# *** environment ***

@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
  """The cyclic garbage collector off inside (back on after only if it was on before): work that makes many short-lived
  acyclic objects (a kernel's codegen: UOp graphs) otherwise sets off full collections, each walking every object the process
  holds (a model, its tensors) for garbage it does not have. Cycles made inside are collected later."""
  if not gc.isenabled():
    yield
    return
  gc.disable()
  try: yield
  finally: gc.enable()

@functools.cache
def getenv(key: str, default: Any = 0) -> Any:
  """Reads an env var once, typed like `default`."""
  return type(default)(os.getenv(key, default))

class LRUCache(collections.OrderedDict):
  """A cache bounded to `max_entries` (CORE_CACHE_<NAME> overrides it) and, when given `sizeof` (bytes of a value), to
  `max_bytes` (CORE_CACHE_<NAME>_BYTES), dropping the least recently used entry first; it counts hits, misses and
  evictions, and every instance is listed by name in `LRUCache.all` (DEBUG=2 prints them at exit)."""
  all: ClassVar[dict[str, LRUCache]] = {}
  def __init__(self, name: str, max_entries: int, max_bytes: int = 0, sizeof: Callable[[Any], int] | None = None):
    super().__init__()
    self.name, self.max_entries = name, int(os.getenv(f"CORE_CACHE_{name.upper()}", max_entries))
    self.max_bytes, self.sizeof = int(os.getenv(f"CORE_CACHE_{name.upper()}_BYTES", max_bytes)), sizeof
    self.hits = self.misses = self.evictions = self.nbytes = 0
    LRUCache.all[name] = self
  def get(self, key: Any, default: Any = None) -> Any:
    try: self.move_to_end(key)
    except KeyError:
      self.misses += 1
      return default
    self.hits += 1
    return super().__getitem__(key)
  def __setitem__(self, key: Any, value: Any) -> None:
    if self.sizeof is not None:
      if key in self: self.nbytes -= self.sizeof(super().__getitem__(key))
      self.nbytes += self.sizeof(value)
    super().__setitem__(key, value)
    self.move_to_end(key)
    # the entry just set stays even when it alone is over the byte bound: its caller is about to use it
    while len(self) > self.max_entries or (self.max_bytes and self.nbytes > self.max_bytes and len(self) > 1):
      self.popitem(last=False)
      self.evictions += 1
  def __delitem__(self, key: Any) -> None:
    if self.sizeof is not None: self.nbytes -= self.sizeof(super().__getitem__(key))
    super().__delitem__(key)
  def popitem(self, last: bool = True) -> tuple[Any, Any]:
    k, v = super().popitem(last)
    if self.sizeof is not None: self.nbytes -= self.sizeof(v)
    return k, v
  def pop(self, key: Any, *default: Any) -> Any:
    if key not in self: return super().pop(key, *default)
    v = super().pop(key)
    if self.sizeof is not None: self.nbytes -= self.sizeof(v)
    return v
  def clear(self) -> None:
    super().clear()
    self.nbytes = 0
  def stats(self) -> str:
    size = f", {self.nbytes / 2**20:.1f}/{self.max_bytes / 2**20:.0f} MiB" if self.sizeof is not None else ""
    return f"{self.name} {len(self)}/{self.max_entries}{size} (hits {self.hits}, misses {self.misses}, evicted {self.evictions})"

class ContextVar:
  """An integer setting read from the environment once and overridable with `Context(...)`."""
  _registry: dict[str, ContextVar] = {}
  def __init__(self, key: str, default: int):
    self.key, self.value = key, getenv(key, default)
    ContextVar._registry[key] = self
  def __bool__(self) -> bool: return bool(self.value)
  def __int__(self) -> int: return int(self.value)
  def __index__(self) -> int: return int(self.value)
  def __ge__(self, x: int) -> bool: return self.value >= x
  def __gt__(self, x: int) -> bool: return self.value > x
  def __lt__(self, x: int) -> bool: return self.value < x
  def __le__(self, x: int) -> bool: return self.value <= x
  def __eq__(self, x: object) -> bool: return self.value == x
  def __hash__(self) -> int: return hash(self.key)
  def __repr__(self) -> str: return f"{self.key}={self.value}"

class Context(contextlib.ContextDecorator):
  """`with Context(DEBUG=2):` overrides settings for a block (also usable as a decorator)."""
  def __init__(self, **kwargs: int): self.kwargs = kwargs
  def __enter__(self) -> None:
    unknown = [k for k in self.kwargs if k not in ContextVar._registry]
    if unknown: raise KeyError(f"unknown Context setting(s) {unknown}; known: {sorted(ContextVar._registry)}")
    self.old = {k: ContextVar._registry[k].value for k in self.kwargs}
    for k, v in self.kwargs.items(): ContextVar._registry[k].value = v
  def __exit__(self, *exc: object) -> None:
    for k, v in self.old.items(): ContextVar._registry[k].value = v

DEBUG, SPEC, TRACK_REWRITES = ContextVar("DEBUG", 0), ContextVar("SPEC", 0), ContextVar("TRACK_REWRITES", 0)
VIZ = ContextVar("VIZ", 0)   # record every rewrite pass for the web page of core/viz
BEAM, NOOPT, JIT = ContextVar("BEAM", 0), ContextVar("NOOPT", 0), ContextVar("JIT", 1)
# training mode (dropout, BatchNorm batch statistics, optimizer steps): the one switch behind Tensor.training and Tensor.train()
TRAINING = ContextVar("TRAINING", 0)
LIFT_CONSTS = ContextVar("LIFT_CONSTS", 1)   # float literals are kernel arguments: kernels differing only in them compile once
IMAGE = ContextVar("IMAGE", 0)   # 1: kernels read their input buffers as 2-D images where the renderer has them; 2: also write them
# seconds the host waits on an HCQ signal before raising core.hcq.HCQError (a float: HCQ_TIMEOUT=0.5 works)
HCQ_TIMEOUT = ContextVar("HCQ_TIMEOUT", 120.0)  # type: ignore[arg-type]

def cache_dir() -> pathlib.Path:
  """The per-user cache folder (XDG on Linux, ~/Library/Caches on macOS); override with CORE_CACHE_DIR."""
  if (d := os.getenv("CORE_CACHE_DIR")): return pathlib.Path(d)
  if sys.platform == "darwin": return pathlib.Path.home() / "Library" / "Caches" / "core"
  return pathlib.Path(os.getenv("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache") / "core"

# a stamp is trusted only once its files' times are this old: a file system's clock ticks coarsely (a jiffy), so a change in the
# tick of a read could leave the times unchanged ("racy" stamps, as git's index has them)
SETTLE_NS = 2_000_000_000

def file_stamp(path: str) -> str:
  """`path`'s stamp as `stamped` keeps it: modification and change times, size, inode ("-": missing). Writing, adding or
  removing a folder's entry changes its times, and the change time can't be set back (touch -d, cp -p, tar)."""
  try: st = os.stat(path)
  except OSError: return "-"
  return f"{st.st_mtime_ns} {st.st_ctime_ns} {st.st_size} {st.st_ino}"

def stamp_settled(stamp: str) -> bool:
  """Whether a file_stamp's times are older than SETTLE_NS (a missing file's always are): only such a stamp may be kept."""
  return stamp == "-" or max(map(int, stamp.split()[:2])) < time.time_ns() - SETTLE_NS

def stamped(kind: str, key: str, paths: list[str], make: Callable[[], T], dump: Callable[[T], list[str] | None],
            load: Callable[[list[str]], T | None]) -> T:
  """What `make()` derives from the files or folders `paths`, kept in the cache folder (kind/<hash of key and paths>.txt) after
  their stamp (times, size, inode; a missing one too) as dump's lines, and read back by `load` while the stamp is the same
  (load's None: damaged, made again). A stamp with a time in the last SETTLE_NS is not written; a read-only cache is no error."""
  path = cache_dir() / kind / f"{sha256(chr(10).join([key, *paths]).encode()).hexdigest()[:24]}.txt"
  head = [file_stamp(p) for p in paths]
  try: lines = path.read_text(encoding="utf-8").split("\n")
  except (OSError, ValueError): lines = []
  if lines[:len(head)] == head and (got := load(lines[len(head):])) is not None: return got
  value = make()
  if (out := dump(value)) is None or any(c in ln for ln in out for c in "\n\r"): return value
  if not all(stamp_settled(h) for h in head): return value
  try:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text("\n".join(head + out), encoding="utf-8")
    os.replace(tmp, path)
  except OSError: pass
  return value

@functools.cache
def host_machine() -> str:
  """The host's architecture as "x86_64", "aarch64" or the system's own lower-case name (platform.machine() says "AMD64" or
  "arm64" on some systems): the one place the CPU plugin and the ELF loader ask. os.uname answers it without importing platform."""
  m = (os.uname().machine if hasattr(os, "uname") else __import__("platform").machine()).lower()
  return {"amd64": "x86_64", "arm64": "aarch64"}.get(m, m)

# *** hashes without hashlib: importing it loads OpenSSL (~2.5 ms of every start) for digests CPython computes itself ***

try: from _sha2 import sha256 as _sha256_builtin   # Python 3.12+
except ImportError:
  try: from _sha256 import sha256 as _sha256_builtin  # type: ignore[no-redef]
  except ImportError: _sha256_builtin = None  # type: ignore[assignment]   # a build without its own hashes: hashlib's
try: from _blake2 import blake2b
except ImportError: from hashlib import blake2b  # type: ignore[assignment,no-redef]  # noqa: F401  (hashlib's is _blake2's anyway)
# OpenSSL's SHA-256 is ~6x faster (Zen 3: 1.4 GB/s vs 0.24), but its import costs ~4-6 ms: it pays for that from about 1 MB
# hashed. The CPU plugin hashes its native sources (~67 KB) at every start to check its prebuilt library
SHA256_OPENSSL_BYTES = 1 << 20

def sha256(data: bytes | memoryview = b"") -> Any:
  """hashlib.sha256(data): the same digest, from CPython's own SHA-256 for small data (cache keys, kernel binaries), so a warm
  start imports no hashlib."""
  if _sha256_builtin is not None and len(data) < SHA256_OPENSSL_BYTES: return _sha256_builtin(data)
  import hashlib
  return hashlib.sha256(data)

def fmt_bytes(n: float) -> str:
  for unit in ("B", "KB", "MB", "GB"):
    if abs(n) < 1024 or unit == "GB": return f"{n:.2f} {unit}" if unit != "B" else f"{int(n)} B"
    n /= 1024
  return f"{n} B"

