"""The WGSL compiler: a shader module and a compute pipeline made from the source; the WGSL text is the binary."""
from __future__ import annotations
import hashlib, re, threading
from typing import Any
from core.device.compiler import Compiler, CompileError
from core.helpers import LRUCache
from plugin_webgpu.gpu import GPU, gpu
from plugin_webgpu.renderer import shader_meta

def _bind_group_layout(g: GPU, meta: dict[str, Any]) -> Any:
  """The explicit layout of a shader's bindings (an "auto" layout would drop a declared buffer the shader never touches)."""
  wgpu = g.wgpu
  entries = [{"binding": b, "visibility": wgpu.ShaderStage.COMPUTE,
              "buffer": {"type": wgpu.BufferBindingType.storage if written else wgpu.BufferBindingType.read_only_storage}}
             for b, _, _, written in meta["bufs"]]
  nbind = max((b[0] for b in meta["bufs"]), default=-1) + 1
  entries.append({"binding": nbind, "visibility": wgpu.ShaderStage.COMPUTE, "buffer": {"type": wgpu.BufferBindingType.uniform}})
  return g.device.create_bind_group_layout(entries=entries)

def _error_line(msg: str, src: str) -> str:
  """The WGSL line a validator message points at (its `wgsl:LINE:COL`), quoted; "" when it names none."""
  if (m := re.search(r"wgsl:(\d+):(\d+)", msg)) is None: return ""
  n, lines = int(m.group(1)), src.split("\n")
  return f"\nat WGSL line {n}: {lines[n - 1].strip()}" if 0 < n <= len(lines) else ""

class Pipeline:
  """A compiled shader: its meta record, the bind group layout and the compute pipeline."""
  def __init__(self, g: GPU, src: str):
    self.src, self.meta = src, shader_meta(src)
    self.layout = _bind_group_layout(g, self.meta)
    module = g.device.create_shader_module(code=src)
    self.pipeline = g.device.create_compute_pipeline(layout=g.device.create_pipeline_layout(bind_group_layouts=[self.layout]),
                                                     compute={"module": module, "entry_point": "main"})

# recent pipelines, so the runtime's load right after a compile (and an export) finds the one the compile validated; a
# program in use holds its own (a plain dict kept every pipeline ever made)
_pipelines: LRUCache = LRUCache("webgpu_pipelines", 256)
_plock = threading.Lock()

def pipeline(src: str) -> Pipeline:
  """The pipeline of `src`, made once per process (the compiler makes it; the runtime and the export reuse it)."""
  key = hashlib.sha256(src.encode()).hexdigest()
  with _plock:
    if (p := _pipelines.get(key)) is not None: return p
  g = gpu()
  try:
    with g.lock: p = Pipeline(g, src)
  except Exception as e:
    if not isinstance(e, g.wgpu.GPUError) and type(e).__name__ not in ("GPUValidationError", "GPUInternalError"): raise
    raise CompileError(f"WGSL rejected by wgpu's validator ({g.describe()}): {e}{_error_line(str(e), src)}\n--- source ---\n{src}") from e
  with _plock: _pipelines[key] = p
  return p

class WGSLCompiler(Compiler):
  """WGSL -> the same text as bytes, after wgpu's validator (naga) accepted it and built the compute pipeline: a kernel the
  device would refuse fails here, with the validator's message and the WGSL line."""
  def __init__(self) -> None:
    # no disk cache: the binary is the source, and the pipeline must be made in this process anyway
    super().__init__(None)

  def compile(self, src: str) -> bytes:
    pipeline(src)
    return src.encode()

  def disassemble(self, lib: bytes) -> str: return lib.decode()
