"""Save a captured schedule as its compiled programs and buffers, and replay such a file later without compiling anything.

The file is a JSON header and raw byte sections (never pickle): `MAGIC`, the header's length (8 bytes, little endian), the
header, then the sections the header points into by (offset, length): each program's binary as the device's compiler made
it and each weight's bytes. Inputs, outputs and scratch buffers are saved as sizes and dtypes only. The header names the
device kind (device, renderer, arch), the core version and the format version; a file of another kind or version is refused.
Replay: devices whose runtime launches kernels get each binary loaded once and called (GraphReplay); devices whose kernels run
only in their command queues get the saved programs (binary, linearized uops, source) fed to core's HCQ pipeline in place of
compiled kernels (HCQGraphReplay)."""
from __future__ import annotations
import functools, json, struct
from dataclasses import dataclass, field
from typing import Any, Callable
from core.ir.ops import UOp, Ops
from core.ir.dtype import DType, dtypes
from core.ir.serialize import SerializeError, uops_from_data, uops_to_data
from core.device.buffer import Buffer
from core.device.compiled import PreparableProgram, prepare_launch
from core.device.counters import GlobalCounters

MAGIC = b"COREPRG\x00"
FORMAT_VERSION = 3   # 2: programs carry the values of their lifted literals ("vals"); 3: and their "estimates"
ROLES = ("input", "output", "weight", "scratch")

class CompiledFileError(ValueError):
  """A compiled-program file that can't be used here: malformed, truncated, or made for another device kind or core version."""

def core_version() -> str:
  import core
  return core.__version__

def device_kind(device: str) -> dict[str, Any]:
  """What a compiled binary depends on, for the device `device` as DEV resolved it: the device name, the renderer (its class: the
  code generator and compiler pair actually built) and the arch. `dev` (the DEV entry) and `compiler` (the compiler's cache key:
  its version and, with no ARCH, the host target it chose) are recorded for messages only."""
  from core.device.registry import Device
  dev, target = Device[device], Device.target(device)
  return {"device": target.device, "renderer": type(dev.renderer).__name__,
          "arch": dev.renderer.arch or target.arch, "dev": str(target), "compiler": dev.compiler.cachekey}

def _kind_str(k: dict[str, Any]) -> str:
  return f"{k.get('device')} (renderer {k.get('renderer')}, arch {k.get('arch') or 'default'}, DEV={k.get('dev')}, compiler {k.get('compiler')})"

@dataclass
class ExportedProgram:
  """One kernel launch: its compiled binary, launch dims and the graph's buffers it takes, in argument order (`outs`: the
  positions it writes). `linear` (the linearized program as core/ir/serialize.py data) and `source` are what a device's
  command-queue pipeline reads besides the binary (argument counts, register use): HCQ-only devices replay with them.
  `estimates` (the kernel's ProgramSpec.estimates: FLOPs, bytes) are saved, not recomputed from `linear`, which for a kernel its
  renderer wrote whole (Renderer.own_kernel) holds only its parameters: replays run each kernel by them as the Jit does (the
  CPU: its blocks serial or on the pool)."""
  name: str
  binary: bytes
  global_size: tuple[int, ...]
  local_size: tuple[int, ...]
  bufs: tuple[int, ...]
  outs: tuple[int, ...] = (0,)
  linear: list = field(default_factory=list)
  source: str = ""
  vals: tuple[int, ...] = ()   # the kernel's variables' values in argument order: its lifted float literals (LIFT_CONSTS)
  estimates: dict[str, int] = field(default_factory=dict)

@dataclass
class ExportedBuffer:
  """One buffer of the graph: `data` holds a weight's bytes; other roles are allocated empty when loaded."""
  size: int
  dtype: DType
  role: str
  data: bytes | None = None
  @property
  def nbytes(self) -> int: return self.size * self.dtype.itemsize

