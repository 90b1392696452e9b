"""AMD program preparation: code object -> (AMDProgramData, image bytes): kernel descriptor, metadata note, relocated image."""
from __future__ import annotations
import dataclasses, struct
from typing import TYPE_CHECKING, Any
from core.helpers import to_function_name
from core.codegen.program import compiled_program
from core.hcq.queue_ir import ProgramData
from core.ir.ops import UOp, Ops
from core.ir.pattern import PatternMatcher
from plugin_amd.elf import ELF, ELFError, load
from plugin_amd.msgpack import MsgpackError, unpackb
from plugin_amd.renderer import ARCHS, ArchInfo

if TYPE_CHECKING:
  from plugin_amd.runtime import AMDHCQ

class PrepError(ValueError):
  """A code object this plugin cannot load (the message says which part and why)."""

NT_AMDGPU_METADATA = 32   # AMDGPUUsage "AMDGPU Code Object V3+ Note Records": owner "AMDGPU", msgpack payload
KD_SIZE = 64
# kernel_code_properties bits 0..6 enable these user SGPRs, loaded in this order from s0 (AMDGPUUsage "Initial Kernel Execution State")
USER_SGPRS = (("private_segment_buffer", 4), ("dispatch_ptr", 2), ("queue_ptr", 2), ("kernarg_segment_ptr", 2), ("dispatch_id", 2),
              ("flat_scratch_init", 2), ("private_segment_size", 1))

@dataclasses.dataclass(frozen=True)
class KernelDescriptor:
  """The 64-byte AMDHSA kernel descriptor (AMDGPUUsage "Kernel Descriptor"): what the CP reads to launch the kernel."""
  group_segment_fixed_size: int
  private_segment_fixed_size: int
  kernarg_size: int
  kernel_code_entry_byte_offset: int   # from the descriptor's own address to the kernel's first instruction
  compute_pgm_rsrc3: int
  compute_pgm_rsrc1: int
  compute_pgm_rsrc2: int
  kernel_code_properties: int
  kernarg_preload: int

  @staticmethod
  def decode(raw: bytes) -> KernelDescriptor:
    if len(raw) != KD_SIZE: raise PrepError(f"a kernel descriptor is {KD_SIZE} bytes, got {len(raw)}")
    g, p, k = struct.unpack_from("<III", raw, 0)
    entry = struct.unpack_from("<q", raw, 16)[0]
    r3, r1, r2 = struct.unpack_from("<III", raw, 44)
    kcp, pre = struct.unpack_from("<HH", raw, 56)
    return KernelDescriptor(g, p, k, entry, r3, r1, r2, kcp, pre)

  # kernel_code_properties bits (AMDGPUUsage "Kernel Descriptor" table)
  @property
  def wave32(self) -> bool: return bool(self.kernel_code_properties >> 10 & 1)        # ENABLE_WAVEFRONT_SIZE32
  @property
  def uses_dynamic_stack(self) -> bool: return bool(self.kernel_code_properties >> 11 & 1)
  @property
  def enable_kernarg_segment_ptr(self) -> bool: return bool(self.kernel_code_properties >> 3 & 1)
  # compute_pgm_rsrc1/2 fields the dispatch needs to know about
  @property
  def vgpr_granules(self) -> int: return self.compute_pgm_rsrc1 & 0x3f                   # GRANULATED_WORKITEM_VGPR_COUNT
  @property
  def enable_private_segment(self) -> bool: return bool(self.compute_pgm_rsrc2 & 1)     # ENABLE_PRIVATE_SEGMENT (scratch)
  @property
  def user_sgpr_count(self) -> int: return self.compute_pgm_rsrc2 >> 1 & 0x1f
  @property
  def workgroup_id_enable(self) -> tuple[bool, bool, bool]: return tuple(bool(self.compute_pgm_rsrc2 >> b & 1) for b in (7, 8, 9))  # type: ignore
  @property
  def workitem_id_dims(self) -> int: return self.compute_pgm_rsrc2 >> 11 & 3             # ENABLE_VGPR_WORKITEM_ID: 0 = x, 1 = xy, 2 = xyz

