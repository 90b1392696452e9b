"""PyTorch checkpoints (.pth/.pt, zip and legacy formats) read without torch: a restricted unpickler and the raw storages."""
from __future__ import annotations
import io, pickle, struct, zipfile
from collections import OrderedDict
from typing import Any, Callable
from core.helpers import prod
from core.ir.dtype import DType, dtypes
from core.tensor.nn.source import BufferFile, Source, open_source, host_tensor

# the typed-storage classes torch pickles as `torch.<Name>Storage`, and the numpy type of their little-endian bytes
STORAGE_DTYPES: dict[str, tuple[DType, str]] = {
  "FloatStorage": (dtypes.float32, "f4"), "HalfStorage": (dtypes.float16, "f2"), "BFloat16Storage": (dtypes.bfloat16, "u2"),
  "DoubleStorage": (dtypes.float64, "f8"), "LongStorage": (dtypes.int64, "i8"), "IntStorage": (dtypes.int32, "i4"),
  "ShortStorage": (dtypes.int16, "i2"), "CharStorage": (dtypes.int8, "i1"), "ByteStorage": (dtypes.uint8, "u1"),
  "BoolStorage": (dtypes.bool, "?"), "Float8_e4m3fnStorage": (dtypes.fp8e4m3, "u1"), "Float8_e5m2Storage": (dtypes.fp8e5m2, "u1"),
}
# torch.<dtype> globals (a checkpoint may store dtypes as values): returned as core DTypes
TORCH_DTYPES: dict[str, DType] = {"float32": dtypes.float32, "float": dtypes.float32, "float16": dtypes.float16, "half": dtypes.float16,
  "bfloat16": dtypes.bfloat16, "float64": dtypes.float64, "double": dtypes.float64, "int64": dtypes.int64, "long": dtypes.int64,
  "int32": dtypes.int32, "int": dtypes.int32, "int16": dtypes.int16, "int8": dtypes.int8, "uint8": dtypes.uint8, "bool": dtypes.bool}
LEGACY_MAGIC = 0x1950a86a20f9469cfc6c

class Storage:
  """A storage named by the pickle (key, dtype, element count); its bytes are located once the whole file is known."""
  def __init__(self, key: str, sname: str, numel: int):
    self.key, self.sname, self.numel = key, sname, numel
    self.dtype, self.np_type = STORAGE_DTYPES[sname]
    self.array: Any = None   # a numpy view of the file's bytes, set by the loader

class PendingTensor:
  """What a rebuild function returns while unpickling: a strided view of a storage, made a Tensor after the storages are read."""
  def __init__(self, storage: Storage, offset: int, size: tuple[int, ...], stride: tuple[int, ...]):
    self.storage, self.offset, self.size, self.stride = storage, offset, tuple(size), tuple(stride)

def _rebuild_tensor(storage: Storage, storage_offset: int, size: tuple[int, ...], stride: tuple[int, ...], *_: Any) -> PendingTensor:
  if not isinstance(storage, Storage): raise TypeError(f"a tensor's storage is a {type(storage).__name__}, not a storage")
  return PendingTensor(storage, storage_offset, size, stride)

def _rebuild_parameter(data: Any, *_: Any) -> Any: return data   # requires_grad and hooks have no meaning for loaded weights

# module -> name -> what unpickling may build; anything else is refused
_ALLOWED: dict[str, dict[str, Any]] = {
  "torch._utils": {"_rebuild_tensor_v2": _rebuild_tensor, "_rebuild_tensor": _rebuild_tensor, "_rebuild_parameter": _rebuild_parameter,
                   "_rebuild_parameter_with_state": _rebuild_parameter},
  "torch": {"Size": tuple, "device": lambda *a: ":".join(map(str, a)), **{n: n for n in STORAGE_DTYPES}, **{n: TORCH_DTYPES[n] for n in TORCH_DTYPES}},
  "collections": {"OrderedDict": OrderedDict},
  "builtins": {"set": set, "frozenset": frozenset, "slice": slice, "complex": complex},
  "__builtin__": {"set": set, "frozenset": frozenset, "slice": slice, "complex": complex},
}