@dataclass
class CompiledGraph:
  """A captured schedule as compiled programs over numbered buffers. `inputs`/`outputs` index `buffers`; `meta` is the caller's
  (JSON-able: e.g. input names and shapes)."""
  kind: dict[str, Any]
  programs: list[ExportedProgram]
  buffers: list[ExportedBuffer]
  inputs: list[int]
  outputs: list[int]
  meta: dict[str, Any] = field(default_factory=dict)
  core_version: str = field(default_factory=core_version)

  def to_bytes(self) -> bytes:
    blobs: list[bytes] = []
    pos = 0
    def section(b: bytes) -> list[int]:
      nonlocal pos
      blobs.append(b)
      pos += len(b)
      return [pos - len(b), len(b)]
    header = {"format": "core-compiled", "format_version": FORMAT_VERSION, "core_version": self.core_version, "kind": self.kind,
              "programs": [{"name": p.name, "binary": section(p.binary), "global_size": list(p.global_size), "local_size": list(p.local_size),
                            "bufs": list(p.bufs), "outs": list(p.outs), "linear": p.linear, "source": p.source, "vals": list(p.vals),
                            "estimates": p.estimates}
                           for p in self.programs],
              "buffers": [{"size": b.size, "dtype": b.dtype.name, "role": b.role, "data": None if b.data is None else section(b.data)}
                          for b in self.buffers],
              "inputs": self.inputs, "outputs": self.outputs, "meta": self.meta}
    head = json.dumps(header).encode()
    return MAGIC + struct.pack("<Q", len(head)) + head + b"".join(blobs)

  def save(self, path: str) -> None:
    with open(path, "wb") as f: f.write(self.to_bytes())

  def check_kind(self, kind: dict[str, Any]) -> None:
    """Refuses to run on another device kind or core version than the one the file was made with."""
    if self.core_version != (here := core_version()):
      raise CompiledFileError(f"compiled with core {self.core_version}, this is core {here}: compile the model again with this version")
    if any(self.kind.get(k) != kind.get(k) for k in ("device", "renderer", "arch")):
      raise CompiledFileError(f"compiled for {_kind_str(self.kind)}, but the device here is {_kind_str(kind)}: "
                              "run it on that device kind (set DEV) or compile the model again here")

# *** reading: every field is checked, so a damaged file gives a CompiledFileError that says what is wrong, never a KeyError ***

def _get(d: Any, key: str, typ: Any, where: str) -> Any:
  if not isinstance(d, dict) or key not in d: raise CompiledFileError(f"malformed compiled file: {where} has no {key!r}")
  v = d[key]
  if not isinstance(v, typ) or (typ is int and isinstance(v, bool)):
    raise CompiledFileError(f"malformed compiled file: {where}.{key} is {type(v).__name__}, not {getattr(typ, '__name__', typ)}")
  return v

def _ints(v: Any, where: str, lo: int = 0, hi: int | None = None) -> tuple[int, ...]:
  if not isinstance(v, list) or not all(isinstance(x, int) and not isinstance(x, bool) and x >= lo and (hi is None or x < hi) for x in v):
    raise CompiledFileError(f"malformed compiled file: {where} must be a list of integers >= {lo}" + ("" if hi is None else f" and < {hi}"))
  return tuple(v)

def _counts(d: dict, where: str) -> dict[str, int]:
  if not all(isinstance(k, str) for k in d): raise CompiledFileError(f"malformed compiled file: {where} must have string keys")
  return dict(zip(d, _ints(list(d.values()), where)))

def _section(ref: Any, data: bytes, where: str) -> bytes:
  off, n = _ints(ref, where) if isinstance(ref, list) and len(ref) == 2 else (None, None)
  if off is None or n is None: raise CompiledFileError(f"malformed compiled file: {where} must be [offset, length]")
  if off + n > len(data): raise CompiledFileError(f"truncated compiled file: {where} needs bytes {off}..{off + n} of a data part of {len(data)}")
  return data[off:off + n]

