"""Model state: walk a model for its tensors (state_dict), load them back, save/load safetensors; torch_load, gguf_load and fetch."""
from __future__ import annotations
import json, os, pathlib, struct, tempfile
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

def safe_save(tensors: dict[str, Tensor], fn: str | os.PathLike, metadata: dict[str, str] | None = None) -> None:
  """Writes `tensors` to a .safetensors file; written to a temporary file first and renamed, so a failure leaves no partial file."""
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
  fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
  try:
    with os.fdopen(fd, "wb") as f:
      f.write(struct.pack("<Q", len(hdr)) + hdr)
      for c in chunks: f.write(c)
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp): os.unlink(tmp)
    raise

def safe_load_metadata(fn: str | os.PathLike) -> tuple[dict[str, Any], int]:
  """(the parsed JSON header, the file offset where tensor data starts)."""
  with open(fn, "rb") as f:
    head = f.read(8)
    if len(head) != 8: raise ValueError(f"{fn}: not a safetensors file (shorter than the 8-byte header length)")
    (n,) = struct.unpack("<Q", head)
    size = os.fstat(f.fileno()).st_size
    if n > size - 8: raise ValueError(f"{fn}: header length {n} runs past the end of the {size}-byte file")
    try: header = json.loads(f.read(n))
    except (UnicodeDecodeError, json.JSONDecodeError) as e: raise ValueError(f"{fn}: the safetensors header is not valid JSON: {e}") from e
  if not isinstance(header, dict): raise ValueError(f"{fn}: the safetensors header must be a JSON object")
  return header, 8 + n

def safe_load(fn: str | os.PathLike, device: str | None = None) -> dict[str, Tensor]:
  """Reads a .safetensors file into a dict of tensors on `device` (the default device when None)."""
  import numpy as np
  header, start = safe_load_metadata(fn)
  raw = pathlib.Path(fn).read_bytes()[start:]
  ret: dict[str, Tensor] = {}
  for name, info in header.items():
    if name == "__metadata__": continue
    if info.get("dtype") not in SAFE_DTYPES: raise ValueError(f"{fn}: tensor {name!r} has unknown dtype {info.get('dtype')!r}")
    dtype, shape, (begin, end) = SAFE_DTYPES[info["dtype"]], tuple(info["shape"]), info["data_offsets"]
    if not 0 <= begin <= end <= len(raw) or end - begin != prod(shape) * dtype.itemsize:
      raise ValueError(f"{fn}: tensor {name!r} ({info['dtype']} {list(shape)}) has data_offsets {[begin, end]} that don't fit its size "
                       f"or the {len(raw)}-byte data section")
    carrier = _CARRIER.get(dtype, dtype)
    arr = np.frombuffer(raw, dtype=to_np(carrier).newbyteorder("<"), count=prod(shape), offset=begin).astype(to_np(carrier)).reshape(shape)
    t = Tensor(arr, device=device, requires_grad=False)
    ret[name] = t.bitcast(dtype) if carrier is not dtype else t
  return ret
