"""Peeling a loop's partial last iteration off on the linear kernel (the LLVM renderer's), so the others run without masks."""
from __future__ import annotations
from core.ir.dtype import PtrDType, dtypes
from core.ir.ops import UOp, Ops
from plugin_cpu.prefetch import is_global_param
from plugin_cpu.streaming import NT_ARG, buffer_tested

# A row of 1000 floats in 16-lane vectors is 62 whole vectors and a half (PADTO): each iteration of the loops over it computed
# the gate `ridx < 62` and took its loads, selects and stores masked, where only the last needs it. With that iteration peeled
# off after the loop, the loop's gates are true (LLVM drops the masks) and the copy's false. Bits unchanged (the same iterations
# in the same order). One Zen 4 thread, softmax 4096x1000's kernel, A/B by thread time in one process, medians of 40 (load
# 17-18): L2-resident rows (32 a block, called 64 times) 0.607 -> 0.525 ms, from memory 1.30-1.33 -> 1.22-1.27 ms; in
# hand-edited IR the exp loop alone gave all of it (its row max and normalize loops alone 0.98-1.0x). A loop that stores plainly
# to a buffer keeps its masks. One whose stores stream, gated, at an index a known multiple of their width (softmax's
# normalize loop, 32-byte pieces of rows 4000 bytes apart) is peeled: each piece tests its buffer's alignment, once for the
# kernel (streaming.buffer_tested), and the copy's index terms are folded to constants (_folded), so its whole
# piece keeps the loop's width and streams too (with ridx * 16 left a product, the copy's index was known a multiple of 2 only: it took
# one 64-byte store, masked, plain, into a line the next row streams to, and the loop so peeled ran 1.6x the time). The loop
# had computed the mask and tested the address for each piece: ~18 instructions a vector, ~7 peeled. The 2-core Zen 5, native,
# softmax 4096x1000's kernel with and without, sampled in turn in one process, medians of 150: its compute alone (every row
# block on one row, in L1) 1.12x and 1.15x the speed; from memory in a slow spell 1.01-1.02x (both at the copy loop's rate);
# in a fast one (copy at 91 GB/s, 100 samples) 1.10x. The real kernels, Jit-captured, slow spells: 1.00, 1.00, 1.02, 1.01x.

def _tail_gate(u: UOp, r: UOp, last: int) -> bool:
  return u.op is Ops.CMPLT and u.src[0] is r and u.src[1].op is Ops.CONST and u.src[1].arg == last

def _global_store(u: UOp) -> bool:
  return u.op is Ops.STORE and (u.src[0].op is not Ops.INDEX or is_global_param(u.src[0].src[0]))

def _innermost_peel(body: list[UOp], simd_bytes: int) -> bool:
  return not any(u.op is Ops.RANGE or _global_store(u) and not (simd_bytes and u.arg == NT_ARG and buffer_tested(u, simd_bytes)) for u in body)

# A loop over a padded axis's tiles (a conv's channel tile of 3 pixels, AVX2's row of 56 padded to 57: 19 blocks) whose tile
# loops nest inside, reading a packed panel (a REG buffer), and whose padded outputs' stores are gated: peeled, the copy's false
# gate leaves the padded pixel's loads zero and its stores gone, so LLVM drops its accumulators' FMAs (1 in 57 of that conv's);
# the other blocks run ungated (LLVM had unswitched the loop on the gate, both copies computing all 3 pixels). Not where a
# store streams (above), nor over a panel read in place (no packed one): the copy, outside the row block loop, took the next
# panel's prefetches again with other hints (prefetch.reread_offsets), and 4x256x28x28 -> 32 1x1 (36 rows for 32) gained nothing
def _panel_load(u: UOp) -> bool:
  return u.op is Ops.LOAD and u.src[0].op is Ops.INDEX and (b := u.src[0].src[0]).op is Ops.DEFINE_REG and \
    isinstance(b.dtype, PtrDType) and b.dtype.size > 1

def _tile_peel(body: list[UOp], r: UOp, last: int) -> bool:
  stores = [u for u in body if _global_store(u)]
  return any(u.op is Ops.RANGE for u in body) and any(map(_panel_load, body)) and all(u.arg != NT_ARG for u in stores) and \
    any(len(u.src[0].src) > 2 and any(_tail_gate(g, r, last) for g in u.src[0].src[2].toposort()) for u in stores)