@dataclasses.dataclass(frozen=True)
class AMDProgramData(ProgramData):
  """ProgramData plus what an AMD dispatch needs. Offsets are bytes from the start of the image (which must be uploaded
  256-byte aligned): `entry_offset` is the kernel's first instruction (COMPUTE_PGM_LO/HI = (base + entry_offset) >> 8),
  `kd_offset` its descriptor. `hidden_args`: (value kind, offset, size) of each implicit kernel argument the code object
  expects after the explicit ones (AMDGPUUsage "Code Object V5 Metadata"), for the dispatch to fill."""
  arch: str = ""
  entry_offset: int = 0
  kd_offset: int = 0
  rsrc1: int = 0
  rsrc2: int = 0
  rsrc3: int = 0
  lds_size: int = 0
  scratch_size: int = 0
  wave_size: int = 64
  kernel_code_properties: int = 0
  sgpr_count: int = 0
  vgpr_count: int = 0
  hidden_args: tuple[tuple[str, int, int], ...] = ()
  @property
  def wave32(self) -> bool: return self.wave_size == 32
  @property
  def user_sgprs(self) -> tuple[tuple[str, int, int], ...]:
    """(name, first SGPR, count) of each user SGPR the dispatch must load (COMPUTE_USER_DATA_n), in hardware order."""
    out, at = [], 0
    for bit, (name, n) in enumerate(USER_SGPRS):
      if self.kernel_code_properties >> bit & 1:
        out.append((name, at, n))
        at += n
    return tuple(out)

def read_metadata(elf: ELF) -> dict[str, Any]:
  """The decoded AMDGPU metadata note (a msgpack map with "amdhsa.version", "amdhsa.target", "amdhsa.kernels")."""
  notes = [n for n in elf.notes() if n.owner == "AMDGPU" and n.type == NT_AMDGPU_METADATA]
  if len(notes) != 1: raise PrepError(f"expected one AMDGPU metadata note, found {len(notes)}")
  try: md = unpackb(notes[0].desc)
  except MsgpackError as e: raise PrepError(f"the AMDGPU metadata note is not valid msgpack: {e}") from e
  if not isinstance(md, dict) or not isinstance(md.get("amdhsa.kernels"), list): raise PrepError("the AMDGPU metadata has no amdhsa.kernels list")
  return md

def _int(md: dict[str, Any], key: str, where: str) -> int:
  v = md.get(key)
  if not isinstance(v, int) or isinstance(v, bool): raise PrepError(f"{where}: metadata {key} is {v!r}, expected an integer")
  return v

