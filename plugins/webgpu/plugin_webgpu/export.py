"""Export a Jit-captured WEBGPU model as a standalone browser bundle, and replay such a bundle through wgpu.

A bundle is a folder:
  manifest.json        buffers (name, bytes, dtype, kind: input | output | weight | scratch), the dispatch list (shader,
                       the buffer bound at each binding, which are written, the argument words, the workgroup counts),
                       the inputs and outputs in call order
  k<N>.wgsl            each kernel's WGSL, exactly as the framework ran it
  weights.safetensors  the contents of every buffer the captured kernels read before writing (the model's weights)
  runner.js            a small ES module over the browser's WebGPU API: load(url) -> run({input: TypedArray}) -> outputs
  index.html           a page that loads the bundle, runs it on zero inputs, prints the outputs and POSTs them to ./result

`replay_bundle` runs a bundle's manifest, shaders and weights through wgpu without the framework: what the JS runner does,
in Python, so a test can compare the bundle's outputs with the framework's."""
from __future__ import annotations
import json, pathlib, shutil
from typing import Any
import numpy as np
from core.ir.ops import Ops, UOp
from core.ir.dtype import to_np

RUNNER_JS = pathlib.Path(__file__).with_name("runner.js")

class ExportError(RuntimeError):
  """The Jit capture holds something a bundle can't express (another device, a symbolic variable, a buffer view)."""

