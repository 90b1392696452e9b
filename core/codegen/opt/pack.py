"""PACK: copy the block of an input that a loop reuses into a thread-private contiguous buffer before that loop runs."""
from __future__ import annotations
import mmap
from core.ir.dtype import AddrSpace
from core.ir.ops import UOp, Ops, AxisType
from core.helpers import prod

# bytes of one packed buffer (a stack array per thread; the CPU plugin's kernel threads have 8 MiB stacks). 512 KiB is a
# 16-float panel of K=8192: unpacked, those rows sit a page apart and share a few cache sets (1024x4096x1024 ran 41 GFLOP/s)
PACK_MAX_BYTES = 512 * 1024
# a VIPT L1 indexes its sets within a page (set span = size / ways <= page), so lines whose rows lie a page or more apart may
# share a set: a copy step reads at most one output vector's rows of them (_row_group_loops)
PAGE_BYTES = mmap.PAGESIZE
PACK_ROWS = True   # a gathering copy reads rows (pack_loads' row_bytes; a switch for comparisons)

def _axis_key(r: UOp) -> tuple[int, int]:
  from core.codegen.opt.kernel import axis_key
  return axis_key(r)

def linear_strides(idx: UOp, rngs: list[UOp]) -> dict[UOp, int] | None:
  """The coefficient of each range in idx when idx is `sum(range*coef) + (terms using none of rngs)`, else None."""
  from core.ir.symbolic import split_sum
  if (parts := split_sum(idx)) is None: return None
  out: dict[UOp, int] = {}
  for t, c in parts[0]:
    used = [r for r in rngs if r in t.toposort()]
    if not used: continue
    if t.op is not Ops.RANGE or t in out: return None   # a range inside div/mod or a product: no fixed stride
    out[t] = c
  return out if set(out) == set(rngs) else None

def read_index(index: UOp) -> UOp:
  """The address math of INDEX `index` where it is read: a gated index wrapped into the buffer (MOD by a constant, so a read
  the gate skips still points inside) equals its unwrapped form wherever the gate is true, which is all the copy keeps."""
  i = index.src[1]
  return i.src[0] if len(index.src) > 2 and i.op is Ops.MOD and i.src[1].op is Ops.CONST else i

def _store_strides(ast: UOp, rngs: list[UOp]) -> dict[UOp, int]:
  """The stride of each of `rngs` in the kernel's (first) output index, for those it uses linearly."""
  st = next((u for u in ast.toposort() if u.op is Ops.STORE and u.src[0].op is Ops.INDEX), None)
  if st is None: return {}
  used = [r for r in rngs if r in st.src[0].src[1].toposort()]
  if not used: return {}
  return linear_strides(st.src[0].src[1], used) or {}

def _row_group_loops(inner: list[UOp], strides: dict[UOp, int], out_strides: dict[UOp, int], itemsize: int) -> set[UOp]:
  """The register axes of a load that its copy steps through as loops: the output's axes other than the one its vectors run
  along, where they step the source a page or more. One copy step over all 64 columns of an x @ W.T panel read 64 rows of W,
  4 KiB apart at K=1024: 64 lines of one L1 set (12 ways on the Zen 5), and the copy of 16 MiB of W cost about 3 ms a call
  whatever the rows. Now a step reads one vector's rows (16 on AVX-512, 8 on AVX2), and the panel's stores stay vectors."""
  if not any(out_strides.get(r) == 1 for r in inner): return set()
  return {r for r, o in out_strides.items() if o != 1 and abs(strides[r]) * itemsize >= PAGE_BYTES}

def packable_loads(ast: UOp, a: UOp) -> list[UOp]:
  """Loads from kernel buffers that sit inside a reduction, don't depend on loop `a` and read at a fixed stride along every
  range nested inside `a`: each is read again on every iteration of `a`, so a packed copy is reused that often."""
  from core.codegen.opt.kernel import range_size
  key = _axis_key(a)
  out = []
  for u in ast.toposort():
    if u.op is not Ops.LOAD or u.src[0].op is not Ops.INDEX or u.src[0].src[0].op is not Ops.PARAM: continue
    rngs = [r for r in u.toposort() if r.op is Ops.RANGE]
    if a in rngs or not any(r.arg[1] in (AxisType.REDUCE, AxisType.UNROLL) for r in rngs): continue
    if any(r.arg[1] is AxisType.OUTER for r in rngs): continue   # already a copy (of an earlier PACK)
    inner = [r for r in rngs if _axis_key(r) > key]
    if not inner or any(range_size(r) is None for r in inner) or prod(range_size(r) or 1 for r in inner) * u.dtype.itemsize > PACK_MAX_BYTES:
      continue
    if linear_strides(read_index(u.src[0]), inner) is None: continue
    out.append(u)
  return out

