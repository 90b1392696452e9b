"""Renderer base: the capabilities codegen reads, and render(name, uops) -> source text."""
from __future__ import annotations
from typing import TYPE_CHECKING, Any, ClassVar
from core.ir.dtype import DType, dtypes
from core.ir.ops import Ops
# a type only: tensor_core's dataclasses and layout checks (~2 ms) load with the renderers that offer tensor cores, not with every one
if TYPE_CHECKING: from core.device.tensor_core import TensorCore

def id_sizes(uops: list[Any], prefix: str) -> list[Any]:
  """The sizes of a linearized kernel's thread ids named `prefix` on their three axes ("gidx": the launch's groups, "lidx": the
  work-items in a group), 1 on an axis without one: what a GPU renderer declares and checks against its limits."""
  sizes: list[Any] = [1, 1, 1]
  for u in uops:
    if u.op is Ops.SPECIAL and u.arg.startswith(prefix): sizes[int(u.arg[len(prefix):])] = u.src[0].arg
  return sizes

class Renderer:
  """Describes what a target can do and turns a linearized kernel into source. Subclasses override the class attributes; those
  without ClassVar may also differ per instance (a CPU renderer takes the SIMD facts of the CPU model its DEV names)."""
  device: str = ""
  arch: str | None = None
  suffix: ClassVar[str] = ""                                # name of the renderer ("C", "LLVM", ...), for DEBUG output
  has_local: ClassVar[bool] = False                         # workgroups with local ids (lidx)
  has_shared: ClassVar[bool] = False                        # DEFINE_LOCAL shared memory
  global_max: ClassVar[tuple[int, ...] | None] = None       # max global launch dims; None: no thread ids, every axis is a loop
  local_max: ClassVar[tuple[int, ...] | None] = None
  shared_max: ClassVar[int] = 0                             # bytes of shared memory per workgroup
  supports_float4: ClassVar[bool] = False                   # vector loads/stores
  simd_width: int = 1                                       # bytes of the widest SIMD register (64: AVX-512, 32: AVX2, 16: SSE/NEON);
                                                            # <= 1: unknown, the optimizer assumes 16 when supports_float4
  simd_regs: int = 16                                       # SIMD registers (32: AVX-512, AArch64; 16: AVX2): sizes matmul register tiles
  masked_vectors: ClassVar[bool] = False                    # vector loads/stores may have a gate per lane (INDEX(buf, i, <bool x n>))
  split_tile_rows: ClassVar[bool] = False                   # a transposing tile of rows wider than a register loads each a register at
                                                            # a time, ordered by groups (expander, linearize.tile_keys): the renderer
                                                            # tests streamed stores' alignment once, not per store
  vector_dtypes: frozenset[DType] = frozenset()             # element types beyond the expander's usual ones it may make vectors of
                                                            # (the host LLVM renderer's bfloat16 where the CPU has a bf16 dot product)
  threads: ClassVar[int] = 0                                # worker threads running GLOBAL blocks (gidx0); 0: no thread pool
  l2_bytes: int = 0                                         # bytes of one core's L2 cache; 0: unknown
  large_conv_in_place: bool = False                         # an undilated 3x3 conv on the thread pool whose output channels fill
                                                            # whole channel tiles (2 vectors) reads its padded input in place
                                                            # (gated loads) at any size, not through a padded copy (core.tensor.
                                                            # conv._pad_in_place), in thread blocks of images that fit the L2
                                                            # (heuristic._image_blocks); False: only small ones (PAD_IN_PLACE_BYTES)
  panel_l2_share: int = 2                                   # a product's input within 1/this of the L2 is read in place (panel_budget)
  stream_min_bytes: int = 0                                 # a kernel whose buffers total this much stores by streaming (non-temporal)
                                                            # stores, no cache keeping its output; 0: never or unknown (opt.copy)
  scratch_bytes: int = 0                                    # bytes of a per-thread array (DEFINE_REG) that stays in a near cache: a
                                                            # row kernel stashes its exps there (core.codegen.stash); 0: private
                                                            # arrays are slow (a GPU spills them to its local memory)
  scaled_exp2: bool = False                                 # its rules lower an EXP2 whose arg is decompose.EXP2_SCALED (2**x times
                                                            # 2**EXP2_SCALE): a softmax's stashed exps may take it (core.codegen.stash)
  fma_exp_shift: bool = False                               # with scaled_exp2, a softmax's exp2 argument (x - max) * (1 / ln 2) is one
                                                            # multiply-add with a per-row pivot (core.codegen.stash._fma_shift): its
                                                            # MULACC rounds once (a fused multiply-add), else the product's rounding
                                                            # before the add would lose the difference
  max_ahead: bool = False                                   # a row kernel's max for the next row runs after this row's reductions
                                                            # (core.codegen.stash.max_ahead): where its exp pass is compute-bound
  big_l2_tiles: ClassVar[bool] = False                      # where the L2 holds 2 MiB or more, a plain float32 product takes a 4x6
                                                            # register tile and prefetches its packed panel (heuristic.big_l2): the
                                                            # host LLVM renderer's ran faster, the C renderer's slower
  odd_row_channel_tile: ClassVar[bool] = False              # a conv whose rows hold an odd number of whole vectors takes the channel
                                                            # tile (heuristic.CHANNEL_ODD_ROWS): the host LLVM renderer's ran faster,
                                                            # the C renderer's source slower
  supported_dtypes: ClassVar[frozenset[DType]] = frozenset(d for d in dtypes.all if d not in dtypes.fp8s and d is not dtypes.bfloat16)
  has_images: ClassVar[bool] = False                        # IMAGE=1/2 may read and write buffers as 2-D RGBA images
  image_max: ClassVar[tuple[int, int]] = (0, 0)             # the largest image, (width, height) in pixels
  has_atomics: ClassVar[bool] = False
  max_buffer_size: ClassVar[int | None] = None              # bytes; None: no limit beyond memory
  extra_matcher: Any = None                                 # PatternMatcher applied before render, or None
  tensor_cores: tuple[TensorCore, ...] = ()                 # matrix units the optimizer's TC option may use (Ops.WMMA)

  def panel_budget(self) -> int:
    """Bytes of a product's column-side input that stay in the L2 for every row block when read in place (the other input's
    rows and the output share the rest). The optimizer reads inputs within it in place (core.codegen.opt.heuristic
    _panel_in_place); a CPU renderer has its in-place loads of bigger ones prefetch the next panel (plugin_cpu.prefetch)."""
    return self.l2_bytes // self.panel_l2_share

  def own_kernel(self, ast: Any, name: str) -> tuple[str, tuple[int, ...], dict[str, int]] | None:
    """A kernel this renderer writes whole for kernel `ast` (before the optimizer): (source, global size, estimates), its
    arguments the AST's PARAMs in slot order and then its block index; None (the default, and most kernels): the optimizer and
    lowering make it (core.codegen.program). The CPU's AMX bf16 matmul is one (plugin_cpu/amx.py)."""
    return None

  def rules_ctx(self, sink: Any) -> Any:
    """The ctx its extra_matcher's rules get for kernel `sink` (lowered, before the rules): made per kernel, so what a rule
    finds once in the whole kernel lives as long as that rewrite. None by default."""
    return None

  def render(self, name: str, uops: list[Any]) -> str: raise NotImplementedError(f"{type(self).__name__} must implement render(name, uops)")
  def __repr__(self) -> str: return f"{type(self).__name__}(device={self.device!r})"
