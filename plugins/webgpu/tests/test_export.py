"""The browser export: a Jit-captured model written as a bundle, whose shaders, weights and dispatch list (run through wgpu
without the framework, as runner.js runs them in a browser) give the framework's outputs."""
from __future__ import annotations
import json, pathlib
from typing import Any
import numpy as np
import pytest
from core.testing.helpers import missing_tool
from core import Tensor, Jit
from core.tensor.nn import Linear

def test_mlp_bundle_replays_to_the_framework_outputs(webgpu: Any, tmp_path: pathlib.Path) -> None:
  from plugin_webgpu.export import export_jit, replay_bundle
  Tensor.manual_seed(0)
  l1, l2 = Linear(16, 32), Linear(32, 4)
  for p in (l1.weight, l1.bias, l2.weight, l2.bias): p.replace(p.to("WEBGPU")).realize()
  @Jit
  def model(x: Tensor) -> Tensor: return l2(l1(x).relu()).softmax()
  rng = np.random.default_rng(1)
  for _ in range(3): model(Tensor(rng.standard_normal((2, 16)).astype(np.float32), device="WEBGPU"))
  manifest = export_jit(model, tmp_path / "bundle")
  x = rng.standard_normal((2, 16)).astype(np.float32)
  want = model(Tensor(x, device="WEBGPU")).numpy()
  got = replay_bundle(tmp_path / "bundle", {"input0": x})
  np.testing.assert_allclose(np.frombuffer(got["output0"], dtype=np.float32).reshape(2, 4), want, rtol=1e-6, atol=1e-7)
  # the bundle stands alone: shaders, weights, the runner and the page are files in it; the weights are the model's
  files = {p.name for p in (tmp_path / "bundle").iterdir()}
  assert {"manifest.json", "weights.safetensors", "runner.js", "index.html"} <= files
  assert all(d["shader"] in files for d in manifest["dispatches"] if "shader" in d)
  assert sorted(b["kind"] for b in manifest["buffers"].values()).count("weight") == 4
  from core.tensor.nn.state import safe_load
  saved = safe_load(tmp_path / "bundle" / "weights.safetensors")
  assert any(np.array_equal(t.numpy().reshape(-1), l1.weight.numpy().reshape(-1)) for t in saved.values())
  assert json.loads((tmp_path / "bundle" / "manifest.json").read_text())["inputs"] == ["input0"]

def test_export_needs_a_capture(webgpu: Any, tmp_path: pathlib.Path) -> None:
  from plugin_webgpu.export import ExportError, export_jit
  @Jit
  def f(x: Tensor) -> Tensor: return x * 2
  with pytest.raises(ExportError, match="call it twice"): export_jit(f, tmp_path)

def _chromium() -> str | None:
  import shutil
  return next((p for c in ("chromium", "chromium-browser", "google-chrome") if (p := shutil.which(c))), None)

def test_bundle_runs_in_headless_chromium(webgpu: Any, tmp_path: pathlib.Path) -> None:
  if _chromium() is None:
    # the plugin's CI job installs Debian's chromium ([tool.core] apt); elsewhere replay_bundle still checks the bundle
    missing_tool("no Chromium here: apt install chromium (the webgpu job installs Debian's chromium for this test)")
  # the page loads the bundle with runner.js and the browser's WebGPU, runs it on zero inputs and POSTs the output bytes back
  import http.server, subprocess, threading, time
  from plugin_webgpu.export import export_jit
  Tensor.manual_seed(0)
  l1 = Linear(8, 4)
  for p in (l1.weight, l1.bias): p.replace(p.to("WEBGPU")).realize()
  @Jit
  def model(x: Tensor) -> Tensor: return l1(x).relu() * 2
  for _ in range(3): model(Tensor(np.ones((3, 8), dtype=np.float32), device="WEBGPU"))
  export_jit(model, tmp_path / "b")
  want = model(Tensor(np.zeros((3, 8), dtype=np.float32), device="WEBGPU")).numpy()
  got: list[bytes] = []
  class Handler(http.server.SimpleHTTPRequestHandler):
    def __init__(self, *a: Any, **k: Any) -> None: super().__init__(*a, directory=str(tmp_path / "b"), **k)
    def log_message(self, *a: Any) -> None: pass
    def do_POST(self) -> None:
      got.append(self.rfile.read(int(self.headers["Content-Length"])))
      self.send_response(204)
      self.end_headers()
  server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
  threading.Thread(target=server.serve_forever, daemon=True).start()
  chrome = subprocess.Popen([str(_chromium()), "--headless=new", "--no-sandbox", "--disable-gpu-sandbox", "--enable-unsafe-webgpu",
                             "--enable-features=Vulkan", f"--user-data-dir={tmp_path / 'profile'}", f"http://127.0.0.1:{server.server_port}/index.html"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  try:
    deadline = time.monotonic() + 60
    while not got and time.monotonic() < deadline: time.sleep(0.1)
  finally:
    chrome.kill()
    chrome.wait()
    server.shutdown()
  assert got, "Chromium never reported the bundle's result"
  assert not got[0].startswith(b"error"), f"the bundle failed in Chromium: {got[0].decode()}"
  res = json.loads(got[0])
  np.testing.assert_allclose(np.frombuffer(bytes(res["output0"]), dtype=np.float32).reshape(want.shape), want, rtol=1e-6, atol=1e-6)