def graph_from_bytes(raw: bytes) -> CompiledGraph:
  if len(raw) < len(MAGIC) + 8 or not raw.startswith(MAGIC):
    raise CompiledFileError("not a compiled core program (no COREPRG header): make one with `python -m core.onnx compile`")
  (hlen,) = struct.unpack_from("<Q", raw, len(MAGIC))
  start = len(MAGIC) + 8
  if start + hlen > len(raw): raise CompiledFileError(f"truncated compiled file: the header needs {hlen} bytes, {len(raw) - start} are left")
  try: h = json.loads(raw[start:start + hlen])
  except (UnicodeDecodeError, json.JSONDecodeError) as e: raise CompiledFileError(f"malformed compiled file: its header is not JSON ({e})") from None
  data = raw[start + hlen:]
  if _get(h, "format", str, "header") != "core-compiled": raise CompiledFileError(f"not a compiled core program (format {h['format']!r})")
  if (fv := _get(h, "format_version", int, "header")) != FORMAT_VERSION:
    raise CompiledFileError(f"compiled file format version {fv}, this core reads version {FORMAT_VERSION}: compile the model again")
  kind = _get(h, "kind", dict, "header")
  for k in ("device", "renderer"): _get(kind, k, str, "kind")
  bufs = []
  for i, b in enumerate(_get(h, "buffers", list, "header")):
    where = f"buffers[{i}]"
    if (dt := dtypes.fields().get(_get(b, "dtype", str, where))) is None: raise CompiledFileError(f"malformed compiled file: {where} has unknown dtype {b['dtype']!r}")
    if (role := _get(b, "role", str, where)) not in ROLES: raise CompiledFileError(f"malformed compiled file: {where} has role {role!r}, not one of {ROLES}")
    size = _get(b, "size", int, where)
    blob = None if b.get("data") is None else _section(b["data"], data, where + ".data")
    if size < 0 or (blob is not None and len(blob) != size * dt.itemsize):
      raise CompiledFileError(f"malformed compiled file: {where} holds {len(blob or b'')} bytes for {size} x {dt.name}")
    bufs.append(ExportedBuffer(size, dt, role, blob))
  progs = []
  for i, p in enumerate(_get(h, "programs", list, "header")):
    where = f"programs[{i}]"
    progs.append(ExportedProgram(_get(p, "name", str, where), _section(_get(p, "binary", list, where), data, where + ".binary"),
                                 _ints(_get(p, "global_size", list, where), where + ".global_size", 1),
                                 _ints(_get(p, "local_size", list, where), where + ".local_size", 1),
                                 _ints(_get(p, "bufs", list, where), where + ".bufs", 0, len(bufs)), _ints(_get(p, "outs", list, where), where + ".outs"),
                                 _get(p, "linear", list, where), _get(p, "source", str, where),
                                 _ints(_get(p, "vals", list, where), where + ".vals", -2**31, 2**31),
                                 _counts(_get(p, "estimates", dict, where), where + ".estimates")))
  ins = list(_ints(_get(h, "inputs", list, "header"), "inputs", 0, len(bufs)))
  outs = list(_ints(_get(h, "outputs", list, "header"), "outputs", 0, len(bufs)))
  return CompiledGraph(kind, progs, bufs, ins, outs, _get(h, "meta", dict, "header"), _get(h, "core_version", str, "header"))

def read_graph(path: str) -> CompiledGraph:
  with open(path, "rb") as f: return graph_from_bytes(f.read())

# *** making one from a capture ***

def _linear_data(p: UOp, program_uops: Callable) -> list:
  # a program whose uops hold an arg outside the safe set still replays by direct launches: only HCQ-only devices need them
  try: return uops_to_data(list(program_uops(p)))
  except SerializeError: return []

def export_items(items: list[Any], input_bufs: list[UOp], output_bufs: list[UOp], meta: dict[str, Any] | None = None) -> CompiledGraph:
  """The CompiledGraph of captured schedule items (kernels only, on one device) run with `input_bufs` as inputs. A buffer read
  before any item writes it is a weight: its current contents are saved."""
  from core.engine.run import buffer_of
  from core.hcq.state import compile_kernel
  from core.codegen.program import program_binary, program_source, program_uops
  if not items: raise CompiledFileError("nothing to export: the capture ran no kernels")
  slots = list(dict.fromkeys([*input_bufs, *(b for it in items for b in it.bufs), *output_bufs]))
  devices = {b.src[1].arg for b in slots}
  if len(devices) != 1: raise CompiledFileError(f"export needs a capture on one device, this one uses {sorted(devices)}")
  device = devices.pop()
  idx = {b: i for i, b in enumerate(slots)}
  written: set[UOp] = set()
  read_first: set[UOp] = set()
  progs = []
  for it in items:
    if it.ast.op is not Ops.SINK: raise CompiledFileError(f"export supports kernels only; the capture has a {it.ast.op.name} (copy between devices?)")
    p = compile_kernel(it.ast, device)
    spec = p.arg
    fixed = dict(spec.consts)
    if free := [v.arg[0] for v in spec.vars if v.arg not in fixed]:
      raise CompiledFileError(f"kernel {spec.name} has symbolic variables {free}: export needs fixed shapes")
    for i, b in enumerate(it.bufs):
      if i in spec.outs: written.add(b)
      elif b not in written: read_first.add(b)
    progs.append(ExportedProgram(spec.name, program_binary(p), tuple(spec.global_size), tuple(spec.local_size), tuple(idx[b] for b in it.bufs),
                                 tuple(spec.outs), _linear_data(p, program_uops), program_source(p), tuple(fixed[v.arg] for v in spec.vars),
                                 dict(spec.estimates)))
  def exported(b: UOp) -> ExportedBuffer:
    if b.op is not Ops.BUFFER: raise CompiledFileError(f"export supports plain buffers, got {b.op.name}")
    role = "input" if b in input_bufs else "output" if b in output_bufs else "weight" if b in read_first else "scratch"
    data = None
    if b in read_first and b not in input_bufs:
      buf = buffer_of(b)
      data = bytes(buf.copyout(memoryview(bytearray(buf.nbytes)))) if buf.is_allocated() else bytes(buf.nbytes)
    return ExportedBuffer(b.arg, b.dtype, role, data)
  return CompiledGraph(device_kind(device), progs, [exported(b) for b in slots], [idx[b] for b in input_bufs], [idx[b] for b in output_bufs], meta or {})

