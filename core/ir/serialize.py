"""UOp graphs as JSON-able data and back, with no eval and no pickle: a compiled file keeps the linearized program a device's
command-queue pipeline reads (core/engine/export.py). Args may be None, bool, int, float, str, tuples of those and the IR's
enums; dtypes are scalars, vectors and pointers. Anything else is refused when writing, and a damaged list when reading."""
from __future__ import annotations
import enum
from typing import Any
from core.ir.dtype import AddrSpace, DType, PtrDType, dtypes
from core.ir.ops import UOp, Ops, AxisType

_ENUMS: dict[str, Any] = {"AxisType": AxisType, "AddrSpace": AddrSpace}

def _member(cls: Any, name: Any) -> Any:
  """cls's member called `name`, else None (read with getattr: core.helpers.fast_members makes some enum classes plain namespaces)."""
  v = getattr(cls, name, None) if isinstance(name, str) and not name.startswith("_") else None
  return v if isinstance(v, enum.Enum) and v.name == name else None

class SerializeError(ValueError):
  """A UOp graph that can't be written as data (an arg type outside the safe set), or data that is not such a graph."""

def _arg(a: Any) -> Any:
  if a is None or isinstance(a, (bool, int, float, str)) and not isinstance(a, enum.Enum): return a
  if isinstance(a, tuple): return {"t": [_arg(x) for x in a]}
  if isinstance(a, enum.Enum) and _member(_ENUMS.get(type(a).__name__), a.name) is a: return {"e": type(a).__name__, "v": a.name}
  raise SerializeError(f"can't serialize an arg of type {type(a).__name__} ({a!r})")

def _dtype(d: DType) -> Any:
  if isinstance(d, PtrDType): return {"p": _dtype(d.base), "size": d.size, "as": d.addrspace.name, "v": d.v}
  return [d.scalar().name, d.count]

def uops_to_data(uops: list[UOp]) -> list[list[Any]]:
  """[[op name, dtype, [source indices], arg, tag], ...] for `uops` and everything they reach, sources before users."""
  order: dict[UOp, int] = {}
  for root in uops:
    for u in root.toposort():
      if u not in order: order[u] = len(order)
  return [[u.op.name, _dtype(u.dtype), [order[s] for s in u.src], _arg(u.arg), _arg(u.tag)] for u in order]

def _bad(msg: str) -> SerializeError: return SerializeError(f"malformed UOp data: {msg}")

def _read_arg(a: Any) -> Any:
  if a is None or isinstance(a, (bool, int, float, str)): return a
  if isinstance(a, dict) and isinstance(a.get("t"), list): return tuple(_read_arg(x) for x in a["t"])
  if isinstance(a, dict) and (m := _member(_ENUMS.get(a.get("e", "")), a.get("v"))) is not None: return m
  raise _bad(f"arg {a!r}")

def _read_dtype(d: Any) -> DType:
  if isinstance(d, list) and len(d) == 2 and isinstance(d[0], str) and isinstance(d[1], int) and d[1] >= 1:
    # void and index are no storage types, so dtypes.fields() leaves them out
    if (base := dtypes.fields().get(d[0]) or {"void": dtypes.void, "index": dtypes.index}.get(d[0])) is None: raise _bad(f"unknown dtype {d[0]!r}")
    return base.vec(d[1]) if d[1] > 1 else base
  if isinstance(d, dict) and isinstance(d.get("size"), int) and (space := _member(AddrSpace, d.get("as"))) is not None and isinstance(d.get("v"), int):
    p = _read_dtype(d.get("p")).ptr(d["size"], space)
    return p.vec(d["v"]) if d["v"] > 1 else p
  raise _bad(f"dtype {d!r}")

def uops_from_data(data: Any) -> list[UOp]:
  """The UOps `uops_to_data` wrote, in its order (hash-consing makes them the same nodes as the originals)."""
  if not isinstance(data, list): raise _bad("not a list")
  out: list[UOp] = []
  for i, row in enumerate(data):
    if not (isinstance(row, list) and len(row) == 5 and isinstance(row[0], str) and isinstance(row[2], list)): raise _bad(f"row {i}")
    if (op := _member(Ops, row[0])) is None: raise _bad(f"row {i}: unknown op {row[0]!r}")
    if not all(isinstance(s, int) and not isinstance(s, bool) and 0 <= s < i for s in row[2]): raise _bad(f"row {i}: sources must come before it")
    out.append(UOp(op, _read_dtype(row[1]), tuple(out[s] for s in row[2]), _read_arg(row[3]), _read_arg(row[4])))
  return out
