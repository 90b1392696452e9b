"""The VIZ web page on 127.0.0.1: kernels, their rewrite passes, each pass's graph before and after and the rules that fired.
JSON endpoints: /api/kernels, /api/kernel/<k> (its passes), /api/graph/<k>/<pass>/<before|after> (nodes and edges)."""
from __future__ import annotations
import http.server, json, os, pathlib, threading
from typing import Any
from core.ir.rewrite_log import groups

PAGE = pathlib.Path(__file__).with_name("page.html")
MAX_NODES = 3000   # a bigger graph is cut (the page says so): a browser lays out a few thousand boxes, not a whole model

def graph_json(sink: Any) -> dict[str, Any]:
  """{nodes: [{id, op, dtype, arg, src: [ids]}], truncated}: the graph under `sink`, sources before users."""
  nodes = list(sink.toposort()) if hasattr(sink, "toposort") else []
  cut = len(nodes) > MAX_NODES
  nodes = nodes[-MAX_NODES:]
  ids = {u: i for i, u in enumerate(nodes)}
  return {"nodes": [{"id": i, "op": u.op.name, "dtype": str(u.dtype), "arg": repr(u.arg)[:80], "src": [ids[s] for s in u.src if s in ids]}
                    for i, u in enumerate(nodes)], "truncated": cut}

def api(path: str) -> Any:
  parts = [p for p in path.split("/") if p][1:]
  if parts == ["kernels"]: return [{"id": k, "name": g.name, "passes": len(g.steps)} for k, g in enumerate(groups)]
  if len(parts) == 2 and parts[0] == "kernel":
    g = groups[int(parts[1])]
    return [{"id": i, "name": s.name, "fired": s.fired, "rewrites": sum(s.fired.values())} for i, s in enumerate(g.steps)]
  if len(parts) == 4 and parts[0] == "graph" and parts[3] in ("before", "after"):
    step = groups[int(parts[1])].steps[int(parts[2])]
    return graph_json(step.before if parts[3] == "before" else step.after)
  raise KeyError(path)

class Handler(http.server.BaseHTTPRequestHandler):
  def do_GET(self) -> None:
    try:
      if self.path in ("/", "/index.html"): body, ctype = PAGE.read_bytes(), "text/html; charset=utf-8"
      elif self.path.startswith("/api/"): body, ctype = json.dumps(api(self.path)).encode(), "application/json"
      else: raise KeyError(self.path)
    except (KeyError, IndexError, ValueError):
      self.send_error(404, f"no such page: {self.path}")
      return
    self.send_response(200)
    self.send_header("Content-Type", ctype)
    self.send_header("Content-Length", str(len(body)))
    self.end_headers()
    self.wfile.write(body)
  def log_message(self, *args: Any) -> None: pass   # quiet: the page polls nothing, but a console full of GETs helps no one

def serve(port: int = 0) -> http.server.ThreadingHTTPServer:
  """Serves the page from a daemon thread on 127.0.0.1 (`port` 0: a free one); `server.server_address` has the port."""
  srv = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
  threading.Thread(target=srv.serve_forever, daemon=True, name="core-viz").start()
  return srv

_at_exit = False

def serve_at_exit() -> None:
  """Serves the page when the process ends (once), if the user asked with the environment variable VIZ: a Context(VIZ=1)
  block (a test) records without serving."""
  global _at_exit
  if _at_exit or os.environ.get("VIZ", "0") in ("", "0"): return
  _at_exit = True
  import atexit
  atexit.register(serve_forever)

def serve_forever() -> None:
  """At exit of a VIZ=1 run: serve on VIZ_PORT (default 8000) until Ctrl-C."""
  if not groups: return
  srv = http.server.ThreadingHTTPServer(("127.0.0.1", int(os.environ.get("VIZ_PORT", "8000"))), Handler)
  print(f"*** VIZ: {len(groups)} kernels and their rewrites at http://127.0.0.1:{srv.server_address[1]}/ (Ctrl-C to stop)", flush=True)
  try: srv.serve_forever()
  except KeyboardInterrupt: pass
  finally: srv.server_close()
