"""VIZ=1: each kernel's rewrite passes recorded with their graphs and fired rules, served on 127.0.0.1, and the page tested in
headless Chromium (Debian's chromium, driven over the DevTools protocol on a pipe): click a kernel, click a pass, check
what is drawn against the server's own JSON."""
from __future__ import annotations
import json, os, shutil, subprocess, sys, time, urllib.request
from typing import Any
import pytest
from core.testing.helpers import missing_tool
from core import Tensor
from core.ir import rewrite_log as viz
from core.helpers import Context
from core.viz.server import serve

@pytest.fixture(scope="module")
def server() -> Any:
  viz.clear()
  with Context(VIZ=1): (Tensor([1.0, 2, 3, 4], device="PYTHON") * 2 + 1).sum().realize()
  srv = serve(0)
  yield f"http://127.0.0.1:{srv.server_address[1]}"
  srv.shutdown()
  viz.clear()

def get(url: str) -> Any: return json.load(urllib.request.urlopen(url, timeout=30))

def test_rewrites_are_recorded_per_kernel_with_rules_and_graphs(server):
  ks = get(f"{server}/api/kernels")
  kernels = [k for k in ks if k["name"] != "schedule"]
  assert kernels and kernels[0]["name"].endswith("(PYTHON)") and kernels[0]["passes"] >= 1
  passes = get(f"{server}/api/kernel/{kernels[0]['id']}")
  fired = [p for p in passes if p["rewrites"]]
  assert fired and all(sum(p["fired"].values()) == p["rewrites"] for p in passes)
  assert all(":" in rule for p in fired for rule in p["fired"])   # file:line of the rule's function
  p = fired[0]
  before, after = (get(f"{server}/api/graph/{kernels[0]['id']}/{p['id']}/{w}") for w in ("before", "after"))
  assert before["nodes"] and after["nodes"] and before != after   # a pass whose rules fired changed the graph
  last = after["nodes"][-1]
  assert all(s < last["id"] for s in last["src"])                 # sources come before their users

def test_unknown_pages_are_404(server):
  with pytest.raises(urllib.error.HTTPError, match="404"): urllib.request.urlopen(f"{server}/api/kernel/999")

def test_an_env_var_run_serves_at_exit(tmp_path):
  # VIZ=1 from the environment: the process serves the page at exit (here on a free port, stopped by the test)
  code = "from core import Tensor; (Tensor([1.0, 2], device='PYTHON') + 1).realize()"
  env = {**os.environ, "VIZ": "1", "VIZ_PORT": "0"}
  p = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
  try:
    line = p.stdout.readline() if p.stdout else ""
    assert "*** VIZ:" in line and "http://127.0.0.1:" in line, line
    url = line.split("at ")[1].split()[0]
    assert get(f"{url}api/kernels")
  finally:
    p.terminate()
    p.wait(timeout=30)

class Chromium:
  """Headless Chromium over --remote-debugging-pipe: DevTools messages, NUL-terminated JSON, on fds 3 (in) and 4 (out)."""
  def __init__(self, exe: str):
    r_in, self.w_in = os.pipe()
    self.r_out, w_out = os.pipe()
    os.set_inheritable(r_in, True)
    os.set_inheritable(w_out, True)
    # the child's fds 3 and 4 are the pipe ends (dup2 in the child before exec)
    def fds() -> None:
      os.dup2(r_in, 3)
      os.dup2(w_out, 4)
    self.proc = subprocess.Popen([exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe", "--no-first-run",
                                  f"--user-data-dir={os.environ.get('TMPDIR', '/tmp')}/core-viz-chromium-{os.getpid()}", "about:blank"],
                                 preexec_fn=fds, pass_fds=(3, 4), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.close(r_in)
    os.close(w_out)
    self.buf, self.next_id, self.session = b"", 0, None
  def send(self, method: str, **params: Any) -> Any:
    self.next_id += 1
    msg: dict[str, Any] = {"id": self.next_id, "method": method, "params": params}
    if self.session is not None and not method.startswith("Target."): msg["sessionId"] = self.session
    os.write(self.w_in, json.dumps(msg).encode() + b"\0")
    while True:
      while b"\0" not in self.buf:
        chunk = os.read(self.r_out, 1 << 16)
        if not chunk: raise RuntimeError("chromium closed the DevTools pipe")
        self.buf += chunk
      raw, self.buf = self.buf.split(b"\0", 1)
      reply = json.loads(raw)
      if reply.get("id") == self.next_id:
        if "error" in reply: raise RuntimeError(f"{method}: {reply['error']}")
        return reply.get("result", {})
  def eval(self, expr: str) -> Any:
    r = self.send("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
    return r.get("result", {}).get("value")
  def wait_for(self, expr: str, timeout: float = 30) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
      if (v := self.eval(expr)): return v
      time.sleep(0.1)
    raise TimeoutError(f"the page never satisfied {expr}")
  def click(self, selector: str) -> None:
    """A real mouse click (pressed and released) at the middle of the element."""
    box = self.wait_for(f"(() => {{ const e = document.querySelector({json.dumps(selector)}); if (!e) return null; "
                        f"e.scrollIntoView(); const r = e.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; }})()")
    for kind in ("mousePressed", "mouseReleased"):
      self.send("Input.dispatchMouseEvent", type=kind, x=box[0], y=box[1], button="left", clickCount=1)
  def close(self) -> None:
    self.proc.kill()
    self.proc.wait(timeout=30)
    os.close(self.w_in)
    os.close(self.r_out)

def chromium_exe() -> str:
  if (exe := shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")): return exe
  missing_tool("no chromium here: apt install chromium (the core job installs Debian's chromium for the VIZ page test)")

def test_the_page_draws_the_pass_a_user_clicks(server):
  browser = Chromium(chromium_exe())
  try:
    page = next(t for t in browser.send("Target.getTargets")["targetInfos"] if t["type"] == "page")
    browser.session = browser.send("Target.attachToTarget", targetId=page["targetId"], flatten=True)["sessionId"]
    browser.send("Page.navigate", url=server + "/")
    kernels = [k for k in get(f"{server}/api/kernels") if k["name"] != "schedule"]
    k = kernels[0]
    browser.click(f'.kernel[data-k="{k["id"]}"]')
    passes = get(f"{server}/api/kernel/{k['id']}")
    p = next(p for p in passes if p["rewrites"])
    browser.click(f'.pass[data-p="{p["id"]}"]')
    assert browser.wait_for("document.body.dataset.shown") == f"{k['id']}/{p['id']}"
    # what is drawn: one box per node of each graph, the ops in the same order, and the rules that fired with their counts
    before, after = (get(f"{server}/api/graph/{k['id']}/{p['id']}/{w}") for w in ("before", "after"))
    drawn = browser.eval("[...document.querySelectorAll('.graph svg')].map(s => [...s.querySelectorAll('g.node')].map(g => g.dataset.op))")
    assert drawn == [[n["op"] for n in before["nodes"]], [n["op"] for n in after["nodes"]]]
    edges = browser.eval("[...document.querySelectorAll('.graph svg')].map(s => s.querySelectorAll('line.edge').length)")
    assert edges == [sum(len(n["src"]) for n in g["nodes"]) for g in (before, after)]
    rules = browser.eval("[...document.querySelectorAll('#rules li')].map(li => li.textContent)")
    assert rules == [f"{n}x {r}" for r, n in p["fired"].items()]
    assert browser.eval("document.querySelector('.kernel.selected').dataset.k") == str(k["id"])
  finally: browser.close()