class _Unpickler(pickle.Unpickler):
  """Builds only the globals torch checkpoints need; a storage reference (persistent id) becomes a Storage."""
  def __init__(self, f: Any, fn: str, storage_ref: Callable[[tuple], Storage]):
    super().__init__(f)
    self.fn, self.storage_ref = fn, storage_ref
  def find_class(self, module: str, name: str) -> Any:
    if name not in _ALLOWED.get(module, {}):
      raise ValueError(f"{self.fn}: refusing to unpickle the global {module}.{name}: torch_load only rebuilds tensors, storages, "
                       "dtypes and plain containers (a checkpoint that pickles other objects must be loaded with torch itself)")
    return _ALLOWED[module][name]
  def persistent_load(self, pid: Any) -> Any:
    if not isinstance(pid, tuple) or len(pid) < 5 or pid[0] != "storage":
      raise ValueError(f"{self.fn}: unknown persistent id {pid!r} (expected ('storage', class, key, location, numel))")
    if not isinstance(pid[1], str) or pid[1] not in STORAGE_DTYPES:
      raise ValueError(f"{self.fn}: storage {pid[2]!r} has type {pid[1]!r}, which torch_load can't read")
    if len(pid) > 5 and pid[5] is not None:
      raise ValueError(f"{self.fn}: storage {pid[2]!r} is a view of another storage (torch < 1.0): re-save the checkpoint with a recent torch")
    return self.storage_ref(pid)

def _unpickle(f: Any, fn: str, storage_ref: Callable[[tuple], Storage] = lambda pid: Storage(str(pid[2]), pid[1], pid[4])) -> Any:
  try: return _Unpickler(f, fn, storage_ref).load()
  except (pickle.UnpicklingError, EOFError, IndexError, KeyError, struct.error, UnicodeDecodeError, AttributeError, TypeError) as e:
    raise ValueError(f"{fn}: malformed PyTorch checkpoint: the pickle can't be read ({type(e).__name__}: {e})") from e

def _memo_storages() -> tuple[dict[str, Storage], Callable[[tuple], Storage]]:
  """Storages by key; tensors that share a storage get the same object."""
  seen: dict[str, Storage] = {}
  def ref(pid: tuple) -> Storage:
    key = str(pid[2])
    if key not in seen: seen[key] = Storage(key, pid[1], int(pid[4]))
    return seen[key]
  return seen, ref

def _storage_array(st: Storage, buf: Any, offset: int, avail: int, big_endian: bool, fn: str) -> Any:
  import numpy as np
  nt = np.dtype(("<" if not big_endian else ">") + st.np_type) if st.np_type != "?" else np.dtype(np.bool_)
  if st.numel * nt.itemsize > avail:
    raise ValueError(f"{fn}: storage {st.key!r} ({st.sname}) needs {st.numel * nt.itemsize} bytes but the file holds {avail} (truncated?)")
  arr = np.frombuffer(buf, dtype=nt, count=st.numel, offset=offset)
  return arr if nt.isnative or nt.itemsize == 1 else arr.astype(nt.newbyteorder("="))

def _zip_member_offset(info: zipfile.ZipInfo, buf: Any, fn: str) -> int:
  """Where a stored (uncompressed) member's bytes start: after its local header, whose name and extra field lengths
  may differ from the central directory's."""
  h = info.header_offset
  if len(buf) < h + 30 or bytes(buf[h:h + 4]) != b"PK\x03\x04": raise ValueError(f"{fn}: zip member {info.filename!r} has a bad local header")
  name_len, extra_len = struct.unpack_from("<HH", buf, h + 26)
  return h + 30 + name_len + extra_len

def _load_zip(buf: Any, fn: str) -> Any:
  try: zf = zipfile.ZipFile(io.BufferedReader(BufferFile(buf)))
  except zipfile.BadZipFile as e: raise ValueError(f"{fn}: malformed PyTorch checkpoint: a broken zip archive ({e})") from e
  names = zf.namelist()
  pkl = [n for n in names if n.endswith("data.pkl") and n.count("/") == 1]
  if not pkl: raise ValueError(f"{fn}: a zip archive without <archive>/data.pkl: not a PyTorch checkpoint")
  prefix = pkl[0][:-len("data.pkl")]
  big_endian = f"{prefix}byteorder" in names and zf.read(f"{prefix}byteorder").strip() == b"big"
  seen, ref = _memo_storages()
  try: obj = _unpickle(io.BytesIO(zf.read(pkl[0])), fn, ref)
  except zipfile.BadZipFile as e: raise ValueError(f"{fn}: malformed PyTorch checkpoint: {pkl[0]} can't be read ({e})") from e
  for st in seen.values():
    member = f"{prefix}data/{st.key}"
    if member not in names: raise ValueError(f"{fn}: storage {st.key!r} is referenced by data.pkl but {member} is missing")
    info = zf.getinfo(member)
    if info.compress_type == zipfile.ZIP_STORED:   # torch stores members uncompressed: view them in place
      start = _zip_member_offset(info, buf, fn)
      st.array = _storage_array(st, buf, start, min(info.file_size, len(buf) - start), big_endian, fn)
    else: st.array = _storage_array(st, zf.read(member), 0, info.file_size, big_endian, fn)
  return obj