def load_code_object(obj: bytes, name: str | None = None, arch: ArchInfo | None = None,
                     nbufs: int | None = None, nvars: int | None = None) -> tuple[AMDProgramData, bytes]:
  """Reads a code object: its kernel `name` (None: the only kernel), checks the descriptor against the metadata (and the
  argument counts, when given), and returns the program data with the relocated image."""
  try:
    elf = ELF(obj)
    md = read_metadata(elf)
    kernels = md["amdhsa.kernels"]
    if name is None:
      if len(kernels) != 1: raise PrepError(f"the code object holds {len(kernels)} kernels; name the one to load")
      kmd = kernels[0]
    elif (kmd := next((k for k in kernels if isinstance(k, dict) and k.get(".name") == name), None)) is None:
      raise PrepError(f"no kernel {name!r} in the code object (it has {[k.get('.name') for k in kernels if isinstance(k, dict)]})")
    kname = kmd.get(".name")
    if not isinstance(kname, str): raise PrepError("a kernel in the metadata has no .name")
    target = md.get("amdhsa.target", "")
    if arch is not None and not (isinstance(target, str) and target.split("--")[-1].split(":")[0] == arch.name):
      raise PrepError(f"kernel {kname}: the code object is for {target!r}, expected {arch.name}")
    img = load(elf)
    kd_sym = kmd.get(".symbol", kname + ".kd")
    kd_off = img.symbol_offset(elf, kd_sym)
    if kd_off % 64: raise PrepError(f"kernel {kname}: descriptor {kd_sym} at image offset {kd_off:#x} is not 64-byte aligned")
    kd = KernelDescriptor.decode(img.data[kd_off:kd_off + KD_SIZE])
    entry = kd_off + kd.kernel_code_entry_byte_offset
    if img.symbol_offset(elf, kname) != entry:
      raise PrepError(f"kernel {kname}: the descriptor's entry ({entry:#x}) is not the kernel symbol ({img.symbol_offset(elf, kname):#x})")
    if entry % 256: raise PrepError(f"kernel {kname}: entry at image offset {entry:#x} is not 256-byte aligned")
  except ELFError as e: raise PrepError(f"bad ELF: {e}") from e
  where = f"kernel {kname}"
  # the descriptor is what the hardware reads; the metadata is what the runtime reads: they must agree
  for key, val in ((".kernarg_segment_size", kd.kernarg_size), (".group_segment_fixed_size", kd.group_segment_fixed_size),
                   (".private_segment_fixed_size", kd.private_segment_fixed_size)):
    if _int(kmd, key, where) != val: raise PrepError(f"{where}: metadata {key} = {kmd[key]} but the kernel descriptor says {val}")
  wave = _int(kmd, ".wavefront_size", where)
  if wave != (32 if kd.wave32 else 64): raise PrepError(f"{where}: metadata wavefront size {wave}, descriptor wave32={kd.wave32}")
  if arch is not None and wave != arch.wave: raise PrepError(f"{where}: wave{wave} code for {arch.name}, which this plugin runs as wave{arch.wave}")
  if kd.uses_dynamic_stack: raise PrepError(f"{where}: uses a dynamic stack (recursion or a dynamic alloca), which this plugin does not set up")
  explicit, hidden = [], []
  for a in kmd.get(".args", []):
    kind, off, size = a.get(".value_kind"), a.get(".offset"), a.get(".size")
    if not (isinstance(kind, str) and isinstance(off, int) and isinstance(size, int)) or off + size > kd.kernarg_size:
      raise PrepError(f"{where}: bad argument record {a!r} (kernarg size {kd.kernarg_size})")
    if kind.startswith("hidden_"): hidden.append((kind, off, size))
    elif kind == "global_buffer" and size == 8 or kind == "by_value" and size == 4: explicit.append((kind, off))
    else: raise PrepError(f"{where}: argument {a!r} is neither a buffer address nor an int32 variable")
  bufs = [o for k, o in explicit if k == "global_buffer"]
  if [k for k, _ in explicit] != ["global_buffer"] * len(bufs) + ["by_value"] * (len(explicit) - len(bufs)):
    raise PrepError(f"{where}: buffer arguments must come before variables, got {[k for k, _ in explicit]}")
  if nbufs is not None and len(bufs) != nbufs or nvars is not None and len(explicit) - len(bufs) != nvars:
    raise PrepError(f"{where}: the code object takes {len(bufs)} buffers and {len(explicit) - len(bufs)} variables, "
                    f"the program has {nbufs} and {nvars}")
  data = AMDProgramData(name=kname, kernarg_size=kd.kernarg_size, kernarg_align=max(_int(kmd, ".kernarg_segment_align", where), 8),
                        arg_offsets=tuple(o for _, o in explicit), arch=arch.name if arch else target.split("--")[-1],
                        entry_offset=entry, kd_offset=kd_off, rsrc1=kd.compute_pgm_rsrc1, rsrc2=kd.compute_pgm_rsrc2,
                        rsrc3=kd.compute_pgm_rsrc3, lds_size=kd.group_segment_fixed_size, scratch_size=kd.private_segment_fixed_size,
                        wave_size=wave, kernel_code_properties=kd.kernel_code_properties, sgpr_count=_int(kmd, ".sgpr_count", where),
                        vgpr_count=_int(kmd, ".vgpr_count", where), hidden_args=tuple(hidden))
  return data, img.data

def prep_program(ctx: AMDHCQ | None, p: UOp, device: UOp, linear: UOp, binary: UOp) -> UOp:
  """A compiled PROGRAM (codegen's: SINK, DEVICE, LINEAR, SOURCE, BINARY; arg ProgramSpec) -> PROGRAM(DEVICE, BINARY(image))
  arg=AMDProgramData. `ctx` is the device's HCQ object: a code object for another arch than its own is refused, and it is told of
  the prepared kernel (register_program: MOCK and the simulated KFD driver file a host build). None (a caller without a device,
  e.g. compile-only tests): any arch, nobody told."""
  spec, uops = p.arg, linear.src
  nbufs = sum(1 for u in uops if u.op is Ops.PARAM)
  arch = ARCHS[ctx.arch] if ctx is not None else None
  data, image = load_code_object(binary.arg, name=to_function_name(spec.name), arch=arch, nbufs=nbufs, nvars=len(spec.vars))
  if ctx is not None: ctx.register_program(spec.name, uops, data, image)
  return UOp(Ops.PROGRAM, src=(device, UOp(Ops.BINARY, arg=image)), arg=data)

# the HCQ contract's prep hook, for every interface (a prepared PROGRAM no longer matches: the rewrite reaches a fixed point)
pm_prep_program = PatternMatcher([(compiled_program, prep_program)], name="amd prep program")
