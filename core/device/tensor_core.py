"""Tensor cores as data: a matrix unit's shape, dtypes, and which matrix element each lane of a warp/simdgroup holds.

A `TensorCore` is what a renderer offers (`Renderer.tensor_cores`): the optimizer's TC option (core.codegen.opt.tc) reads its
layouts to decide which elements each lane loads into its fragments and where each lane stores its results; the PYTHON device
and host builds run `Ops.WMMA` from the same layouts, lane by lane. Layouts here are the vendors' documented fragment layouts
(a fact about the hardware, kept in one place so the renderers, the interpreter and the MOCK builds cannot disagree).
"""
from __future__ import annotations
from dataclasses import dataclass
from core.ir.dtype import DType, dtypes

@dataclass(frozen=True)
class LaneLayout:
  """Where the elements of one matrix operand live: element (row, col) of a `rows` x `cols` matrix is held by one lane as one
  of its fragment's elements. The layouts of today's matrix units are bit permutations: each bit of the lane id and each bit
  of the element index is one bit of the row or of the column. `lane_bits[i]` names the ("r" | "c", bit) that lane-id bit i
  sets, `elem_bits[i]` the one that element-index bit i sets."""
  rows: int
  cols: int
  lane_bits: tuple[tuple[str, int], ...]
  elem_bits: tuple[tuple[str, int], ...]

  @property
  def elements(self) -> int: return 1 << len(self.elem_bits)
  @property
  def lanes(self) -> int: return 1 << len(self.lane_bits)

  def coords(self, lane: int, elem: int) -> tuple[int, int]:
    """(row, col) of element `elem` of lane `lane`'s fragment."""
    rc = {"r": 0, "c": 0}
    for i, (d, b) in enumerate(self.lane_bits): rc[d] |= ((lane >> i) & 1) << b
    for i, (d, b) in enumerate(self.elem_bits): rc[d] |= ((elem >> i) & 1) << b
    return rc["r"], rc["c"]

  def owner(self, row: int, col: int) -> tuple[int, int]:
    """(lane, element) that holds element (row, col): the inverse of coords."""
    rc, lane, elem = {"r": row, "c": col}, 0, 0
    for i, (d, b) in enumerate(self.lane_bits): lane |= ((rc[d] >> b) & 1) << i
    for i, (d, b) in enumerate(self.elem_bits): elem |= ((rc[d] >> b) & 1) << i
    return lane, elem

  def check(self) -> None:
    """Every (row, col) is held by exactly one (lane, element): the bits cover the row and column bits once each."""
    bits = sorted(self.lane_bits + self.elem_bits)
    want = sorted([("r", b) for b in range(self.rows.bit_length() - 1)] + [("c", b) for b in range(self.cols.bit_length() - 1)])
    if bits != want or self.rows & (self.rows - 1) or self.cols & (self.cols - 1):
      raise ValueError(f"lane layout {self} does not map lanes x elements one-to-one onto a {self.rows}x{self.cols} matrix")

@dataclass(frozen=True)
class TensorCore:
  """D = A @ B + C on one warp: A is M x K and B is K x N in `dtype_in`, C and D are M x N in `dtype_acc`; `threads` lanes each
  hold `a.elements`, `b.elements` and `c.elements` values of them. `vendor` names the instruction family ("METAL", "NV");
  `key` is what an `Ops.WMMA` carries as its arg, so every backend finds the same description (tensor_core(key))."""
  vendor: str
  dims: tuple[int, int, int]
  dtype_in: DType
  dtype_acc: DType
  threads: int
  a: LaneLayout
  b: LaneLayout
  c: LaneLayout

  def __post_init__(self) -> None:
    m, n, k = self.dims
    for lay, (r, c) in ((self.a, (m, k)), (self.b, (k, n)), (self.c, (m, n))):
      lay.check()
      if (lay.rows, lay.cols) != (r, c) or lay.lanes != self.threads: raise ValueError(f"{self.key}: layout {lay} does not fit {r}x{c}")
  @property
  def key(self) -> str:
    m, n, k = self.dims
    return f"{self.vendor}:m{m}n{n}k{k}:{self.dtype_in.name}:{self.dtype_acc.name}"
  @property
  def elements(self) -> tuple[int, int, int]: return (self.a.elements, self.b.elements, self.c.elements)

# Apple simdgroup_matrix 8x8 (simdgroup_float8x8 / simdgroup_half8x8, `thread_elements()`): lane l holds the pair
# (row, col), (row, col+1) with row = l>>1 & 3 | (l>>4 & 1) << 2 and col = (l & 1) << 1 | (l>>3 & 1) << 2, the same for A, B and
# C. Metal does not document it; it is the Morton order reported by metal-flash-attention and checked on hardware there, and
# nothing here can confirm it (plugins/metal/README.md).
_METAL_8x8 = LaneLayout(8, 8, (("c", 1), ("r", 0), ("r", 1), ("c", 2), ("r", 2)), (("c", 0),))

def _metal(dt: DType) -> TensorCore:
  return TensorCore("METAL", (8, 8, 8), dt, dtypes.float32, 32, _METAL_8x8, _METAL_8x8, _METAL_8x8)

# NVIDIA mma.sync.aligned.m16n8k16.row.col (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type"): with
# groupID = lane >> 2 and tig = lane & 3, A (16x16) element i is row groupID + 8*(i>>1 & 1), col 2*tig + (i & 1) + 8*(i >> 2);
# B (16x8) element i is row 2*tig + (i & 1) + 8*(i >> 1), col groupID; C (16x8) element i is row groupID + 8*(i >> 1),
# col 2*tig + (i & 1).
_NV_A = LaneLayout(16, 16, (("c", 1), ("c", 2), ("r", 0), ("r", 1), ("r", 2)), (("c", 0), ("r", 3), ("c", 3)))
_NV_B = LaneLayout(16, 8, (("r", 1), ("r", 2), ("c", 0), ("c", 1), ("c", 2)), (("r", 0), ("r", 3)))
_NV_C = LaneLayout(16, 8, (("c", 1), ("c", 2), ("r", 0), ("r", 1), ("r", 2)), (("c", 0), ("r", 3)))

def _nv(dt: DType) -> TensorCore: return TensorCore("NV", (16, 8, 16), dt, dtypes.float32, 32, _NV_A, _NV_B, _NV_C)

# the tensor cores of each vendor, in the order the optimizer tries them
TENSOR_CORES: dict[str, tuple[TensorCore, ...]] = {
  "METAL": (_metal(dtypes.float16), _metal(dtypes.float32)),
  "NV": (_nv(dtypes.float16), _nv(dtypes.bfloat16)),
}

def tensor_core(key: str) -> TensorCore:
  """The TensorCore whose `key` is `key` (an Ops.WMMA's arg)."""
  for tcs in TENSOR_CORES.values():
    for tc in tcs:
      if tc.key == key: return tc
  raise KeyError(f"no tensor core {key!r}; known: {', '.join(tc.key for tcs in TENSOR_CORES.values() for tc in tcs)}")
