"""The DEV grammar: `[INTERFACE[:INDICES]+]DEVICE[:RENDERER[:ARCH]]`, several targets separated by `;`. The NULL device's
RENDERER may name a device's renderer as DEVICE:RENDERER (`NULL:NV:CUDA:sm_90`): its `renderer` is then "NV:CUDA"."""
from __future__ import annotations
from core.helpers import frozen_record

GRAMMAR = ("[INTERFACE[:INDICES]+]DEVICE[:RENDERER[:ARCH]], several separated by ';' (e.g. CPU, CPU:LLVM, NV:PTX:sm_90, KFD:0,1+AMD); "
           "NULL[:DEVICE][:RENDERER][:ARCH] compiles only (NULL:NV:PTX:sm_90); DISK:<path> is a file")

# names by str methods, not regular expressions: compiling the two patterns was ~0.4M instructions of every start
def _is_name(s: str) -> bool: return s.isascii() and s.isidentifier()   # [A-Za-z_][A-Za-z0-9_]*
def _is_arch(s: str) -> bool: return s != "" and s.isascii() and all(c.isalnum() or c in "_.-" for c in s)

@frozen_record
class Target:
  """One DEV entry. `renderer`/`interface` None mean the plugin's default; `indices` () means all instances."""
  interface: str | None = None
  indices: tuple[int, ...] = ()
  device: str = ""
  renderer: str | None = None
  arch: str | None = None
  path: str | None = None   # DISK's file: DISK:<path> (the path taken whole, ':' and '/' included)

  def __post_init__(self) -> None:
    if not self.device: raise ValueError("a Target needs a device name")

  def __str__(self) -> str:
    head = "" if self.interface is None else self.interface + (":" + ",".join(map(str, self.indices)) if self.indices else "") + "+"
    tail = "" if self.renderer is None else ":" + self.renderer + ("" if self.arch is None else ":" + self.arch)
    if self.path is not None: tail = ":" + self.path
    return head + self.device + tail

class DevSyntaxError(ValueError):
  """A DEV string that does not follow the grammar."""

def _name(s: str, what: str, whole: str) -> str:
  if not _is_name(s): raise DevSyntaxError(f"DEV={whole!r}: {what} {s!r} is not a name; the grammar is {GRAMMAR}")
  return s.upper()

def parse_target(s: str) -> Target:
  """Parses one DEV entry; names are case-insensitive (stored upper case), ARCH keeps its case (sm_90, gfx1100)."""
  whole, s = s, s.strip()
  interface = None
  indices: tuple[int, ...] = ()
  if "+" in s:
    iface, s = s.split("+", 1)
    if "+" in s: raise DevSyntaxError(f"DEV={whole!r}: at most one INTERFACE+ prefix; the grammar is {GRAMMAR}")
    iname, _, idx = iface.partition(":")
    interface = _name(iname, "interface", whole)
    if idx:
      try: indices = tuple(int(i) for i in idx.split(","))
      except ValueError: raise DevSyntaxError(f"DEV={whole!r}: indices {idx!r} must be integers like 0,1; the grammar is {GRAMMAR}") from None
      if any(i < 0 for i in indices): raise DevSyntaxError(f"DEV={whole!r}: indices must be >= 0")
  parts = s.split(":")
  device = _name(parts[0], "device", whole)
  # DISK:<path>: a file, not a renderer; the path keeps its case and any ':' in it (C:\x, /a:b)
  if device == "DISK" and len(parts) > 1: return Target(interface, indices, device, path=s.split(":", 1)[1])
  # NULL:DEVICE:RENDERER:ARCH: the renderer of a device, named by both
  if device == "NULL" and len(parts) == 4: parts = [parts[0], _name(parts[1], "device", whole) + ":" + _name(parts[2], "renderer", whole), parts[3]]
  elif len(parts) > 3: raise DevSyntaxError(f"DEV={whole!r}: too many ':' parts; the grammar is {GRAMMAR}")
  renderer = (parts[1] if ":" in parts[1] else _name(parts[1], "renderer", whole)) if len(parts) > 1 else None
  arch = None
  if len(parts) > 2:
    if not _is_arch(parts[2]): raise DevSyntaxError(f"DEV={whole!r}: arch {parts[2]!r} is not a name; the grammar is {GRAMMAR}")
    arch = parts[2]
  return Target(interface, indices, device, renderer, arch)

def parse_dev(s: str) -> list[Target]:
  """Parses a whole DEV value into its targets, in order (the first is the default device)."""
  entries = [e for e in s.split(";") if e.strip()]
  if not entries: raise DevSyntaxError(f"DEV={s!r} names no device; the grammar is {GRAMMAR}")
  return [parse_target(e) for e in entries]
