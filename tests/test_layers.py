"""Core's folders are layers: every import between them, function-local ones included, goes one way, so no import circle
hides behind a deferred import. The engine runs schedules and knows nothing of Tensor (the Jit lives in core/tensor)."""
from __future__ import annotations
import ast, pathlib

CORE = pathlib.Path(__file__).resolve().parent.parent / "core"

def folder_imports() -> dict[tuple[str, str], list[str]]:
  """{(importing folder, imported folder): [file:line, ...]} over every .py file in core (testing excluded: it tests all)."""
  folders = {p.name for p in CORE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
  out: dict[tuple[str, str], list[str]] = {}
  for f in CORE.rglob("*.py"):
    rel = f.relative_to(CORE).parts
    src = rel[0] if len(rel) > 1 else None
    if src is None or src == "testing": continue
    for node in ast.walk(ast.parse(f.read_text())):
      mods = [node.module] if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 else \
             [a.name for a in node.names] if isinstance(node, ast.Import) else []
      for m in mods:
        parts = m.split(".")
        if parts[0] == "core" and len(parts) > 1 and parts[1] in folders and parts[1] != src:
          out.setdefault((src, parts[1]), []).append(f"{f.relative_to(CORE.parent)}:{node.lineno}")
  return out

def test_no_two_folders_import_each_other():
  edges = folder_imports()
  graph: dict[str, set[str]] = {}
  for a, b in edges: graph.setdefault(a, set()).add(b)
  # a depth-first search for a cycle; report it with the lines that close it
  state: dict[str, int] = {}
  def visit(n: str, path: list[str]) -> None:
    state[n] = 1
    for m in sorted(graph.get(n, ())):
      if state.get(m) == 1:
        cyc = path[path.index(m):] + [n, m] if m in path else [n, m]
        raise AssertionError("import circle " + " -> ".join(cyc) + ": " + "; ".join(f"{a}->{b} at {edges[(a, b)][0]}" for a, b in zip(cyc, cyc[1:])))
      if state.get(m) is None: visit(m, path + [n])
    state[n] = 2
  for n in sorted(graph): 
    if state.get(n) is None: visit(n, [])

def test_the_engine_does_not_know_tensor():
  assert ("engine", "tensor") not in folder_imports(), folder_imports()[("engine", "tensor")]
