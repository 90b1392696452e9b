"""Print a UOp graph as Python that evaluates back to the same UOp (shared nodes bound with `:=`)."""
from __future__ import annotations
import math
from typing import Any

def _fmt_arg(a: Any) -> str:
  if isinstance(a, float):
    if math.isnan(a): return "float('nan')"
    if math.isinf(a): return "float('inf')" if a > 0 else "float('-inf')"
    return repr(a)
  if isinstance(a, tuple): return "(" + "".join(_fmt_arg(x) + ", " for x in a)[:-2] + ("," if len(a) == 1 else "") + ")" if a else "()"
  return repr(a)

def uop_to_python(root: Any) -> str:
  """Nested `UOp(...)` calls; nodes used more than once are named `x<n>` at first use and referenced after."""
  order = list(root.toposort())
  users: dict[Any, int] = {}
  for u in order:
    for s in u.src: users[s] = users.get(s, 0) + 1
  names: dict[Any, str] = {}
  text: dict[Any, str] = {}
  for u in order:
    parts = [repr(u.op), repr(u.dtype)]
    if u.src:
      srcs = []
      for s in u.src:
        if s in names:
          if text[s] is None: srcs.append(names[s])
          else: srcs.append(f"({names[s]}:={text[s]})"); text[s] = None  # type: ignore[assignment]
        else: srcs.append(text[s])
      parts.append("src=(" + "".join(x + ", " for x in srcs)[:-2] + ("," if len(srcs) == 1 else "") + ")")
    if u.arg is not None: parts.append(f"arg={_fmt_arg(u.arg)}")
    if u.tag is not None: parts.append(f"tag={_fmt_arg(u.tag)}")
    text[u] = "UOp(" + ", ".join(parts) + ")"
    if users.get(u, 0) > 1: names[u] = f"x{len(names)}"
  return text[root]

def eval_uop(src: str) -> Any:
  """Evaluate text printed by `uop_to_python`."""
  from core.ir.ops import UOp, Ops, AxisType
  from core.ir.dtype import dtypes, AddrSpace
  return eval(src, {"UOp": UOp, "Ops": Ops, "AxisType": AxisType, "dtypes": dtypes, "AddrSpace": AddrSpace})