# *** replaying one ***

def load_replay(graph: CompiledGraph, device: str, queues: bool | None = None) -> GraphReplay | HCQGraphReplay:
  """The replay of `graph` on `device`: direct launches where the device's runtime takes them, else through its command queues
  (`queues` True/False forces one; the CPU has both)."""
  from core.device.registry import Device
  graph.check_kind(device_kind(device))
  if queues is None and Device[device].hcq is not None:
    try: return GraphReplay(graph, device)
    except NoDirectLaunch: return HCQGraphReplay(graph, device)
  return HCQGraphReplay(graph, device) if queues else GraphReplay(graph, device)

def _saved_linear(p: ExportedProgram, i: int) -> list[UOp]:
  """Program `p`'s (programs[i]) linearized uops as saved; a CompiledFileError when they do not read back."""
  try: return uops_from_data(p.linear)
  except SerializeError as e: raise CompiledFileError(f"malformed compiled file: programs[{i}].linear: {e}") from None

class NoDirectLaunch(CompiledFileError):
  """The device runs kernels only inside its command queues."""

class _Replay:
  """What both replays share: the graph's buffers allocated on `device` and the weights uploaded once."""
  def __init__(self, graph: CompiledGraph, device: str):
    from core.device.registry import Device
    graph.check_kind(device_kind(device))
    self.graph, self.device, self.dev = graph, device, Device[device]
    self.bufs = [Buffer(device, b.size, b.dtype).allocate() for b in graph.buffers]
    for b, eb in zip(self.bufs, graph.buffers):
      if eb.data is not None: b.copyin(eb.data)
  def _run(self) -> None: raise NotImplementedError
  def __call__(self, inputs: list[bytes | memoryview]) -> list[Buffer]:
    """Copies `inputs` (the graph's inputs in order, as bytes) in, runs every program, and returns the output Buffers."""
    if len(inputs) != len(self.graph.inputs): raise ValueError(f"the compiled graph takes {len(self.graph.inputs)} inputs, got {len(inputs)}")
    for i, data in zip(self.graph.inputs, inputs): self.bufs[i].copyin(data)
    self._run()
    self.dev.synchronize()
    return [self.bufs[i] for i in self.graph.outputs]

