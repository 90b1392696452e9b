"""The NV prep rules: a compiled PROGRAM whose BINARY is a cubin -> PROGRAM(DEVICE, BINARY(image), arg=NVProgramData).

The image is the kernel's code as the GPU runs it, not the cubin: the `.text.<kernel>` bytes at offset 0 (upload it 128-byte
aligned, the section's alignment; core's pack stage aligns program pieces to 256), followed by each extra constant bank the
kernel reads (`.nv.constant<N>.<kernel>`, N != 0: ptxas' literal pool, bank 2 on sm_8x), each 256-byte aligned, for the QMD to
bind. Why not the whole cubin: a QMD launch needs only the code's address plus the numbers read here (registers, shared
memory, where the parameters sit in constant bank 0), and constant bank 0 is built per launch from the kernargs, so nothing
else of the ELF reaches the GPU. The code is position independent as long as its text has no relocations; ptxas leaves
none for the kernels our renderers emit, and a cubin that has some (or module-scope globals, which need a loader to place
them and fill bank 4's address table) is refused with a PrepError instead of being loaded wrong."""
from __future__ import annotations
from dataclasses import dataclass
from typing import Protocol
from core.codegen.program import compiled_program
from core.helpers import to_function_name
from core.hcq.queue_ir import ProgramData
from core.ir.ops import UOp, Ops
from core.ir.pattern import PatternMatcher
from plugin_nv.cubin import Cubin, CubinError, Kernel

class PrepError(RuntimeError):
  """A cubin that does not fit the program it was compiled for, or that this plugin can't load."""

CONST_BANK_ALIGN = 256

@dataclass(frozen=True)
class NVProgramData(ProgramData):
  """ProgramData plus what an NV launch (the QMD) needs. The kernarg buffer is constant bank 0 itself (`cbank0_size` bytes; the
  driver's fields sit below the parameters, which start at `cbank0_offset`: `arg_offsets` count from the bank's start) followed
  by room for the launch's QMD (kernarg_layout). Offsets in the image: code at `code_offset` (`code_size` bytes); `const_banks`: (bank, image offset, size)."""
  arch: str = ""
  regs: int = 0
  shared_size: int = 0
  cbank0_offset: int = 0
  cbank0_size: int = 0
  max_threads: tuple[int, ...] = ()   # (x, y, z) from .maxntid or .reqntid; () when the kernel names neither
  local_size: int = 0                 # local memory per thread (EIATTR_FRAME_SIZE)
  stack_size: int = 0                 # EIATTR_MIN_STACK_SIZE
  code_offset: int = 0
  code_size: int = 0
  const_banks: tuple[tuple[int, int, int], ...] = ()
  qmd_offset: int = 0                 # the launch's QMD goes at the first 256-byte aligned address from kernargs + qmd_offset

QMD_ALIGN = 256   # SEND_PCAS_A takes the QMD address >> 8

def kernarg_layout(cbank0_size: int, arch: str) -> tuple[int, int]:
  """(qmd_offset, kernarg_size) of a launch's kernarg buffer: constant bank 0 as the kernel sees it (the driver's part, then
  the parameters at cbank0_offset; core's host patches write the parameters there), then room for the QMD at a 256-byte aligned
  address (the kernarg buffer itself is only 64-byte aligned). The launch's pushbuffer writes the QMD there (lower.py)."""
  from plugin_nv.qmd import ARCHS
  qmd_size = ARCHS[arch].qmd.size if arch in ARCHS else max(a.qmd.size for a in ARCHS.values())
  qmd_offset = (cbank0_size + 15) // 16 * 16
  return qmd_offset, qmd_offset + QMD_ALIGN - 16 + qmd_size

class NVArchDevice(Protocol):
  """What prep asks of the NV HCQ device it prepares for: the arch it runs ("sm_90"), and `register_program`, told of each
  prepared kernel (its linearized uops, data and image: a software GPU files a host build of it; hardware needs nothing)."""
  arch: str
  def register_program(self, name: str, uops: tuple[UOp, ...], data: NVProgramData, image: bytes) -> None: ...

