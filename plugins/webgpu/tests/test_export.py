"""The browser export: a Jit-captured model written as a bundle, whose shaders, weights and dispatch list (run through wgpu
without the framework, as runner.js runs them in a browser) give the framework's outputs."""
from __future__ import annotations
import json, pathlib
from typing import Any
import numpy as np
import pytest
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
