// Runs a core WebGPU bundle (manifest.json, k*.wgsl, weights.safetensors) with the browser's WebGPU API; no Python.
//   const model = await load("./bundle");               // fetches the manifest, the shaders and the weights
//   const outputs = await model.run({input0: floats});   // TypedArray per input -> {output0: Uint8Array, ...} (raw bytes)
// Each output is returned as its raw bytes: view them with the dtype the manifest names (e.g. new Float32Array(out.buffer)).

async function readSafetensors(buf) {
  const n = Number(new DataView(buf).getBigUint64(0, true));
  const header = JSON.parse(new TextDecoder().decode(new Uint8Array(buf, 8, n)));
  const out = {};
  for (const [name, t] of Object.entries(header)) {
    if (name === "__metadata__") continue;
    out[name] = new Uint8Array(buf, 8 + n + t.data_offsets[0], t.data_offsets[1] - t.data_offsets[0]);
  }
  return out;
}

const padded = (n) => Math.max(4, (n + 3) & ~3);   // WebGPU copies and storage bindings move whole 4-byte words

export async function load(url, device) {
  if (!device) {
    if (!navigator.gpu) throw new Error("this browser has no WebGPU (navigator.gpu is undefined)");
    const adapter = await navigator.gpu.requestAdapter();
    if (!adapter) throw new Error("no WebGPU adapter");
    const features = adapter.features.has("shader-f16") ? ["shader-f16"] : [];
    device = await adapter.requestDevice({requiredFeatures: features, requiredLimits: {
      maxStorageBuffersPerShaderStage: adapter.limits.maxStorageBuffersPerShaderStage,
      maxStorageBufferBindingSize: adapter.limits.maxStorageBufferBindingSize,
      maxBufferSize: adapter.limits.maxBufferSize,
      maxComputeWorkgroupStorageSize: adapter.limits.maxComputeWorkgroupStorageSize,
      maxComputeInvocationsPerWorkgroup: adapter.limits.maxComputeInvocationsPerWorkgroup,
      maxComputeWorkgroupSizeX: adapter.limits.maxComputeWorkgroupSizeX}});
  }
  const manifest = await (await fetch(`${url}/manifest.json`)).json();
  const weights = await readSafetensors(await (await fetch(`${url}/${manifest.weights}`)).arrayBuffer());
  const usage = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST;
  const buffers = {};
  for (const [name, b] of Object.entries(manifest.buffers)) {
    buffers[name] = device.createBuffer({size: padded(b.bytes), usage});
    if (b.kind === "weight") {
      const w = new Uint8Array(padded(b.bytes));
      w.set(weights[name]);
      device.queue.writeBuffer(buffers[name], 0, w);
    }
  }
  // pipelines and bind groups are made once: every run encodes the same dispatches over the same buffers
  const pipelines = {};
  const steps = [];
  for (const d of manifest.dispatches) {
    if (d.copy) { steps.push({copy: d.copy}); continue; }
    const uniform = Math.max(-1, ...d.bindings.map(b => b[0])) + 1;
    if (!pipelines[d.shader]) {
      const code = await (await fetch(`${url}/${d.shader}`)).text();
      const entries = d.bindings.map(([b, , w]) => ({binding: b, visibility: GPUShaderStage.COMPUTE, buffer: {type: w ? "storage" : "read-only-storage"}}));
      entries.push({binding: uniform, visibility: GPUShaderStage.COMPUTE, buffer: {type: "uniform"}});
      const layout = device.createBindGroupLayout({entries});
      const module = device.createShaderModule({code});
      const info = await module.getCompilationInfo();
      const errors = info.messages.filter(m => m.type === "error");
      if (errors.length) throw new Error(`${d.shader}: ${errors.map(m => `line ${m.lineNum}: ${m.message}`).join("; ")}`);
      pipelines[d.shader] = {layout, pipeline: device.createComputePipeline({layout: device.createPipelineLayout({bindGroupLayouts: [layout]}),
                                                                              compute: {module, entryPoint: "main"}})};
    }
    const p = pipelines[d.shader];
    const args = device.createBuffer({size: d.args.length * 4, usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST});
    device.queue.writeBuffer(args, 0, new Uint32Array(d.args));
    const entries = d.bindings.map(([b, name]) => ({binding: b, resource: {buffer: buffers[name]}}));
    entries.push({binding: uniform, resource: {buffer: args}});
    steps.push({pipeline: p.pipeline, group: device.createBindGroup({layout: p.layout, entries}), workgroups: d.workgroups});
  }
  async function run(inputs) {
    for (const name of manifest.inputs) {
      const src = inputs[name];
      if (!src) throw new Error(`missing input ${name}`);
      const bytes = new Uint8Array(src.buffer, src.byteOffset, src.byteLength);
      if (bytes.length !== manifest.buffers[name].bytes) throw new Error(`input ${name}: ${bytes.length} bytes, expected ${manifest.buffers[name].bytes}`);
      const w = new Uint8Array(padded(bytes.length));
      w.set(bytes);
      device.queue.writeBuffer(buffers[name], 0, w);
    }
    const enc = device.createCommandEncoder();
    for (const s of steps) {
      if (s.copy) { enc.copyBufferToBuffer(buffers[s.copy.from], 0, buffers[s.copy.to], 0, padded(manifest.buffers[s.copy.to].bytes)); continue; }
      const pass = enc.beginComputePass();
      pass.setPipeline(s.pipeline);
      pass.setBindGroup(0, s.group);
      pass.dispatchWorkgroups(...s.workgroups);
      pass.end();
    }
    const staging = {};
    for (const name of manifest.outputs) {
      staging[name] = device.createBuffer({size: padded(manifest.buffers[name].bytes), usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST});
      enc.copyBufferToBuffer(buffers[name], 0, staging[name], 0, padded(manifest.buffers[name].bytes));
    }
    device.queue.submit([enc.finish()]);
    const out = {};
    for (const name of manifest.outputs) {
      await staging[name].mapAsync(GPUMapMode.READ);
      out[name] = new Uint8Array(staging[name].getMappedRange().slice(0, manifest.buffers[name].bytes));
      staging[name].unmap();
      staging[name].destroy();
    }
    return out;
  }
  return {manifest, device, run};
}
