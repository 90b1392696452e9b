"""Program preparation: the fields read from the code object (kernel descriptor, metadata note, relocated image) equal what
LLVM itself reports for the same kernel (its assembler directives and metadata YAML), per arch; and the prep hook's rewrite."""
from __future__ import annotations
import struct
import pytest
from core.codegen.program import ProgramSpec
from core.ir.dtype import dtypes
from core.ir.ops import UOp, Ops
from core.ir.pattern import graph_rewrite
from core.testing.kernels import lds_kernel, loop_kernel
from amd_test_kernels import ARCH_NAMES, compiler, llvm_report
from plugin_amd.elf import ELF
from plugin_amd.prep import AMDProgramData, KernelDescriptor, PrepError, load_code_object, pm_prep_program, read_metadata
from plugin_amd.renderer import ARCHS, AMDLLVMRenderer
from plugin_amd.runtime import AMDHCQ

def build(arch: str, uops: list[UOp], name: str = "k") -> tuple[str, bytes]:
  src = AMDLLVMRenderer(arch).render(name, uops)
  return src, compiler(arch).compile(src)

@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_lds_kernel_fields_match_llvm(arch: str):
  src, obj = build(arch, lds_kernel(local=64, groups=4))
  data, image = load_code_object(obj, arch=ARCHS[arch])
  d, md = llvm_report(arch, src)
  assert data.name == "k" and data.arch == arch
  # LDS: 64 floats, as the kernel declares, in the descriptor, the assembler directives and the metadata alike
  assert data.lds_size == 256 == d["group_segment_fixed_size"] == md[".group_segment_fixed_size"]
  assert data.kernarg_size == d["kernarg_size"] == md[".kernarg_segment_size"] and data.kernarg_size >= 16
  assert data.scratch_size == d["private_segment_fixed_size"] == md[".private_segment_fixed_size"]
  assert data.wave_size == md[".wavefront_size"] == ARCHS[arch].wave == (64 if arch.startswith("gfx9") else 32)
  assert data.wave32 == bool(d.get("wavefront_size32", 0))
  assert data.sgpr_count == md[".sgpr_count"] and data.vgpr_count == md[".vgpr_count"]
  assert data.arg_offsets == tuple(off for kind, off, _ in md["args"] if not kind.startswith("hidden_")) == (0, 8)
  assert data.hidden_args == tuple(a for a in md["args"] if a[0].startswith("hidden_"))
  assert data.kernarg_align == max(md[".kernarg_segment_align"], 8)
  kd = KernelDescriptor.decode(image[data.kd_offset:data.kd_offset + 64])
  assert (kd.compute_pgm_rsrc1, kd.compute_pgm_rsrc2, kd.compute_pgm_rsrc3) == (data.rsrc1, data.rsrc2, data.rsrc3)
  # compute_pgm_rsrc2 and kernel_code_properties bit by bit against the directives LLVM would assemble them from
  assert kd.user_sgpr_count == d["user_sgpr_count"] and kd.enable_kernarg_segment_ptr == bool(d["user_sgpr_kernarg_segment_ptr"])
  assert kd.workgroup_id_enable == tuple(bool(d[f"system_sgpr_workgroup_id_{a}"]) for a in "xyz")
  assert kd.workitem_id_dims == d["system_vgpr_workitem_id"]
  assert kd.enable_private_segment == bool(d.get("enable_private_segment", d.get("system_sgpr_private_segment_wavefront_offset")))
  assert kd.uses_dynamic_stack is False and d["uses_dynamic_stack"] == 0
  # VGPRs are allocated in granules of 8 on every arch here (wave32 gfx11/12, and gfx90a+ in wave64)
  assert kd.vgpr_granules == max(0, -(-d["next_free_vgpr"] // 8) - 1), (kd.vgpr_granules, d)
  assert sum(n for _, _, n in data.user_sgprs) <= kd.user_sgpr_count
  assert ("kernarg_segment_ptr" in [u[0] for u in data.user_sgprs]) == kd.enable_kernarg_segment_ptr

@pytest.mark.parametrize("arch", ["gfx90a", "gfx1100"])
def test_image_layout_and_entry(arch: str):
  src, obj = build(arch, loop_kernel(dtypes.float32))
  data, image = load_code_object(obj, arch=ARCHS[arch])
  elf = ELF(obj)
  text, kd_raw = elf.section(".text"), elf.section(".rodata")
  # the relocatable object leaves the descriptor's entry offset to the loader (R_AMDGPU_REL64): 0 there, filled here
  assert struct.unpack_from("<q", kd_raw.data, elf.symbol("k.kd").value + 16)[0] == 0
  assert data.entry_offset % 256 == 0 and data.kd_offset % 64 == 0
  assert image[data.entry_offset:data.entry_offset + text.size] == text.data
  assert data.kd_offset + KernelDescriptor.decode(image[data.kd_offset:data.kd_offset + 64]).kernel_code_entry_byte_offset == data.entry_offset
  assert image[data.kd_offset:data.kd_offset + 16] == kd_raw.data[:16]
  d, md = llvm_report(arch, src)
  assert data.arg_offsets == (0, 8, 16) and data.kernarg_size == md[".kernarg_segment_size"] == d["kernarg_size"]

def test_metadata_note():
  md = read_metadata(ELF(build("gfx1100", loop_kernel())[1]))
  assert md["amdhsa.target"] == "amdgcn-amd-amdhsa--gfx1100" and md["amdhsa.version"][0] == 1
  (k,) = md["amdhsa.kernels"]
  assert k[".name"] == "k" and k[".symbol"] == "k.kd"
  assert [(a[".value_kind"], a[".offset"], a[".size"]) for a in k[".args"] if not a[".value_kind"].startswith("hidden")] == \
         [("global_buffer", 0, 8), ("global_buffer", 8, 8), ("by_value", 16, 4)]

def test_wrong_arch_and_counts_are_refused():
  _, obj = build("gfx90a", loop_kernel())
  with pytest.raises(PrepError, match="for 'amdgcn-amd-amdhsa--gfx90a.*', expected gfx1100"): load_code_object(obj, arch=ARCHS["gfx1100"])
  with pytest.raises(PrepError, match="takes 2 buffers and 1 variables, the program has 2 and 0"): load_code_object(obj, nbufs=2, nvars=0)
  with pytest.raises(PrepError, match="no kernel 'other'"): load_code_object(obj, name="other")
  with pytest.raises(PrepError, match="bad ELF"): load_code_object(b"\x7fELF" + b"\0" * 10)

def program_for(name: str, uops: list[UOp], arch: str, lib: bytes | None = None) -> UOp:
  """The compiled PROGRAM codegen hands the pipeline: (SINK, DEVICE, LINEAR, SOURCE, BINARY), arg ProgramSpec."""
  src = AMDLLVMRenderer(arch).render(name, uops)
  spec = ProgramSpec(name, vars=tuple(u for u in uops if u.op is Ops.DEFINE_VAR))
  return UOp(Ops.PROGRAM, src=(UOp(Ops.SINK, arg=name), UOp(Ops.DEVICE, arg="AMD"), UOp(Ops.LINEAR, src=tuple(uops)), UOp(Ops.SOURCE, arg=src),
                               UOp(Ops.BINARY, arg=lib if lib is not None else compiler(arch).compile(src))), arg=spec)

class RecordingHCQ(AMDHCQ):
  """An AMD HCQ object that records what prep tells it."""
  def __init__(self, arch: str) -> None:
    super().__init__("AMD", arch)
    self.registered: list[tuple[str, int, str, int]] = []
  def register_program(self, name, uops, data, image) -> None: self.registered.append((name, len(uops), data.name, len(image)))

def test_pm_prep_program_rewrite():
  prog = program_for("r_64_8", loop_kernel(), "gfx1100")
  lib = prog.src[4].arg
  out = graph_rewrite(prog, pm_prep_program)
  assert out.op is Ops.PROGRAM and isinstance(out.arg, AMDProgramData) and out.src[0].arg == "AMD" and out.src[1].op is Ops.BINARY
  want, image = load_code_object(lib, name="r_64_8")
  assert out.arg == want and out.src[1].arg == image and out.arg.arg_offsets == (0, 8, 16)
  # prepared programs are left alone (the rewrite reaches a fixed point)
  assert graph_rewrite(out, pm_prep_program) is out
  # a code object that does not take the program's arguments is refused
  bad = program_for("r_64_8", lds_kernel(), "gfx1100", lib=lib)
  with pytest.raises(PrepError, match="the program has 2 and 0"): graph_rewrite(bad, pm_prep_program)

def test_prep_tells_the_device_and_checks_its_arch():
  prog = program_for("r_64_8", loop_kernel(), "gfx1100")
  hcq = RecordingHCQ("gfx1100")
  out = graph_rewrite(prog, pm_prep_program, hcq)
  assert hcq.registered == [("r_64_8", len(prog.src[2].src), "r_64_8", len(out.src[1].arg))]
  with pytest.raises(PrepError, match="expected gfx942"): graph_rewrite(prog, pm_prep_program, RecordingHCQ("gfx942"))

def test_hooks_answer_with_one_rule_set_each():
  # the plugin manager asks only the plugin that declared the device: the hooks name no device and no interface
  import plugin_amd
  from plugin_amd.lower import pm_lower
  from plugin_amd.bufferize import pm_bufferize
  for dev in ("AMD", "AMD:1"):
    assert plugin_amd.core_pm_prep_program(device=dev) is pm_prep_program
    assert plugin_amd.core_pm_lower(device=dev) is pm_lower and plugin_amd.core_pm_bufferize(device=dev) is pm_bufferize