def _args(vals: tuple[int, ...], nbufs: int) -> list[int]:
  # the kernel's variables (its lifted float literals: a bundle has no symbolic ones), then each buffer's element offset (0:
  # every buffer is bound at its start), padded to whole 16-byte uniform rows
  words = [v & 0xFFFFFFFF for v in vals] + [0] * nbufs
  return words + [0] * (max(4, -(-len(words) // 4) * 4) - len(words))

def export_jit(jit: Any, path: str | pathlib.Path) -> dict[str, Any]:
  """Writes the bundle of `jit` (called at least twice, so its kernels are captured) into the folder `path`; returns the
  manifest. Every captured kernel must run on a WEBGPU device."""
  from core.tensor.jit import _base_buffer
  from core.engine.run import buffer_of, get_runner
  from core.codegen.program import program_source
  from core import Tensor
  from core.tensor.nn.state import safe_save
  if not jit.items: raise ExportError("the Jit has captured nothing yet: call it twice (the second call records the kernels), then export")
  out = pathlib.Path(path)
  out.mkdir(parents=True, exist_ok=True)
  names: dict[UOp, str] = {b: f"input{i}" for i, b in enumerate(jit.input_bufs)}
  outputs = [_base_buffer(u) for u in jit.ret_uops]
  for i, b in enumerate(outputs): names.setdefault(b, f"output{i}")
  written: set[UOp] = set()
  weights: dict[str, Any] = {}
  buffers: dict[str, dict[str, Any]] = {}
  dispatches: list[dict[str, Any]] = []
  shaders: dict[str, str] = {}

  def name_of(b: UOp) -> str:
    if b.op is not Ops.BUFFER: raise ExportError(f"a captured kernel uses a {b.op.name}, not a whole buffer; bundles bind whole buffers")
    if b not in names:
      names[b] = f"buf{len(names)}"
      if b not in written:   # read before any kernel wrote it: a weight (or constant), saved with its current contents
        weights[names[b]] = buffer_of(b)
    n = names[b]
    if n not in buffers:
      kind = "input" if n.startswith("input") else "output" if b in outputs else "weight" if n in weights else "scratch"
      buffers[n] = {"bytes": b.arg * b.dtype.itemsize, "dtype": b.dtype.name, "shape": [b.arg], "kind": kind}
    return n

  for it in jit.items:
    device = it.bufs[0].src[1].arg
    if not str(device).startswith("WEBGPU"): raise ExportError(f"a captured step runs on {device}; a bundle holds WEBGPU kernels only")
    if it.ast.op is Ops.COPY:   # bufs: destination, source
      src = name_of(it.bufs[1])
      written.add(it.bufs[0])
      dispatches.append({"copy": {"from": src, "to": name_of(it.bufs[0])}})
      continue
    runner = get_runner(it.ast, device)
    fixed = dict(runner.spec.consts)
    if any(v.arg not in fixed for v in runner.spec.vars): raise ExportError(f"kernel {runner.spec.name} takes symbolic variables; bundles are for fixed shapes")
    src = program_source(runner.program)
    shader = shaders.setdefault(src, f"k{len(shaders)}.wgsl")
    (out / shader).write_text(src)
    meta = runner.prg.meta
    # what this kernel reads is named first: a buffer no earlier kernel wrote is a weight; then its outputs count as written
    binds = {b: name_of(it.bufs[b]) for b, _, _, w in meta["bufs"] if not w}
    written.update(it.bufs[b] for b, _, _, w in meta["bufs"] if w)
    binds.update({b: name_of(it.bufs[b]) for b, _, _, w in meta["bufs"] if w})
    dispatches.append({"shader": shader, "name": meta["name"], "bindings": [[b, binds[b], bool(w)] for b, _, _, w in meta["bufs"]],
                       "args": _args(tuple(fixed[v.arg] for v in runner.spec.vars), len(meta["bufs"])), "workgroups": meta["dispatch"]})
  for b in outputs: name_of(b)
  for n, buf in weights.items():
    data = np.empty(buf.size, dtype=to_np(buf.dtype))
    buf.copyout(memoryview(data.data).cast("B"))
    weights[n] = Tensor(data, device="PYTHON")   # host bytes for safe_save; PYTHON is core's own device
  safe_save(weights, out / "weights.safetensors")
  manifest = {"format": "core-webgpu-bundle/1", "buffers": buffers, "dispatches": dispatches,
              "inputs": [names[b] for b in jit.input_bufs], "outputs": [names[b] for b in outputs], "weights": "weights.safetensors"}
  (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
  shutil.copyfile(RUNNER_JS, out / "runner.js")
  (out / "index.html").write_text(INDEX_HTML)
  return manifest

INDEX_HTML = """<!doctype html>
<meta charset="utf-8"><title>core WebGPU bundle</title>
<pre id="out">loading...</pre>
<script type="module">
import { load } from "./runner.js";
const out = document.getElementById("out");
try {
  const model = await load(".");
  const inputs = Object.fromEntries(model.manifest.inputs.map(n => [n, new Uint8Array(model.manifest.buffers[n].bytes)]));
  const results = await model.run(inputs);
  out.textContent = JSON.stringify(Object.fromEntries(Object.entries(results).map(([k, v]) => [k, Array.from(v)])));
} catch (e) { out.textContent = "error: " + e; }
// a test harness serving the bundle takes the result here (a plain file server just refuses the POST)
fetch("result", {method: "POST", body: out.textContent}).catch(() => {});
</script>
"""

# *** replay through wgpu: the bundle alone, no framework kernels ***

def _safetensors(path: pathlib.Path) -> dict[str, bytes]:
  raw = path.read_bytes()
  n = int.from_bytes(raw[:8], "little")
  header = json.loads(raw[8:8 + n])
  return {k: raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in header.items() if k != "__metadata__"}

def _uniform_binding(d: dict[str, Any]) -> int: return max((b for b, _, _ in d["bindings"]), default=-1) + 1

def replay_bundle(path: str | pathlib.Path, inputs: dict[str, np.ndarray]) -> dict[str, bytes]:
  """Runs the bundle in `path` on `inputs` (name -> array) with wgpu, as runner.js does in a browser; returns each output's bytes."""
  from plugin_webgpu.gpu import gpu
  from plugin_webgpu.runtime import read_words
  g = gpu()
  wgpu, dev = g.wgpu, g.device
  root = pathlib.Path(path)
  manifest = json.loads((root / "manifest.json").read_text())
  weights = _safetensors(root / manifest["weights"])
  usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
  bufs: dict[str, Any] = {}
  with g.lock:
    for name, b in manifest["buffers"].items():
      bufs[name] = dev.create_buffer(size=max(4, (b["bytes"] + 3) & ~3), usage=usage)
      data = weights.get(name) if b["kind"] == "weight" else np.ascontiguousarray(inputs[name]).tobytes() if b["kind"] == "input" else None
      if data is not None:
        if len(data) != b["bytes"]: raise ValueError(f"bundle buffer {name}: {len(data)} bytes given, {b['bytes']} expected")
        dev.queue.write_buffer(bufs[name], 0, data + b"\0" * (-len(data) % 4))
    enc = dev.create_command_encoder()
    pipelines: dict[str, Any] = {}
    for d in manifest["dispatches"]:
      if "copy" in d:
        src, dst = d["copy"]["from"], d["copy"]["to"]
        enc.copy_buffer_to_buffer(bufs[src], 0, bufs[dst], 0, (manifest["buffers"][dst]["bytes"] + 3) & ~3)
        continue
      if (p := pipelines.get(d["shader"])) is None:
        entries = [{"binding": b, "visibility": wgpu.ShaderStage.COMPUTE, "buffer": {"type": "storage" if w else "read-only-storage"}}
                   for b, _, w in d["bindings"]]
        entries.append({"binding": _uniform_binding(d), "visibility": wgpu.ShaderStage.COMPUTE, "buffer": {"type": "uniform"}})
        layout = dev.create_bind_group_layout(entries=entries)
        module = dev.create_shader_module(code=(root / d["shader"]).read_text())
        p = pipelines[d["shader"]] = (layout, dev.create_compute_pipeline(layout=dev.create_pipeline_layout(bind_group_layouts=[layout]),
                                                                         compute={"module": module, "entry_point": "main"}))
      args = np.array(d["args"], dtype=np.uint32).tobytes()
      ubuf = dev.create_buffer_with_data(data=args, usage=wgpu.BufferUsage.UNIFORM)
      entries = [{"binding": b, "resource": {"buffer": bufs[n], "offset": 0, "size": bufs[n].size}} for b, n, _ in d["bindings"]]
      entries.append({"binding": _uniform_binding(d), "resource": {"buffer": ubuf, "offset": 0, "size": len(args)}})
      cp = enc.begin_compute_pass()
      cp.set_pipeline(p[1])
      cp.set_bind_group(0, dev.create_bind_group(layout=p[0], entries=entries))
      cp.dispatch_workgroups(*d["workgroups"])
      cp.end()
    dev.queue.submit([enc.finish()])
  return {n: bytes(read_words(g, bufs[n], 0, bufs[n].size)[:manifest["buffers"][n]["bytes"]]) for n in manifest["outputs"]}
