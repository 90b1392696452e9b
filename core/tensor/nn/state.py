"""Model state: walk a model for its tensors (state_dict), load them back, save/load safetensors; torch_load, gguf_load and fetch."""
from __future__ import annotations
import json, os, pathlib, secrets, struct
from collections import OrderedDict
from typing import Any
from core.helpers import prod
from core.ir.dtype import DType, dtypes, to_np
from core.tensor.tensor import Tensor
# other formats live in their own modules; re-exported here, next to safetensors
from core.tensor.nn.torch_load import torch_load as torch_load
from core.tensor.nn.gguf import gguf_load as gguf_load
from core.fetch import fetch as fetch

# *** state_dict ***

def get_state_dict(obj: Any, prefix: str = "") -> dict[str, Tensor]:
  """Every Tensor reachable from `obj` through attributes, dicts, lists, tuples and namedtuples, keyed by its dotted path."""
  if isinstance(obj, Tensor): return {prefix.strip("."): obj}
  if hasattr(obj, "_asdict"): return get_state_dict(obj._asdict(), prefix)  # namedtuple
  if isinstance(obj, (OrderedDict, dict)): items: Any = obj.items()
  elif isinstance(obj, (list, tuple)): items = enumerate(obj)
  elif hasattr(obj, "__dict__"): items = vars(obj).items()
  else: return {}
  ret: dict[str, Tensor] = {}
  for k, v in items: ret.update(get_state_dict(v, f"{prefix}{k}."))
  return ret

def get_parameters(obj: Any) -> list[Tensor]:
  """The distinct tensors of `obj` (a tensor shared by two layers is listed once), in state_dict order."""
  return list({id(t): t for t in get_state_dict(obj).values()}.values())

def load_state_dict(model: Any, state_dict: dict[str, Tensor], strict: bool = True, realize: bool = True) -> None:
  """Copies `state_dict` into the model's tensors (cast to their dtype and moved to their device).

  strict: every model key must be present and no extra key may be given. Nothing is written when a check fails."""
  model_sd = get_state_dict(model)
  missing, unexpected = [k for k in model_sd if k not in state_dict], [k for k in state_dict if k not in model_sd]
  if strict and (missing or unexpected):
    raise KeyError(f"load_state_dict: missing keys {missing}, unexpected keys {unexpected}; pass strict=False to load a subset")
  pairs = [(k, v, state_dict[k]) for k, v in model_sd.items() if k in state_dict]
  for k, v, new in pairs:
    if not isinstance(new, Tensor): raise TypeError(f"load_state_dict: state_dict[{k!r}] is a {type(new).__name__}, not a Tensor")
    if tuple(new.shape) != tuple(v.shape):
      raise ValueError(f"load_state_dict: shape mismatch for {k!r}: the model has {tuple(v.shape)}, the state_dict has {tuple(new.shape)}")
  for _, v, new in pairs:
    if new.device != v.device: new = new.to(v.device)
    v.assign(new.cast(v.dtype) if new.dtype != v.dtype else new)
  if realize and pairs: Tensor.realize(*[v for _, v, _ in pairs])

# *** safetensors: u64 little-endian header length, a JSON header {name: {dtype, shape, data_offsets}}, then the raw data ***

SAFE_DTYPES: dict[str, DType] = {"F64": dtypes.float64, "F32": dtypes.float32, "F16": dtypes.float16, "BF16": dtypes.bfloat16,
  "F8_E4M3": dtypes.fp8e4m3, "F8_E5M2": dtypes.fp8e5m2, "I64": dtypes.int64, "I32": dtypes.int32, "I16": dtypes.int16,
  "I8": dtypes.int8, "U64": dtypes.uint64, "U32": dtypes.uint32, "U16": dtypes.uint16, "U8": dtypes.uint8, "BOOL": dtypes.bool}
_SAFE_NAMES = {v: k for k, v in SAFE_DTYPES.items()}
# dtypes numpy can't hold travel as unsigned ints of the same width and are bitcast on the device
_CARRIER = {dtypes.bfloat16: dtypes.uint16, dtypes.fp8e4m3: dtypes.uint8, dtypes.fp8e5m2: dtypes.uint8}

