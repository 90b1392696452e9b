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
  # Python evaluates left to right, so a shared node is bound with `:=` where it first appears in the printed text:
  # walk the text order (pre-order, sources left to right, each shared node expanded once) to find that place
  first_use: dict[Any, tuple[Any, int]] = {}
  names: dict[Any, str] = {}
  seen: set[int] = set()
  walk: list[tuple[Any, int]] = [(root, 0)]
  while walk:
    u, i = walk.pop()
    if i >= len(u.src): continue
    walk.append((u, i + 1))
    s = u.src[i]
    if users[s] > 1:
      if id(s) in seen: continue
      seen.add(id(s))
      first_use[s] = (u, i)
      names[s] = f"x{len(names)}"
    walk.append((s, 0))
  text: dict[Any, str] = {}
  for u in order:
    parts = [repr(u.op), repr(u.dtype)]
    if u.src:
      srcs = []
      for i, s in enumerate(u.src):
        if s not in names: srcs.append(text[s])
        elif first_use[s] == (u, i): srcs.append(f"({names[s]}:={text[s]})")
        else: srcs.append(names[s])
      parts.append("src=(" + "".join(x + ", " for x in srcs)[:-2] + ("," if len(srcs) == 1 else "") + ")")
    if u.arg is not None: parts.append(f"arg={_fmt_arg(u.arg)}")
    if u.tag is not None: parts.append(f"tag={_fmt_arg(u.tag)}")
    text[u] = "UOp(" + ", ".join(parts) + ")"
  return text[root]

def eval_uop(src: str) -> Any:
  """Evaluate text printed by `uop_to_python`."""
  from core.ir.ops import UOp, Ops, AxisType
  from core.ir.dtype import dtypes, AddrSpace
  return eval(src, {"UOp": UOp, "Ops": Ops, "AxisType": AxisType, "dtypes": dtypes, "AddrSpace": AddrSpace})