class GraphReplay(_Replay):
  """A CompiledGraph loaded on `device` for direct launches: each saved binary loaded with the device's runtime once, then called
  per run. It never asks the device's compiler for anything."""
  def __init__(self, graph: CompiledGraph, device: str):
    super().__init__(graph, device)
    # a kernel writing nothing (an empty output) is not launched, as in the engine; the buffers never change, so a runtime that
    # can build a launch's arguments once (`prepare`) is called with no arguments per run
    self.calls: list[Callable[[], Any]] = [self._call(p) for p in graph.programs if graph.buffers[p.bufs[0]].size > 0]

  def _call(self, p: ExportedProgram) -> Callable[[], Any]:
    prg, args = self._load(p), tuple(self.bufs[j]._buf for j in p.bufs)
    if isinstance(prg, PreparableProgram):
      # with the kernel's estimates the device runs it as the Jit's queue launch of it does (e.g. the CPU: serial or on its pool)
      return prepare_launch(prg, *args, global_size=p.global_size, local_size=p.local_size, vals=p.vals, estimates=p.estimates or None)
    return functools.partial(prg, *args, global_size=p.global_size, local_size=p.local_size, vals=p.vals)

  def _load(self, p: ExportedProgram) -> Callable:
    no_direct = f"{self.device} ({device_kind(self.device)['dev']}) runs kernels only through its command queues"
    if self.dev.runtime is None: raise NoDirectLaunch(no_direct)
    try: return self.dev.runtime(p.name, p.binary)
    except NotImplementedError as e: raise NoDirectLaunch(f"{no_direct} ({e})") from None

  def _run(self) -> None:
    for call in self.calls: call()
    GlobalCounters.kernel_count += len(self.calls)

class HCQGraphReplay(_Replay):
  """A CompiledGraph on a device whose kernels run only in its command queues: the saved programs (binary, linearized uops,
  source, launch dims) are handed to core's HCQ pipeline in place of compiled kernels, which lowers the schedule once (the
  host submit program is built by core's host JIT; no kernel is compiled); each run patches in nothing new and submits."""
  def __init__(self, graph: CompiledGraph, device: str):
    import dataclasses
    from core.codegen.program import ProgramSpec
    from core.hcq.pipeline import Submission
    from core.hcq.state import HCQState
    from core.schedule.kernelize import ScheduleItem
    from core.engine.run import buffer_of
    super().__init__(graph, device)
    if self.dev.hcq is None: raise CompiledFileError(f"{device} ({device_kind(device)['dev']}) has no command queues to replay through")
    dev_uop = UOp(Ops.DEVICE, arg=device)
    slots = [UOp(Ops.BUFFER, b.dtype, (UOp(Ops.UNIQUE, arg=("compiled file", i)), dev_uop), b.size) for i, b in enumerate(graph.buffers)]
    programs: dict[UOp, UOp] = {}
    items = []
    for i, p in enumerate(graph.programs):
      if graph.buffers[p.bufs[0]].size == 0: continue
      if not p.linear: raise CompiledFileError(f"kernel {p.name} was saved without its linearized program, which {device}'s command queues need")
      linear = _saved_linear(p, i)
      # the kernel's stand-in: a SINK no other kernel shares; the pipeline asks `compile` for its PROGRAM, which is the saved one
      sink = UOp(Ops.SINK, src=(UOp(Ops.UNIQUE, arg=("compiled program", i)),), arg=p.name)
      # the kernel's variables (its lifted literals, in argument order) take the saved values
      variables = tuple(sorted((u for u in linear if u.op is Ops.DEFINE_VAR), key=lambda u: u.arg))
      if len(variables) != len(p.vals): raise CompiledFileError(f"malformed compiled file: programs[{i}] has {len(variables)} variables and {len(p.vals)} values")
      spec = ProgramSpec(p.name, p.global_size, p.local_size, variables, p.outs, p.estimates,
                         consts=tuple((v.arg, x) for v, x in zip(variables, p.vals)))
      programs[sink] = UOp(Ops.PROGRAM, src=(sink, dev_uop, UOp(Ops.LINEAR, src=tuple(linear)), UOp(Ops.SOURCE, arg=p.source),
                                             UOp(Ops.BINARY, arg=p.binary)), arg=spec)
      items.append(ScheduleItem(sink, tuple(slots[j] for j in p.bufs)))
    def saved_program(ast: UOp, dev: str) -> UOp:
      if (prg := programs.get(ast)) is None: raise CompiledFileError(f"the HCQ pipeline asked for a kernel the compiled file does not have ({ast.arg})")
      return prg
    by_slot = dict(zip(slots, self.bufs))
    self.sub = Submission(items, dataclasses.replace(HCQState.default(buffer_of), compile=saved_program))
    self.run_bufs = [by_slot[s] for s in self.sub.slots]
    self.kernels = len(items)
    self.patched = False

  def _run(self) -> None:
    # the submission is this replay's own and its buffers never change: patched by the first run, submitted as it is after
    if self.patched: self.sub.resubmit()
    else:
      self.sub.run(self.run_bufs)
      self.patched = True
    GlobalCounters.kernel_count += self.kernels