def _load_legacy(buf: Any, fn: str) -> Any:
  """magic, protocol version and sys info pickles, the object, the sorted storage keys, then each storage: u64 count, data."""
  f = io.BufferedReader(BufferFile(buf))
  try: magic = _unpickle(f, fn)
  except ValueError as e: raise ValueError(f"{fn}: not a PyTorch checkpoint (neither a zip archive nor a legacy-format pickle)") from e
  if magic != LEGACY_MAGIC: raise ValueError(f"{fn}: not a PyTorch checkpoint: bad magic number {magic!r} in the legacy format")
  protocol, sys_info = _unpickle(f, fn), _unpickle(f, fn)
  if protocol != 1001: raise ValueError(f"{fn}: legacy checkpoint protocol version {protocol!r} is not supported (1001 is)")
  big_endian = isinstance(sys_info, dict) and sys_info.get("little_endian") is False
  seen, ref = _memo_storages()
  obj = _unpickle(f, fn, ref)
  keys = _unpickle(f, fn)
  if not isinstance(keys, list): raise ValueError(f"{fn}: malformed legacy checkpoint: the storage key list is a {type(keys).__name__}")
  pos = f.tell()
  for key in keys:
    if pos + 8 > len(buf): raise ValueError(f"{fn}: storage {key!r}'s element count at offset {pos} is past the end of the file (truncated?)")
    (count,) = struct.unpack_from(">q" if big_endian else "<q", buf, pos)
    st = seen.get(str(key))
    if st is None: raise ValueError(f"{fn}: storage {key!r} is listed but no tensor refers to it")
    if count != st.numel: raise ValueError(f"{fn}: storage {key!r} holds {count} elements but the pickle says {st.numel}")
    st.array = _storage_array(st, buf, pos + 8, len(buf) - pos - 8, big_endian, fn)
    pos += 8 + st.array.nbytes
  if (missing := [k for k, st in seen.items() if st.array is None]): raise ValueError(f"{fn}: storages {missing} are referenced but not stored")
  return obj

def _materialize(obj: Any, fn: str, device: str | None) -> Any:
  """The loaded structure with every PendingTensor made a Tensor (dicts, lists and tuples walked as saved)."""
  import numpy as np
  if isinstance(obj, PendingTensor):
    st = obj.storage
    ints = (*obj.size, *obj.stride, obj.offset)
    if len(obj.size) != len(obj.stride) or not all(isinstance(x, int) and x >= 0 for x in ints):
      raise ValueError(f"{fn}: tensor of shape {obj.size} has bad strides {obj.stride} or offset {obj.offset}")
    last = obj.offset + sum((n - 1) * s for n, s in zip(obj.size, obj.stride)) if prod(obj.size) else obj.offset - 1
    if last >= st.numel:
      raise ValueError(f"{fn}: a tensor of shape {obj.size}, strides {obj.stride}, offset {obj.offset} reads element {last} of "
                       f"storage {st.key!r}, which has {st.numel} (bad offsets)")
    arr = st.array
    view = np.lib.stride_tricks.as_strided(arr[obj.offset:], obj.size, tuple(s * arr.itemsize for s in obj.stride), writeable=False)
    return host_tensor(view, st.dtype, device)   # Tensor() makes the one row-major copy
  if isinstance(obj, dict):
    ret = type(obj)() if type(obj) in (dict, OrderedDict) else {}
    for k, v in obj.items(): ret[k] = _materialize(v, fn, device)
    if hasattr(obj, "__dict__"): ret.__dict__.update(obj.__dict__)   # a state_dict's _metadata rides along
    return ret
  if isinstance(obj, (list, tuple)):
    vals = [_materialize(v, fn, device) for v in obj]
    return vals if isinstance(obj, list) else tuple(vals)
  if isinstance(obj, Storage): raise ValueError(f"{fn}: a bare storage ({obj.key!r}) outside any tensor isn't supported")
  return obj

def torch_load(src: Source, device: str | None = None) -> dict[str, Any]:
  """The object torch.save wrote (usually a state dict: names to Tensors, nested dicts kept as saved), read without torch.

  Reads the zip format (torch >= 1.6) and the legacy format; strides, storage offsets and shared storages are honoured.
  Only tensors, storages, dtypes and plain containers are unpickled: any other global is refused with a ValueError."""
  buf, fn = open_source(src, "PyTorch checkpoint")
  head = bytes(buf[0:4])
  if head[:2] == b"PK": obj = _load_zip(buf, fn)
  elif len(buf) > 262 and bytes(buf[257:262]) == b"ustar":
    raise ValueError(f"{fn}: a tar-format checkpoint (torch < 0.4): re-save it with a recent torch to load it")
  else: obj = _load_legacy(buf, fn)
  return _materialize(obj, fn, device)