def _tensor_bytes(t: Tensor) -> bytes:
  if t.dtype in _CARRIER: t = t.bitcast(_CARRIER[t.dtype])
  return t.numpy().astype(to_np(t.dtype).newbyteorder("<"), copy=False).tobytes()

def _umask() -> int:
  mask = os.umask(0)
  os.umask(mask)
  return mask

class _RemoveOnTerm:
  """While a file is being written: a SIGTERM (the default action kills without running finally blocks) first removes the
  temporary file named in `tmp` (once set), then terminates as it would have. Only the main thread can set signal handlers;
  elsewhere it does nothing. Entered before the file is created, so no signal falls between creating and guarding it."""
  def __init__(self) -> None:
    self.tmp: str | None = None
    self.prev: Any = None
  def __enter__(self) -> _RemoveOnTerm:
    import signal, threading
    if threading.current_thread() is threading.main_thread():
      def on_term(signum: int, frame: Any) -> None:
        if self.tmp is not None:
          try: os.unlink(self.tmp)
          except OSError: pass
        signal.signal(signal.SIGTERM, self.prev if self.prev is not None else signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
      self.prev = signal.signal(signal.SIGTERM, on_term)
    return self
  def __exit__(self, *exc: object) -> None:
    import signal
    if self.prev is not None: signal.signal(signal.SIGTERM, self.prev)

def safe_save(tensors: dict[str, Tensor], fn: str | os.PathLike, metadata: dict[str, str] | None = None) -> None:
  """Writes `tensors` to a .safetensors file: into a temporary file first, renamed when complete, so a failure (or a SIGTERM)
  leaves no partial file behind; the file gets the permissions the user's umask gives a new file."""
  header: dict[str, Any] = {}
  chunks: list[bytes] = []
  offset = 0
  for name, t in tensors.items():
    if not isinstance(name, str): raise TypeError(f"safe_save: tensor names must be str, got {name!r}")
    if t.dtype not in _SAFE_NAMES: raise TypeError(f"safe_save: {name!r} has dtype {t.dtype}, which safetensors can't store")
    data = _tensor_bytes(t)
    header[name] = {"dtype": _SAFE_NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
    chunks.append(data)
    offset += len(data)
  if metadata: header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
  hdr = json.dumps(header, separators=(",", ":")).encode()
  hdr += b" " * (-len(hdr) % 8)  # the format pads the header with spaces so the data starts 8-byte aligned
  path = pathlib.Path(fn)
  with _RemoveOnTerm() as guard:
    # named before it exists, so a signal at any point finds the name to remove
    guard.tmp = tmp = str(path.parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
      with os.fdopen(fd, "wb") as f:
        f.write(struct.pack("<Q", len(hdr)) + hdr)
        for c in chunks: f.write(c)
        os.fchmod(f.fileno(), 0o666 & ~_umask())   # created 0600 (nobody reads it half written); a saved model is an ordinary file
      os.replace(tmp, path)
    except BaseException:
      if os.path.exists(tmp): os.unlink(tmp)
      raise

MAX_HEADER = 100 << 20   # bytes of JSON header accepted (real files have kilobytes; a bigger one is damage or an attack)

def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
  keys = [k for k, _ in pairs]
  if len(set(keys)) != len(keys): raise ValueError(f"duplicate names {sorted({k for k in keys if keys.count(k) > 1})}")
  return dict(pairs)

def safe_load_metadata(fn: str | os.PathLike) -> tuple[dict[str, Any], int]:
  """(the parsed JSON header, the file offset where tensor data starts); a malformed header raises ValueError saying what."""
  with open(fn, "rb") as f:
    head = f.read(8)
    if len(head) != 8: raise ValueError(f"{fn}: not a safetensors file (shorter than the 8-byte header length)")
    (n,) = struct.unpack("<Q", head)
    size = os.fstat(f.fileno()).st_size
    if n > size - 8: raise ValueError(f"{fn}: header length {n} runs past the end of the {size}-byte file")
    if n > MAX_HEADER: raise ValueError(f"{fn}: a {n}-byte header is more than the {MAX_HEADER} bytes accepted")
    try: header = json.loads(f.read(n), object_pairs_hook=_no_duplicates)
    except (UnicodeDecodeError, json.JSONDecodeError) as e: raise ValueError(f"{fn}: the safetensors header is not valid JSON: {e}") from e
    except RecursionError: raise ValueError(f"{fn}: the safetensors header nests too deeply") from None
    except ValueError as e: raise ValueError(f"{fn}: the safetensors header has {e}") from None
  if not isinstance(header, dict): raise ValueError(f"{fn}: the safetensors header must be a JSON object")
  return header, 8 + n

def _entries(fn: Any, header: dict[str, Any], data_size: int) -> list[tuple[str, DType, tuple[int, ...], int, int]]:
  """(name, dtype, shape, begin, end) of every tensor, each field checked, sorted by offset with no overlaps."""
  out = []
  for name, info in header.items():
    if name == "__metadata__":
      if not isinstance(info, dict) or not all(isinstance(v, str) for v in info.values()):
        raise ValueError(f"{fn}: __metadata__ must map names to strings")
      continue
    if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
      raise ValueError(f"{fn}: tensor {name!r} must have exactly dtype, shape and data_offsets, got {info!r}"[:300])
    dt, shape, offs = info["dtype"], info["shape"], info["data_offsets"]
    if not isinstance(dt, str) or dt not in SAFE_DTYPES: raise ValueError(f"{fn}: tensor {name!r} has unknown dtype {dt!r}")
    if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
      raise ValueError(f"{fn}: tensor {name!r} has shape {shape!r}, not a list of non-negative ints")
    if not isinstance(offs, list) or len(offs) != 2 or not all(type(o) is int for o in offs):
      raise ValueError(f"{fn}: tensor {name!r} has data_offsets {offs!r}, not [begin, end]")
    dtype, (begin, end) = SAFE_DTYPES[dt], offs
    if not 0 <= begin <= end <= data_size or end - begin != prod(shape) * dtype.itemsize:
      raise ValueError(f"{fn}: tensor {name!r} ({dt} {shape}) has data_offsets {offs} that don't fit its size "
                       f"or the {data_size}-byte data section")
    out.append((name, dtype, tuple(shape), begin, end))
  by_offset = sorted(out, key=lambda e: (e[3], e[4]))
  for a, b in zip(by_offset, by_offset[1:]):
    if b[3] < a[4]: raise ValueError(f"{fn}: tensors {a[0]!r} and {b[0]!r} overlap (bytes {a[3]}-{a[4]} and {b[3]}-{b[4]})")
  return out

def safe_load(fn: str | os.PathLike, device: str | None = None) -> dict[str, Tensor]:
  """Reads a .safetensors file into a dict of tensors on `device` (the default device when None). The file is read through
  the DISK device: each tensor's bytes go from the file straight into its device buffer (pread, no mapping and no staging
  copy), so loading holds the tensors' memory and not the file's as well. `device="disk:<fn>"` returns the views of the file
  itself, read only when moved elsewhere."""
  import numpy as np
  from core.tensor.tensor import canonical_device
  from core.tensor.disk import disk_view
  header, start = safe_load_metadata(fn)
  dev = canonical_device(device)
  size = os.path.getsize(fn)
  entries = _entries(fn, header, size - start)
  if size == 0 or not entries: return {name: Tensor.empty(*shape, dtype=dtype, device=dev) for name, dtype, shape, _, _ in entries}
  disk = Tensor.empty(size, dtype=dtypes.uint8, device=f"disk:{os.fspath(fn)}", requires_grad=False)
  ret: dict[str, Tensor] = {}
  for name, dtype, shape, begin, end in entries:
    carrier = _CARRIER.get(dtype, dtype)
    if not prod(shape):
      ret[name] = Tensor.empty(*shape, dtype=dtype, device=dev, requires_grad=False)
      continue
    view = disk_view(disk[start + begin:start + end].uop, carrier)
    assert view is not None, "a byte range of a file is always one run"
    t = Tensor(view.reshape(shape), requires_grad=False)
    if dev.startswith("DISK:"):
      ret[name] = t
      continue
    if not np.little_endian and carrier.itemsize > 1:   # the file is little-endian: swap on the host
      t = Tensor(np.frombuffer(t.data(), dtype=to_np(carrier).newbyteorder("<")).astype(to_np(carrier)).reshape(shape), device=dev)
    t = t.to(dev).realize()
    ret[name] = t.bitcast(dtype) if carrier is not dtype else t
  return ret
