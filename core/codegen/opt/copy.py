"""Copy kernels that transpose (a.T.contiguous(), NCHW <-> NHWC): the loop order around their register tiles."""
from __future__ import annotations
from core.ir.ops import Ops, AxisType
from core.codegen.opt.kernel import Kernel
from core.codegen.opt.expander import contiguous_offset, strided_offset

# input rows at least this many elements apart (a tile reads one per lane of the stored vector) are each a page or more apart: the
# tile's lines are gone before a tile column further out would read the rest of them, so the tiles run along the input's rows
# (across) innermost. Rows closer than that (NHWC -> NCHW: 64 channels, 256 bytes) stay in the cache anyway, and that order would
# only make the output rows' tiles jump between many rows (one Zen 3 thread, A/B in one process, 32x56x56x64: 4.2-4.4 ms with
# the tiles along the channels innermost, 3.5-3.8 without; 32x64x56x56 the other way, rows 3136 apart: 2.4 with, 3.8-4.6 without)
FAR_ROWS = 512

def rows_far_apart(k: Kernel) -> bool:
  """The transposing tile's input rows, one per lane of the stored vector, are at least FAR_ROWS elements apart."""
  st = next(u for u in k.ast.toposort() if u.op is Ops.STORE)
  vec = next((r for r in k.of_type(AxisType.UPCAST) if contiguous_offset(st.src[0].src[1], r) is not None), None)
  if vec is None: return True
  strides = [s[1] for u in k.ast.toposort() if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX
             and (s := strided_offset(u.src[0].src[1], vec)) is not None and s[1] != 1]
  return not strides or max(strides) >= FAR_ROWS