def _row_loop(inner: list[UOp], regs: list[UOp], strides: dict[UOp, int], rows: int) -> UOp | None:
  """The copy loop to read `rows` neighbours of a step: the one along which the source is contiguous, where the copy's vectors
  gather (none of its register axes steps the source by 1) and `rows` divides it."""
  from core.codegen.opt.kernel import range_size
  if rows < 2 or not regs or any(abs(strides[r]) == 1 for r in regs): return None
  return next((r for r in inner if r not in regs and abs(strides[r]) == 1 and (range_size(r) or 1) % rows == 0), None)

def pack_loads(ast: UOp, a: UOp, row_bytes: int = 0) -> UOp | None:
  """Each packable load of `a` becomes a read of a DEFINE_REG buffer filled by a copy loop that runs once per iteration of the
  loops outside `a` (it uses none of the ranges inside `a`, so the linearizer places it there). The copy keeps the register
  axes of the load (the expander vectorizes it like the kernel) and gets fresh OUTER ranges for the others. A copy whose
  vectors gather (q @ k.T's k, x @ W.T's W) also unrolls its contiguous loop by `row_bytes` (a register) of it (_row_loop):
  the expander then loads those rows whole and transposes them in registers, not a scalar load and an insert a lane. None
  when no load qualifies."""
  from core.codegen.opt.kernel import range_size, REGISTER_AXES
  loads = packable_loads(ast, a)
  if not loads: return None
  next_id = max(u.arg[0] for u in ast.toposort() if u.op is Ops.RANGE) + 1
  next_reg = max((u.arg + 1 for u in ast.toposort() if u.op is Ops.DEFINE_REG and isinstance(u.arg, int)), default=0)
  sub: dict[UOp, UOp] = {}
  for ld in loads:
    key = _axis_key(a)
    inner = [r for r in ld.toposort() if r.op is Ops.RANGE and _axis_key(r) > key]
    strides = linear_strides(read_index(ld.src[0]), inner)
    assert strides is not None
    # the panel's layout: loops first, in the order the kernel nests them (its reads walk the panel forwards), then register
    # axes, the ones the output is contiguous along last (the expander's vector lanes are picked along the output, so they
    # must be neighbours here too), within those the largest source stride outermost
    out_strides = _store_strides(ast, [r for r in inner if r.arg[1] in REGISTER_AXES])
    order = sorted(inner, key=lambda r: (r.arg[1] in REGISTER_AXES, _axis_key(r) if r.arg[1] not in REGISTER_AXES else (0, 0),
                                         r in out_strides, -abs(out_strides.get(r, 0)), -abs(strides[r]), _axis_key(r)))
    pstride, acc = {}, 1
    for r in reversed(order):
      pstride[r] = acc
      acc *= range_size(r) or 1
    copy_rng: dict[UOp, UOp] = {}
    loops = _row_group_loops(inner, strides, out_strides, ld.dtype.itemsize)
    regs = [r for r in inner if r.arg[1] in REGISTER_AXES and r not in loops]
    rows = row_bytes // ld.dtype.itemsize if PACK_ROWS else 0
    row = _row_loop(inner, regs, strides, rows)
    # the copy's loops nest by the source's strides instead, largest outermost: it reads the input forwards
    for r in sorted(order, key=lambda r: (r in regs, -abs(strides[r]), _axis_key(r))):
      if r in regs and row is not None:
        # ranges of the copy's own, so its register axes and the rows expand apart from the kernel's (expander.register_groups)
        copy_rng[r] = UOp.range(range_size(r) or 1, next_id, r.arg[1])
        next_id += 1
      elif r in regs: copy_rng[r] = r
      elif r is row:
        copy_rng[r] = UOp.range((range_size(r) or 1) // rows, next_id, AxisType.OUTER) * rows + UOp.range(rows, next_id + 1, AxisType.UPCAST)
        next_id += 2
      else:
        # OUTER: a loop of the optimizer's own; no Opt applies to it (a THREAD split of a copy would leave each block's
        # panel partly filled)
        copy_rng[r] = UOp.range(range_size(r) or 1, next_id, AxisType.OUTER)
        next_id += 1
    buf = UOp(Ops.DEFINE_REG, ld.dtype.ptr(acc, AddrSpace.REG), (), next_reg)
    next_reg += 1
    def flat(m: dict[UOp, UOp]) -> UOp:
      terms = [m[r] * pstride[r] if pstride[r] != 1 else m[r] for r in order]
      out = terms[0]
      for t in terms[1:]: out = out + t
      return out
    copy = buf.index(flat(copy_rng)).store(ld.substitute(copy_rng))
    for r in sorted({x for v in copy_rng.values() for x in v.toposort() if x.op is Ops.RANGE}, key=_axis_key, reverse=True): copy = copy.end(r)
    sub[ld] = buf.after(copy).index(flat({r: r for r in order})).load(dtype=ld.dtype)
  return ast.substitute(sub)