def _compared(uops: list[UOp]) -> set[UOp]: return {u.src[0] for u in uops if u.op is Ops.CMPLT and u.src[1].op is Ops.CONST}

def _folded(u: UOp, last: dict[UOp, UOp]) -> UOp | None:
  """The constant an integer ADD or MUL of the peeled copy is (its sources constants there), else None."""
  if u.op not in (Ops.ADD, Ops.MUL) or u.dtype.count != 1 or not dtypes.is_int(u.dtype): return None
  a, b = (last.get(s, s) for s in u.src)
  if a.op is not Ops.CONST or b.op is not Ops.CONST: return None
  return UOp.const(u.dtype, a.arg + b.arg if u.op is Ops.ADD else a.arg * b.arg)

def peel_tail_iterations(uops: list[UOp], simd_bytes: int = 0) -> list[UOp]:
  """`uops` with each loop of n > 1 iterations whose body tests `ridx < n - 1` (a padded axis' partial last vector or tile), and
  is innermost and stores to no buffer (or, given `simd_bytes`, only streams to one at a known multiple of its store's width:
  streaming.buffer_tested) or is a packed tile's loop whose stores that test gates (_tile_peel), run n - 1 times with that test
  true, then once more in a copy of its body with ridx = n - 1 and the test false."""
  out, i = list(uops), 0
  # the loops some node compares with a constant (a tail gate's form): only theirs can have one. Most kernels' loops have none,
  # and looking for it through each loop's body (nested loops' bodies again) was most of this pass
  compared = _compared(out)
  while i < len(out):
    r = out[i]
    if r.op is not Ops.RANGE or r not in compared or r.src[0].op is not Ops.CONST or (n := r.src[0].arg) < 2:
      i += 1
      continue
    end = next(j for j in range(i + 1, len(out)) if out[j].op is Ops.END and out[j].src[-1] is r)
    body = out[i + 1:end]
    inside = set(body)
    # (a loop whose values are read after it, other than through registers, keeps its form: the copy would have to replace them)
    if not any(_tail_gate(u, r, n - 1) for u in body) or not (_innermost_peel(body, simd_bytes) or _tile_peel(body, r, n - 1)) or \
       any(s in inside for u in out[end + 1:] for s in u.src):
      i += 1
      continue
    fewer = r.replace(src=(UOp.const(r.dtype, n - 1),))
    loop: dict[UOp, UOp] = {r: fewer}
    last: dict[UOp, UOp] = {r: UOp.const(r.dtype, n - 1)}
    new_body, copy, folded = [], [], []
    streams = any(u.op is Ops.STORE and u.arg == NT_ARG for u in body)
    present = set(out)
    for u in body:
      if _tail_gate(u, r, n - 1):
        loop[u], last[u] = UOp.const(dtypes.bool, True), UOp.const(dtypes.bool, False)
        continue
      loop[u] = u.replace(src=tuple(loop.get(s, s) for s in u.src))
      # a node the true gate turns into one the kernel already has (a constant mask hoisted before the loop) is made anew (tagged):
      # placed again in the loop, it would be rendered there, and its uses after the loop would name a value the loop defines
      if loop[u] is not u and loop[u] in present: loop[u] = loop[u].replace(tag=("peeled loop", u.tag))
      new_body.append(loop[u])
      # (a streamed store's index term ridx * c is the constant (n - 1) * c there: its known factors then are the whole
      # product's, as the store's width asks: streaming.store_width)
      if streams and (k := _folded(u, last)) is not None:
        last[u] = k
        folded.append(k)
        continue
      # the copy's nodes are new ones (tagged), also those that don't use ridx: a value made in the loop's body is not there after it
      last[u] = u.replace(src=tuple(last.get(s, s) for s in u.src), tag=("peeled", u.tag))
      copy.append(last[u])
    consts = [c for c in dict.fromkeys((fewer.src[0], UOp.const(dtypes.bool, True), UOp.const(dtypes.bool, False), *folded)) if c not in out]
    out[i:end + 1] = [*consts, fewer, *new_body, out[end].replace(src=tuple(loop.get(s, s) for s in out[end].src)), *copy]
    i += len(consts) + 1
    compared = _compared(out)
  return out
