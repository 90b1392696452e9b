"""The distributions that declare entry points in one group, found by reading their dist-info folders on sys.path directly.

Why not importlib.metadata: importing it (or its backport) costs about 20 ms of CPU, more than the rest of plugin discovery,
and each process that makes a Tensor pays it. The layout read here is the installed-package format (a `NAME-VERSION.dist-info`
or `.egg-info` folder holding `entry_points.txt`, an INI file whose sections are groups and whose lines are
`name = module:attr`, and METADATA/PKG-INFO whose first headers include Name and Version). Anything else on sys.path (a zip
or egg file) returns None, and the caller asks importlib.metadata, which handles every format."""
from __future__ import annotations
import os, sys
from typing import NamedTuple
from core.helpers import file_stamp, stamp_settled, stamped

class EntryPoint(NamedTuple):   # a NamedTuple: a quarter of a frozen dataclass's cost to create at import
  name: str
  value: str
  group: str

def _read(folder: str, filename: str) -> str | None:
  try:
    with open(os.path.join(folder, filename), encoding="utf-8") as f: return f.read()
  except OSError: return None

class FoundDistribution(NamedTuple):   # a NamedTuple, like EntryPoint
  """What plugin discovery reads of a distribution: its entry points, Name and Version (importlib.metadata's names)."""
  path: str
  entry_points: list[EntryPoint]
  name: str | None
  version: str | None

def parse_entry_points(text: str) -> list[EntryPoint]:
  eps, group = [], None
  for raw in text.splitlines():
    line = raw.strip()
    if not line or line.startswith(("#", ";")): continue
    if line.startswith("[") and line.endswith("]"): group = line[1:-1]   # not stripped: importlib.metadata keeps the spaces
    elif group is not None and "=" in line:
      name, _, value = line.partition("=")
      eps.append(EntryPoint(name.strip(), value.strip(), group))
  return eps

def metadata_head(text: str) -> dict[str, str]:
  """Name and Version from a METADATA/PKG-INFO text: the headers come first, before the first blank line."""
  head: dict[str, str] = {}
  for line in text.splitlines():
    if not line.strip(): break
    key, sep, val = line.partition(":")
    if sep and key in ("Name", "Version"): head.setdefault(key, val.strip())
  return head

def distributions_with_group(group: str, path: list[str] | None = None) -> list[FoundDistribution] | None:
  """Every distribution on `path` (sys.path) whose entry_points.txt has section `group`, in sys.path order; None when some
  entry of the path is not a plain folder (the caller then uses importlib.metadata). Kept in the cache folder while no entry
  of the path has changed (core.helpers.stamped): installing or removing a distribution adds or deletes its dist-info folder,
  which changes its parent's times (pip replaces the folder on an upgrade or reinstall, editable or not); an entry_points.txt
  written in place changes only its own, so every dist-info folder's entry_points.txt is stamped as well (~90 stats here)."""
  entries = sys.path if path is None else path
  folders = [os.path.abspath(entry or ".") for entry in entries]
  if any(os.path.exists(f) and not os.path.isdir(f) for f in folders): return None   # a zip or egg file
  # named by the entries as given too: a relative entry's distributions keep relative paths; "2": the entries with file stamps
  return stamped("entry_points", "\n".join(["2", group, *entries]), folders, lambda: _scan(group, entries), _dump, _load).found

class _Scan(NamedTuple):
  found: list[FoundDistribution]
  files: list[tuple[str, str]]   # (every entry_points.txt path scanned, its file_stamp before it was read; "-": none there)

def _dump(scan: _Scan) -> list[str] | None:
  if not all(stamp_settled(stamp) for _, stamp in scan.files): return None   # one written in the last tick: not kept
  lines = ["\t".join(["F", path, stamp, ""]) for path, stamp in scan.files]
  for d in scan.found:
    lines.append("\t".join(["D", d.path, "?" if d.name is None else "=" + d.name, "?" if d.version is None else "=" + d.version]))
    lines += ["\t".join(["E", *ep]) for ep in d.entry_points]
  return None if any(line.count("\t") != 3 for line in lines) else lines   # a tab in a field would not read back

def _load(lines: list[str]) -> _Scan | None:
  scan = _Scan([], [])
  found = scan.found
  for line in lines:
    f = line.split("\t")
    if f[0] == "F" and len(f) == 4:
      if file_stamp(f[1]) != f[2]: return None   # an entry_points.txt written, added or removed: scanned again
    elif f[0] == "D" and len(f) == 4: found.append(FoundDistribution(f[1], [], _opt(f[2]), _opt(f[3])))
    elif f[0] == "E" and len(f) == 4 and found: found[-1].entry_points.append(EntryPoint(f[1], f[2], f[3]))
    elif line: return None   # damaged: scanned again
  return scan

def _opt(field: str) -> str | None: return None if field == "?" else field[1:]

def _scan(group: str, entries: list[str]) -> _Scan:
  scan = _Scan([], [])
  for entry in entries:
    folder = entry or "."
    try:
      if not os.path.isdir(folder): continue
      names = sorted(os.listdir(folder))
    except OSError: continue
    for n in names:
      if not n.endswith((".dist-info", ".egg-info")): continue
      d = os.path.join(folder, n)
      scan.files.append((eps_path := os.path.join(d, "entry_points.txt"), file_stamp(eps_path)))
      try:
        with open(eps_path, encoding="utf-8") as f: text = f.read()
      except OSError: continue   # no entry points (or an egg-info file, not a folder)
      if f"[{group}]" not in text: continue
      eps = [ep for ep in parse_entry_points(text) if ep.group == group]
      head = metadata_head(_read(d, "METADATA") or _read(d, "PKG-INFO") or "")
      scan.found.append(FoundDistribution(d, eps, head.get("Name"), head.get("Version")))
  return scan