def kernel_image(k: Kernel) -> tuple[bytes, tuple[tuple[int, int, int], ...]]:
  """The image (code, then the extra constant banks) and (bank, offset, size) of each bank in it."""
  if k.relocs:
    raise PrepError(f"kernel {k.name}: its code has {len(k.relocs)} relocations ({', '.join(f'type {r.type} at {r.offset:#x} to {r.symbol}' for r in k.relocs)}); "
                    "this plugin loads position-independent kernels only (no calls through pointers, no module globals)")
  image, banks = bytearray(k.code), []
  for bank, data in sorted(k.const_banks.items()):
    image += bytes(-len(image) % CONST_BANK_ALIGN)
    banks.append((bank, len(image), len(data)))
    image += data
  return bytes(image), tuple(banks)

def load_cubin(binary: bytes, name: str, nbufs: int | None = None, nvars: int | None = None, arch: str | None = None) -> tuple[NVProgramData, bytes]:
  """Reads kernel `name` of a cubin and checks it takes `nbufs` buffer addresses then `nvars` int32 variables (when given)
  and was built for `arch` (when given)."""
  try:
    cubin = Cubin(binary)
    if arch is not None and cubin.arch != arch: raise PrepError(f"kernel {name}: the cubin is for {cubin.arch}, the device runs {arch}")
    if mod := cubin.module_data(): raise PrepError(f"kernel {name}: the cubin has module-scope data {mod}, which needs a loader this plugin does not have")
    k = cubin.kernel(name)
  except CubinError as e: raise PrepError(f"kernel {name}: bad cubin: {e}") from e
  sizes = [p.size for p in k.params]
  if nbufs is not None and nvars is not None:
    if len(sizes) != nbufs + nvars:
      raise PrepError(f"kernel {name}: the cubin's kernel takes {len(sizes)} parameters, the program has {nbufs} buffers and {nvars} variables "
                      f"({nbufs + nvars}): was the binary compiled from another kernel's source?")
    if sizes != [8] * nbufs + [4] * nvars:
      raise PrepError(f"kernel {name}: parameter sizes {sizes}, expected {nbufs} buffer addresses (8 bytes) then {nvars} int32 variables (4 bytes)")
  image, banks = kernel_image(k)
  qmd_offset, kernarg_size = kernarg_layout(k.cbank0_size, cubin.arch)
  data = NVProgramData(name=k.name, kernarg_size=kernarg_size, kernarg_align=max([4] + sizes), arg_offsets=tuple(k.cbank0_offset + p.offset for p in k.params),
                       arch=cubin.arch, regs=k.regs, shared_size=k.shared_size, cbank0_offset=k.cbank0_offset, cbank0_size=k.cbank0_size,
                       max_threads=k.max_threads or k.req_threads, local_size=k.frame_size, stack_size=k.min_stack_size,
                       code_offset=0, code_size=len(k.code), const_banks=banks, qmd_offset=qmd_offset)
  return data, image

def _prep(ctx: NVArchDevice | None, p: UOp, device: UOp, linear: UOp, binary: UOp) -> UOp:
  # ctx None: a caller without a device (compile-only, tests): any arch is accepted. Otherwise the NV HCQ device says its arch.
  arch = None
  if ctx is not None:
    if not isinstance(arch := getattr(ctx, "arch", None), str):
      raise PrepError(f"kernel {p.arg.name}: the NV device {type(ctx).__name__} passed to prep has no `arch` string (e.g. 'sm_90')")
  nbufs = sum(1 for u in linear.src if u.op is Ops.PARAM)
  data, image = load_cubin(binary.arg, to_function_name(p.arg.name), nbufs, len(p.arg.vars), arch)
  if ctx is not None: ctx.register_program(p.arg.name, linear.src, data, image)
  return UOp(Ops.PROGRAM, src=(device, UOp(Ops.BINARY, arg=image)), arg=data)

# a prepared PROGRAM (DEVICE, BINARY) no longer matches compiled_program, so the rewrite reaches a fixed point
pm_prep_program = PatternMatcher([(compiled_program, _prep)], name="nv prep program")
