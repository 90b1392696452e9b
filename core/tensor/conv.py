"""Sliding-window ops from movement ops: pooling windows, conv (1d/2d/3d, groups, stride, dilation), conv_transpose,
avg/max pooling and interpolate."""
from __future__ import annotations
import itertools
from typing import TYPE_CHECKING, Any, Sequence
from core.helpers import make_tuple, prod
from core.ir.dtype import dtypes, least_upper_dtype, sum_acc_dtype
from core.ir.ops import Ops, UOp
from core.tensor.gradient import custom_vjp, register_vjp
from core.tensor.validate import check_ints, check_int
from core.tensor.reduce import SPLIT_REDUCE, _split_sum
from core.tensor.plans import replayed

if TYPE_CHECKING:
  from core.tensor.tensor import Tensor

def _window_last(x: UOp, k: int, s: int, d: int) -> UOp:
  """(..., n) -> (..., o, k) with out[..., i, j] = x[..., i*s + j*d]. Tiling the row k+1 times and reading it back with
  rows of length L+d shifts row j by j*d; a stride-s pick of the first o*s columns then gives the windows. Built on UOps:
  a conv's dozens of movement ops through Tensor methods (their checks and wrappers, ~15-45 us each) cost ~1 ms per call."""
  assert x.shape is not None
  n, lead = x.shape[-1], tuple(x.shape[:-1])
  o = (n - d * (k - 1) - 1) // s + 1
  if o <= 0: raise RuntimeError(f"window of size {k} (dilation {d}) doesn't fit in a dim of size {n}")
  L = max(n, k * d) + s
  keep = tuple((0, m) for m in lead)
  t = x.pad(((0, 0),) * len(lead) + ((0, L - n),)).reshape(lead + (1, L)).expand(lead + (k + 1, L)).reshape(lead + ((k + 1) * L,))
  t = t.shrink(keep + ((0, k * (L + d)),)).reshape(lead + (k, L + d))
  t = t.shrink(keep + ((0, k), (0, o * s))).reshape(lead + (k, o, s)).shrink(keep + ((0, k), (0, o), (0, 1))).reshape(lead + (k, o))
  return t.permute(tuple(range(len(lead))) + (len(lead) + 1, len(lead)))

# the movement ops (op, arg) _windows made for an input shape and window, replayed as nodes for the next input of that shape:
# a 2-d window is ~26 of them, whose shapes, identity checks and permute algebra were half a 3x3 conv's eager graph build
_window_plans: dict[tuple, tuple[tuple[Ops, Any], ...]] = {}
WINDOW_PLANS = 256

def _windows(x: UOp, ndim: int, k: Sequence[int], s: tuple[int, ...], d: tuple[int, ...]) -> UOp:
  """Tensor._pool's windows (..., *out, *k) of x's last len(k) dims, on UOps (not for the unit windows _pool reshapes):
  the same nodes as _windows_built, from the plan of x's shape where there is one."""
  shape = x.shape
  if shape is None or not all(type(n) is int for n in shape): return _windows_built(x, ndim, k, s, d)
  key = (shape, ndim, tuple(k), s, d)
  if (plan := _window_plans.get(key)) is None:
    out = _windows_built(x, ndim, k, s, d)
    steps, n = [], out
    while n is not x: steps.append((n.op, n.arg)); n = n.src[0]   # movement ops only: one source each
    if len(_window_plans) >= WINDOW_PLANS: _window_plans.clear()   # bounded; one step, safe with other threads building
    _window_plans[key] = tuple(reversed(steps))
    return out
  dt = x.dtype
  for op, arg in plan: x = UOp(op, dt, (x,), arg)
  return x

def _windows_built(x: UOp, ndim: int, k: Sequence[int], s: tuple[int, ...], d: tuple[int, ...]) -> UOp:
  """_windows by the window algebra."""
  nd = len(k)
  lead = ndim - nd
  # the permutes between windows are composed and applied once (`pending`): a 2-d window took 6 PERMUTE nodes in a row
  # (3 of them back to back), each one more node to build, walk for the schedule cache's key and index through
  pending = tuple(range(ndim))
  for i in range(nd):
    ax, r = lead + 2 * i, ndim + i  # earlier dims have already become (o, k) pairs
    x = _window_last(x.permute(_then(pending, _moved(r, ax, r - 1))), k[i], s[i], d[i])
    x, pending = x.src[0], _then(x.arg, _then(_moved(r + 1, r - 1, ax), _moved(r + 1, r, ax + 1)))   # the window's own permute too
  order = list(range(lead)) + [lead + 2 * i for i in range(nd)] + [lead + 2 * i + 1 for i in range(nd)]
  return x.permute(_then(pending, tuple(order)))

def _moved(nd: int, src: int, dst: int) -> tuple[int, ...]:
  """The permutation that moves dim src to dst (Tensor.movedim's)."""
  order = [i for i in range(nd) if i != src]
  order.insert(dst, src)
  return tuple(order)

def _then(first: tuple[int, ...], second: tuple[int, ...]) -> tuple[int, ...]:
  """The one permutation that is `first` and then `second`."""
  return tuple(first[i] for i in second)

def _padding(padding: int | Sequence[int], dims: int) -> list[tuple[int, int]]:
  """Per spatial dim (before, after): an int, one value per dim, or torch's flat (left, right, ...) from the last dim."""
  if isinstance(padding, int): return [(padding, padding)] * dims
  p = list(padding)
  if len(p) == dims: return [(v, v) for v in p]
  if len(p) == 2 * dims: return [(p[2 * i], p[2 * i + 1]) for i in range(dims)][::-1]
  raise ValueError(f"padding {p} must be an int, {dims} values or {2 * dims} values")

def _check_conv(method: str, x: Tensor, weight: Tensor, groups: int, stride: Any, dilation: Any) -> int:
  """The number of spatial dims of a convolution, after checking the ranks, groups, strides and dilations."""
  if weight.ndim < 3: raise ValueError(f"Tensor.{method}: argument 'weight' needs (out, in, *kernel) dims, got shape {weight.shape}")
  nd = weight.ndim - 2
  if x.ndim != nd + 2: raise ValueError(f"Tensor.{method}: the input {x.shape} needs {nd + 2} dims for weight {weight.shape}")
  check_int(method, "groups", groups, lo=1)
  check_ints(method, "stride", stride, lo=1, n=nd)
  check_ints(method, "dilation", dilation, lo=1, n=nd)
  return nd

def _stuffed(x: Tensor, s: Sequence[int], lead: int) -> Tensor:
  """x with s[i]-1 zeros between neighbours along dim lead+i (n -> (n-1)*s[i] + 1)."""
  for i, si in enumerate(s):
    if si == 1: continue
    ax, n = lead + i, x.shape[lead + i]
    x = x.unsqueeze(ax + 1).pad([(0, si - 1) if j == ax + 1 else None for j in range(x.ndim + 1)]).flatten(ax, ax + 1)
    x = x.shrink([(0, (n - 1) * si + 1) if j == ax else None for j in range(x.ndim)])
  return x

def _transposed(x: Tensor, weight: Tensor, groups: int, s: tuple[int, ...], d: tuple[int, ...], pads: list[tuple[int, int]],
                op: tuple[int, ...], bias: Tensor | None = None) -> Tensor:
  """conv_transpose2d with its arguments checked and normalized (strides, dilations, (before, after) pads, output padding)."""
  nd = weight.ndim - 2
  # by phases unless dilated, or the output starts past x (a pad before of s*n or more: a phase would read none of x)
  if any(v > 1 for v in s) and all(v == 1 for v in d) and all(b // v < n for (b, _), v, n in zip(pads, s, x.shape[2:])):
    y = _transposed_by_phase(x, weight, groups, s, pads, op)
    return y if bias is None else y + bias.reshape(1, -1, *([1] * nd))
  x = _stuffed(x, s, 2)
  ks = weight.shape[2:]
  full = [(d[i] * (ks[i] - 1) - pads[i][0], d[i] * (ks[i] - 1) - pads[i][1] + op[i]) for i in range(nd)]
  # zero-stuffed and padded in a copy of its own, for the reason conv2d copies its padded input
  if any(v > 1 for v in s) or any(b or a for b, a in full): x = x.pad([None, None] + full).contiguous()
  return x.conv2d(_channels_swapped(weight, groups).flip(tuple(range(2, 2 + nd))), bias, groups=groups, dilation=d)

def _channels_swapped(weight: Tensor, groups: int) -> Tensor:
  """A transposed conv's weight (cin, cout/groups, *k) as a conv's (cout, cin/groups, *k), unflipped."""
  cin, rc, *ks = weight.shape
  return weight.reshape(groups, cin // groups, rc, *ks).transpose(1, 2).reshape(groups * rc, cin // groups, *ks)

def _phases_stacked(wt: Tensor, s: tuple[int, ...], kq: list[int], live: list[int]) -> Tensor:
  """The live phases' flipped sub-kernels as output channels (o, *c) of one weight, zero taps past the kernel, in a buffer
  of its own: read through the pad, every load of the conv would be gated."""
  nd, (co, ci, *ks) = len(s), wt.shape
  w = wt.pad([None, None] + [(0, q * v - k) for q, v, k in zip(kq, s, ks)]).reshape(co, ci, *[u for q, v in zip(kq, s) for u in (q, v)])
  w = w.shrink([None, None] + [r for q, c in zip(kq, live) for r in ((0, q), (0, c))]).flip(tuple(2 + 2 * i for i in range(nd)))
  w = w.permute(0, *[3 + 2 * i for i in range(nd)], 1, *[2 + 2 * i for i in range(nd)])
  return w.reshape(co * prod(live), ci, *kq).contiguous()

# one conv for all phases, their sub-kernels padded with zero taps to the largest's, while that multiplies at most this many
# times the products the phases need; else a conv per phase. One thread by CPU time, same-process A/B on the loaded 2-core
# Zen 5 (dY of batch 8): 3x3/2 (16 products for 9: x1.78) per phase 10.1 / 7.9 / 14.5 ms vs one conv 14.0 / 11.7 / 26.3 ms
# at 56 / 28 / 14 pixels (four 2x2/2x1/1x1 convs against one 2x2 with 4x the channels); 5x5/3 (x1.44, 9 phases) per phase
# 9.1 vs one conv 4.1 ms; 4x4/2 and 2x2/2 (no zero taps) 13.1 vs 14.6 and 4.2 vs 3.7 ms
PHASES_IN_ONE_CONV = 1.5

def _transposed_by_phase(x: Tensor, weight: Tensor, groups: int, s: tuple[int, ...], pads: list[tuple[int, int]],
                         op: tuple[int, ...]) -> Tensor:
  """A stride-s transposed conv (dilation 1) without zero-stuffing, which makes (s-1)/s of the products per dim multiply
  zeros. Output position o (t = o + the pad before) only meets the taps j = t mod s, at inputs x[t div s - m] for
  j = t mod s + s*m; so phase c of t (c < k: the live ones) is a stride-1 conv of x with the sub-kernel w[c + s*m]. The live
  phases run as one conv, their sub-kernels stacked as output channels (PHASES_IN_ONE_CONV), all over the same t div s, or
  a conv each over its own outputs (_output_phases); their outputs are interleaved (depth-to-space) into one buffer, the
  dead phases (c >= k, a 1x1's) as zeros."""
  _, rc, *ks = weight.shape
  nd, bs = len(ks), x.shape[0]
  kq, live = [-(-k // v) for k, v in zip(ks, s)], [min(k, v) for k, v in zip(ks, s)]
  lens = [(n - 1) * v - b - a + k + p for n, v, (b, a), k, p in zip(x.shape[2:], s, pads, ks, op)]
  wt = _channels_swapped(weight, groups)
  if prod(live) * prod(kq) > PHASES_IN_ONE_CONV * prod(ks): return _output_phases(x, wt, groups, s, pads, lens)
  q0 = [b // v for (b, _), v in zip(pads, s)]                          # the first and last + 1 t div s of the output
  q1 = [-(-(b + n) // v) for (b, _), n, v in zip(pads, lens, s)]
  z = _phase_conv(x, _phases_stacked(wt, s, kq, live), groups, q0, q1).contiguous()   # its own buffer: the scheduler fuses the permute below into a strided store
  qn = [b - a for a, b in zip(q0, q1)]
  z = z.reshape(bs, groups * rc, *live, *qn).pad([None, None] + [(0, v - c) for v, c in zip(s, live)] + [None] * nd)
  z = z.permute(0, 1, *[u for i in range(nd) for u in (2 + nd + i, 2 + i)]).reshape(bs, groups * rc, *[q * v for q, v in zip(qn, s)])
  # interleaved in a buffer of its own: a consumer reading the phases through this view (ResNet's batchnorm backward) gathers
  # from s*s buffers with div/mod indexing; ResNet-18 b8 SGD step, one thread, CPU time, medians of 11 interleaved: 760 -> 701 ms
  return z.shrink([None, None] + [(b - a * v, b - a * v + n) for (b, _), a, v, n in zip(pads, q0, s, lens)]).contiguous()

def _phase_conv(x: Tensor, w: Tensor, groups: int, q0: Sequence[int], q1: Sequence[int]) -> Tensor:
  """x over [q0 - taps + 1, q1) (zeros outside it: conv2d pads) convolved with the flipped sub-kernel w: t div s in [q0, q1)."""
  sizes = x.shape[2:]
  lo = [a - t + 1 for a, t in zip(q0, w.shape[2:])]
  keep = [(min(max(a, 0), n), max(min(b, n), min(max(a, 0), n))) for a, b, n in zip(lo, q1, sizes)]
  zpad = [(c - a, b - d) for a, b, (c, d) in zip(lo, q1, keep)]
  return x.shrink([None, None, *keep]).conv2d(w, groups=groups, padding=[v for pr in reversed(zpad) for v in pr])

def _output_phases(x: Tensor, wt: Tensor, groups: int, s: tuple[int, ...], pads: list[tuple[int, int]], lens: list[int]) -> Tensor:
  """_transposed_by_phase's conv per phase, by the output's phase: outputs o = s*i + r are tap phase c = (r + b) mod s at
  t div s = (r + b) div s + i, so each phase computes only its own outputs: ceil(n/s), the most any phase has (the phases stack). By
  t's phase over one common range, a 3x3/2's 56 outputs took 29 a phase, whose rows pad past whole vectors. Not rounded up to an even
  count: 7 -> 8 (ResNet's 14x14 gradient) added 31% to the FMAs, and since its row-tap phase takes a channel tile (see
  heuristic._merge_loops) the 7x7 phases run faster: one thread, 8x512x7x7 -> 8x256x14x14, znver3 code 20 -> 14 ms, AVX-512 12.4 -> 12.1."""
  from core.tensor.tensor import Tensor
  (bs, _), (co, _, *ks), nd = x.shape[:2], wt.shape, len(s)
  m = [-(-n // v) for n, v in zip(lens, s)]
  # x in a buffer of its own: a phase whose window needs no padding reads it in place, where x computed in the same graph
  # (ResNet's dY, by the batchnorm's backward) would be recomputed inside its conv; the others copy it padded their way
  x, flip, zs = x.contiguous(), tuple(range(2, 2 + nd)), []
  for r in itertools.product(*map(range, s)):
    c, e = [(ri + b) % v for ri, (b, _), v in zip(r, pads, s)], [(ri + b) // v for ri, (b, _), v in zip(r, pads, s)]
    if any(ci >= k for ci, k in zip(c, ks)): zs.append(Tensor.zeros(bs, co, *m, dtype=x.dtype, device=x.device))
    else: zs.append(_phase_conv(x, wt[(slice(None), slice(None)) + tuple(slice(ci, None, v) for ci, v in zip(c, s))].flip(flip), groups, e,
                                [a + v for a, v in zip(e, m)]))
  z = Tensor.stack(*zs, dim=2).reshape(bs, co, *s, *m)
  z = z.permute(0, 1, *[u for i in range(nd) for u in (2 + nd + i, 2 + i)]).reshape(bs, co, *[q * v for q, v in zip(m, s)])
  # interleaved in a buffer of its own (as above)
  return z.shrink([None, None] + [(0, n) for n in lens]).contiguous()

@register_vjp("conv_input")
def _conv_input_grad(ctx: UOp, inputs: tuple[UOp, ...], params: tuple) -> tuple[UOp | None, ...]:
  """conv2d's gradient for its input x: the transposed conv of the output gradient with the same weight, strides,
  dilations, groups and padding, and the output padding that gives back x's exact size (the rows and columns the forward's
  windows never reached get zero). The weight's gradient is _weight_grad's (None for a depthwise conv's: it comes through
  the forward's graph)."""
  from core.tensor.tensor import Tensor
  x, w = inputs
  groups, s, d, pads = params
  assert x.shape is not None and ctx.shape is not None and w.shape is not None
  ks, o, n = w.shape[2:], ctx.shape[2:], x.shape[2:]
  op = tuple(n[i] - ((o[i] - 1) * s[i] - pads[i][0] - pads[i][1] + d[i] * (ks[i] - 1) + 1) for i in range(len(ks)))
  dy, wt = Tensor(ctx, requires_grad=False), Tensor(w, requires_grad=False)
  dx = _transposed(dy.cast(least_upper_dtype(ctx.dtype, w.dtype)), wt, groups, s, d, list(pads), op)
  if not _weight_grad_by_channels(groups, w.shape): return (dx.cast(x.dtype).uop, None)
  return (dx.cast(x.dtype).uop, _weight_grad(Tensor(x, requires_grad=False), dy, wt, groups, s, d, pads).uop)

def _weight_grad_by_channels(groups: int, wshape: tuple) -> bool:
  """Whether conv2d's weight gets its gradient from _weight_grad: every conv with several output channels per group (a
  depthwise conv's has no channel axis to put vectors on, and keeps the chain rule through the forward's windows)."""
  return wshape[0] // groups >= 4

def _weight_grad(x: Tensor, dy: Tensor, w: Tensor, groups: int, s: tuple[int, ...], d: tuple[int, ...], pads: tuple) -> Tensor:
  """conv2d's weight gradient: by phases where a stride's windows skip most of the input they cover (the 7x7 stride-2 stem),
  else as one product (_weight_grad_product)."""
  ks = w.shape[2:]
  if all(v == 1 for v in d) and any(v > 1 for v in s) and 3 * prod(-(-k // v) * v for k, v in zip(ks, s)) <= 4 * prod(ks):
    return _weight_grad_by_phase(x, dy, w, groups, s, pads)
  return _weight_grad_product(x, dy, w, groups, s, d, pads)

def _weight_grad_by_phase(x: Tensor, dy: Tensor, w: Tensor, groups: int, s: tuple[int, ...], pads: tuple) -> Tensor:
  """A stride-s conv's dW as a stride-1 one: the padded input split into its s*s phases (space-to-depth, x[.., i*s + r] at
  channel (c, r), position i), the kernel padded to whole multiples of s (ceil(k/s) taps per phase), the extra taps dropped.
  A stride-2 window reads every other input column, which the product's register tile cannot reuse between neighbouring
  kernel columns; by phases each tap reads a contiguous row. The 7x7/2 stem does (8/7)^2 the products for that, one thread
  by CPU time on the loaded 2-core Zen 3 (batch 8, 224): 108-126 -> 79-82 ms. Only where the padding wastes at most 1/3."""
  from core.tensor.tensor import Tensor
  cout, cin_g, *ks = w.shape
  nd, (bs, cin) = len(ks), x.shape[:2]
  kq = [-(-k // v) for k, v in zip(ks, s)]
  full = [(o + q - 1) * v for o, q, v in zip(dy.shape[2:], kq, s)]   # the padded length every phase's windows read
  xp = x.pad([None, None] + [(b, max(0, f - n - b)) for (b, _), f, n in zip(pads, full, x.shape[2:])])
  xp = xp.shrink([None, None] + [(0, f) for f in full])
  xs = xp.reshape(bs, cin, *[v for f, si in zip(full, s) for v in (f // si, si)])
  xs = xs.permute(0, 1, *[3 + 2 * i for i in range(nd)], *[2 + 2 * i for i in range(nd)]).reshape(bs, cin * prod(s), *[f // v for f, v in zip(full, s)])
  wq = Tensor.empty(cout, cin_g * prod(s), *kq, dtype=w.dtype, device=w.device)   # only its shape and dtype are read
  dw = _weight_grad_product(xs.contiguous(), dy, wq, groups, (1,) * nd, (1,) * nd, ((0, 0),) * nd)
  dw = dw.reshape(cout, cin_g, *s, *kq).permute(0, 1, *[v for i in range(nd) for v in (2 + nd + i, 2 + i)])
  return dw.reshape(cout, cin_g, *[q * v for q, v in zip(kq, s)]).shrink([None, None] + [(0, k) for k in ks])

# the per-image partial sums of dW may take up to this many times dY's memory. One thread, CPU time, one sum vs per image, A/B in
# one process (medians of 7, loaded Zen 5): dW of 3x3 8x128x28x28 -> 128 (ResNet-18's layer2, ratio 1.5) 15.4 -> 9.7 ms,
# 8x256x28 -> 256 (2.9) 103 -> 37, 16x64x16x16 -> 64 (2.25) 2.53 -> 2.25, 8x96x16 (3.4) 2.70 -> 2.52; even at 8x64x14 (2.9),
# 8x48x12 (3), 32x32x16 (1.1), 2x128x28 (1.5); the one sum wins at 8x128x14 (5.9: 2.90 vs 3.06) and 32x64x8 (9: 1.26 vs 1.37)
PARTIALS_PER_DY = 4

# an image's dY above this size (bytes) gets one partial sum of dW per block of its rows. Every output tile of the partial's
# kernel reads the whole block of dY and X (the stem's 3.2 MB of dY per image, read by 16 tiles), which with this much of dY
# and about as much of X stays in a core's L2 (1 MiB on the Zen 5 measured; Zen 3 has 512 KiB) instead of the shared L3, where two
# threads' reads compete; and a block's dY of all output channels fits a packed panel (pack.PACK_MAX_BYTES, also 512 KiB), so
# the optimizer's tile takes 4 vectors of them where a whole image's took 2. One Zen 5 thread, process CPU time, A/B in one
# process, medians of 9-11 (load 4-10): the stem's dW (8x3x224x224, 7 blocks of 16 rows, the same tile) 20.1-22.6 ->
# 18.8-20.8 ms; 3x3 8x64x56x56 (2 blocks of 28) 13.1-14.7 -> 11.9-13.1 by the wider tile (with the per-image kernel's tile
# the blocks alone: 12.5 -> 12.6, 14.4 -> 14.4); 8x128x28 (392 KiB an image) split in 2 gained nothing (11.6 vs 11.5)
PARTIAL_DY_BYTES = 512 << 10

def _row_blocks(rows: int, row_bytes: int, most: int) -> int:
  """Blocks of rows an image's partial sums of dW cover: the fewest that divide `rows` and hold at most PARTIAL_DY_BYTES of dY
  each (1 where the whole image fits), else the most that divide it within `most` (the partials' buffer limit). Where the
  fewest that fit hold under a quarter of the limit (a prime count of rows: one row a block), whole images: such blocks would
  only multiply the partials written and read back."""
  counts = [b for b in range(1, min(rows, max(most, 1)) + 1) if rows % b == 0]
  if (fit := next((b for b in counts if rows // b * row_bytes <= PARTIAL_DY_BYTES), None)) is None: return counts[-1]
  return fit if 4 * (rows // fit) * row_bytes >= PARTIAL_DY_BYTES else 1

def _weight_grad_product(x: Tensor, dy: Tensor, w: Tensor, groups: int, s: tuple[int, ...], d: tuple[int, ...], pads: tuple) -> Tensor:
  """dW[o, c, *k] = sum over n and the output positions p of dY[n, o, p] * X[n, c, p*s + k*d], as a matrix product whose
  output channels o run innermost: dY copied once to (n, *p, o), the sum written as (groups, c, *k, o) and read back permuted.
  The chain rule's form keeps o outermost, so its rows are the kernel's few columns (3) and every load runs along the image
  row (7 wide in ResNet's last stage): no vectors across outputs and no register reuse of a row of dY."""
  cout, cin_g, *ks = w.shape
  nd, bs, rc = len(ks), dy.shape[0], cout // groups
  os_ = dy.shape[2:]
  xp = x.pad([None, None] + list(pads)).contiguous() if any(b or a for b, a in pads) else x
  win = xp._pool(ks, s, d).reshape(bs, groups, cin_g, *os_, *ks)     # (n, g, c, *p, *k)
  p_ax = tuple(range(3, 3 + nd))
  win = win.permute(0, *p_ax, 1, 2, *range(3 + nd, 3 + 2 * nd)).unsqueeze(-1)   # (n, *p, g, c, *k, 1)
  dyt = dy.reshape(bs, groups, rc, *os_).permute(0, *p_ax, 1, 2).contiguous()    # (n, *p, g, o)
  dyt = dyt.reshape(bs, *os_, groups, 1, *([1] * nd), rc)
  prodt = win * dyt.cast(least_upper_dtype(dy.dtype, w.dtype))
  acc = sum_acc_dtype(prodt.dtype)
  if bs > 1 and cin_g * prod(ks) <= PARTIALS_PER_DY * prod(os_):
    # a long sum (many pixels per image) into a small weight: one partial sum per image first, so each image's rows of dY
    # are read by every output tile while they are still in cache, then the images' partials added (a buffer at most
    # PARTIALS_PER_DY times dY); per block of rows where an image's dY is larger than PARTIAL_DY_BYTES
    blocks = _row_blocks(os_[0], prod(os_[1:]) * cout * dy.dtype.itemsize, int(PARTIALS_PER_DY * prod(os_) // (cin_g * prod(ks))))
    prodt = prodt.reshape(bs * blocks, os_[0] // blocks, *prodt.shape[2:])
    dw = prodt.sum(tuple(range(1, 1 + nd)), dtype=acc).contiguous().sum(0, dtype=acc).contiguous()
  else: dw = prodt.sum(tuple(range(1 + nd)), dtype=acc).contiguous()     # (g, c, *k, o)
  return dw.permute(0, 2 + nd, *range(1, 2 + nd)).reshape(cout, cin_g, *ks).cast(w.dtype)

# a regular conv's input up to this size (padded, bytes) is read in place: ~L2-sized, so the gated loads hit cache and the copy
# kernel's launch and pass are a large share of a small conv (the ONNX ResNet-style model's 3x3s, one thread by CPU time, same
# process A/B: 2x16x16x16 s2 -> 32 0.88x, 1x128x7x7 0.85x, 2x32x8x8 0.94x, 1x3x48x48 s2 0.93x, 2x3x32x32 and 2x16x16x16 even)
PAD_IN_PLACE_BYTES = 512 * 1024

def _pad_in_place(x: Tensor, pads: list, ws: Sequence[int], d: Sequence[int], groups: int) -> bool:
  """Whether conv2d reads its zero-padded input through gated loads rather than a copy kernel first: always for a depthwise
  conv (its k*k products per input element cost about what the copy does), and for a regular conv whose padded input is
  small (PAD_IN_PLACE_BYTES) or, ungrouped undilated 3x3 of a realized input with output channels in whole channel tiles (two
  vectors), where its device's renderer reads large ones in place too on its thread pool (Renderer.large_conv_in_place,
  threads); `ws` is the weight's shape. A large one else keeps the copy, which the optimizer vectorizes and register-tiles
  ungated. Other windows took tiles along the gated rows: 2-core Zen 4, engine path, A/B in one process, 2
  threads, ResNet's stem (8x3x224 7x7/2) 9.3 -> 18.4 ms in place, 8x128x28x28 -> 256 3x3/2's backward (its 1x1 and 2x2 phase
  convs) 13.6 -> 29.7; without a thread pool (images outermost, one thread) 32x64x56x56 -> 64 3x3 69.6 -> 71.1 ms; dilated
  (2 threads, load 4-5, 21 calls per process, processes alternated, medians) 4x32x40x40 -> 32 dilation 2 1.41 -> 4.5-8.2 ms
  in place, where dilation 1 is even (1.2 ms); output channels that fill no whole tile (1x3x300x300 -> 16, 8x16x130x130 ->
  24, 8x32x64x64 -> 48: 2 threads, 15 calls per process, 3 processes alternated a side, medians 0.57-0.91 -> 0.99-1.22 ms,
  7.9-9.6 -> 13.5-15.7, 4.5-5.2 -> 7.4-8.3), where -> 32 and -> 64 gained (8x16x130x130 -> 32 7.6-8.7 -> 6.4-7.1)."""
  cout, cin_g, *ks = ws
  if (depthwise := groups > 1 and cin_g == 1) or not all(isinstance(n, int) for n in x.shape): return depthwise
  padded = prod(x.shape[:2]) * prod(n + b + a for n, (b, a) in zip(x.shape[2:], pads))
  if padded * x.dtype.itemsize <= PAD_IN_PLACE_BYTES: return True
  if groups != 1 or any(k != 3 for k in ks) or any(di != 1 for di in d) or not isinstance(x.device, str): return False
  u = x.uop
  while u.op in (Ops.DETACH, Ops.RESHAPE) and len(u.src) == 1: u = u.src[0]
  if u.op is not Ops.BUFFER: return False   # computed in this graph: its producer runs once, fused into the copy
  from core.device.registry import Device
  rnd = Device[x.device].renderer
  return rnd.large_conv_in_place and rnd.threads > 0 and cout % (2 * max(rnd.simd_width // x.dtype.itemsize, 1)) == 0

# a padded copy's rows widened to whole cache lines where the copy streams its stores (its input and output together reach the
# device renderer's stream_min_bytes) and stores its rows whole (kernelize.PAD_WHOLE_ROWS_MIN_BYTES): every row then starts on a
# line, so its vector stores stream (non-temporal), where a row of 58 floats starting 8 bytes into a line kept each store plain
# and each line was read in before it was written. The extra columns are zeros the conv never reads (it reads a view of the
# first columns); at most 1/LINE_PAD_SHARE more (a 7x7 map's rows of 9 stay 9: 16 would write 1.8x). 2-vCPU Intel guest,
# 32x64x56x56 3x3 -> 64, its 4 kernels in sequence (2 threads, chrt -f 10), A/B in one process: 0.972x the time [0.961-0.990],
# the copy 2.08 -> 1.73 ms; AVX2 code (znver3) 0.979x [0.972-0.987], 2.31 -> 1.66; the conv kernel even both ways
LINE_BYTES = 64
LINE_PAD_SHARE = 8

def _line_pad(x: Tensor, pads: Sequence[tuple[int, int]]) -> int:
  """Columns added after the last axis's padding of x's padded copy (see LINE_BYTES); 0 for none."""
  from core.schedule.kernelize import PAD_WHOLE_ROWS_MIN_BYTES
  item, shape = x.dtype.itemsize, x.shape
  if LINE_BYTES % item or not isinstance(x.device, str) or not all(type(n) is int for n in shape) or \
     not all(type(v) is int for pr in pads for v in pr): return 0
  row = shape[-1] + sum(pads[-1])
  ext = -row % (LINE_BYTES // item)
  padded = prod(shape[:2]) * prod(n + b + a for n, (b, a) in zip(shape[2:], pads)) * item
  if not ext or ext * LINE_PAD_SHARE > row or padded < PAD_WHOLE_ROWS_MIN_BYTES: return 0
  from core.device.registry import Device
  bound = Device[x.device].renderer.stream_min_bytes
  return ext if bound > 0 and prod(shape) * item + padded * (row + ext) // row >= bound else 0

def _widened(pads: Sequence[tuple[Any, Any]], ext: int) -> list[tuple[Any, Any]]:
  """`pads` with `ext` more after the last axis."""
  return list(pads) if not ext else [*pads[:-1], (pads[-1][0], pads[-1][1] + ext)]

@register_vjp("max_pool")
def _max_pool_grad(ctx: UOp, inputs: tuple[UOp, ...], params: tuple) -> tuple[UOp | None, ...]:
  """max_pool2d's gradient for its input: each window's gradient split evenly over the positions equal to its max (as the
  chain rule through the max gives it), gathered per input element from the few windows over it: the windows' maxima and
  shares (one small kernel) zero-stuffed by the stride and read back through windows of the kernel's size. The chain rule
  through _pool's windows sums the tiled rows back with div/mod indexing instead, a pass per pooled dim: 8x64x112 3x3/2 (the
  ResNet stem's pooling, forward and backward), one thread by CPU time on the loaded 2-core Zen 3: 106-113 -> 67-78 ms."""
  from core.tensor.tensor import Tensor
  k, s, d, applied, outs = params
  x, dy = Tensor(inputs[0], requires_grad=False), Tensor(ctx, requires_grad=False)
  nd = len(k)
  lead, axes = x.ndim - nd, tuple(range(-nd, 0))
  win = x._pooled(k, s, d, list(applied), outs, x.dtype.min)
  best = win.max(axes, keepdim=True).contiguous()
  share = (dy / (win == best).sum(axes)).contiguous()
  best = best.reshape(best.shape[:-nd])
  spatial = x.shape[lead:]
  padded = [n + b + a for n, (b, a) in zip(spatial, applied)]
  def spread(t: Tensor) -> Tensor:   # (..., *outs) -> (..., *spatial, *k): window j over padded position i is t at i - (k-1-j)*d
    t = _stuffed(t, s, lead).pad([None] * lead + [((ki - 1) * di, p - (o - 1) * si - 1) for ki, di, p, o, si in zip(k, d, padded, outs, s)])
    return t._pool(k, 1, d).shrink([None] * lead + [(b, b + n) for n, (b, _) in zip(spatial, applied)] + [None] * nd)
  hit = x.reshape(x.shape + (1,) * nd) == spread(best)   # a stuffed zero matches an input 0, but its share is 0
  return (hit.where(spread(share), 0.0).sum(axes).cast(x.dtype).uop,)

_INT_ONLY = frozenset({int})   # a concrete shape's element types

def _conv_uops(x: Tensor, weight: Tensor, bias: Tensor | None, groups: int, s: tuple[int, ...], d: tuple[int, ...],
               pads: list[tuple[int, int]], dtype: Any) -> Tensor | None:
  """conv2d's graph for float x and weight of one dtype and concrete shapes (bias of that dtype and shape (cout,) or None,
  no dtype argument, no negative padding) built on UOps and wrapped once: the same nodes the Tensor ops below make (the
  detaches, pad, windows, broadcast product, sum, custom_vjp, bias add), without the ~12 tensors, checked wrappers and
  broadcast checks between them, which were most of an eager conv's Python. None: the Tensor ops build it."""
  xu, wu = x.uop, weight.uop
  dt = xu.dtype
  if dtype is not None or wu.dtype is not dt or not dtypes.is_float(dt) or not isinstance(xu.device, str) or \
     not isinstance(wu.device, str) or wu.device.startswith("DISK") or any(b < 0 or a < 0 for b, a in pads): return None
  xs, ws = x.shape, weight.shape
  if not _INT_ONLY.issuperset(map(type, xs)) or not _INT_ONLY.issuperset(map(type, ws)): return None
  if bias is not None and (bias.uop.dtype is not dt or bias.shape != ws[:1]): return None
  if prod(ws[1:]) == 0: return None   # an empty sum: the Tensor ops' constant
  def build() -> UOp: return _conv_nodes(x, weight, bias, groups, s, d, pads)
  # a plan's key tells its arguments apart by value: only Python ints, whose equal values build equal nodes
  if type(groups) is int and _INT_ONLY.issuperset(map(type, (*s, *d, *(v for pr in pads for v in pr)))):
    inputs = (xu, wu) if bias is None else (xu, wu, bias.uop)
    out = replayed(("conv2d", xu.device, xs, ws, dt, bias is None, groups, s, d, tuple(pads)), inputs, build)
  else: out = build()
  return type(x)._wrap(out, x, weight) if bias is None else type(x)._wrap(out, x, weight, bias)

def _conv_nodes(x: Tensor, weight: Tensor, bias: Tensor | None, groups: int, s: tuple[int, ...], d: tuple[int, ...],
                pads: list[tuple[int, int]]) -> UOp:
  """_conv_uops's node, built."""
  xu, wu, dt = x.uop, weight.uop, x.dtype
  (bs, _), (cout, cin_g, *ks) = x.shape[:2], weight.shape
  nd, rc, ws = len(ks), cout // groups, weight.shape
  u = UOp(Ops.DETACH, dt, (xu,))
  w = UOp(Ops.DETACH, dt, (wu,)) if _weight_grad_by_channels(groups, ws) else wu
  if any(b or a for b, a in pads):
    ext = 0 if (in_place := _pad_in_place(x, pads, ws, d, groups)) else _line_pad(x, pads)
    u = u.pad(((0, 0), (0, 0)) + tuple((int(b), int(a)) for b, a in _widened(pads, ext)))
    if not in_place: u = u.contiguous()
    if ext: u = u.shrink(tuple((0, n) for n in x.shape[:2]) + tuple((0, n + b + a) for n, (b, a) in zip(x.shape[2:], pads)))
  if all(ki == 1 for ki in ks) and all(si == 1 for si in s): u = u.reshape(u.shape + (1,) * nd)   # type: ignore[operator]
  else: u = _windows(u, nd + 2, ks, s, d)
  os_ = u.shape[2:2 + nd]   # type: ignore[index]
  full = (bs, groups, rc, cin_g, *os_, *ks)
  u = u.reshape((bs, groups, 1, cin_g, *os_, *ks))
  w = w.reshape((1, groups, rc, cin_g, *([1] * nd), *ks))
  if u.shape != full: u = u.expand(full)
  if w.shape != full: w = w.expand(full)
  prodt = u.alu(Ops.MUL, w)
  acc = sum_acc_dtype(dt)
  if acc is not dt: prodt = prodt.cast(acc)
  red, n = (3, *range(4 + nd, 4 + 2 * nd)), cin_g * prod(ks)
  r = _split_sum(prodt, full, red, n) if n > SPLIT_REDUCE else prodt.r(Ops.ADD, red)
  r = r.reshape((bs, groups, rc, *os_))
  if acc is not dt: r = r.cast(dt)
  out = custom_vjp(r.reshape((bs, cout, *os_)), "conv_input", (groups, s, d, tuple(pads)), xu, wu)
  if bias is None: return out
  b = bias.uop.reshape((1, cout, *([1] * nd)))
  if b.shape != out.shape: b = b.expand(out.shape)   # type: ignore[arg-type]
  return out.alu(Ops.ADD, b)

class ConvMixin:
  def _pool(self: Tensor, k: Sequence[int], stride: int | Sequence[int] = 1, dilation: int | Sequence[int] = 1) -> Tensor:  # type: ignore[misc]
    """(..., *spatial) -> (..., *out, *k): every window of the last len(k) dims."""
    nd = len(k)
    s, d = make_tuple(stride, nd), make_tuple(dilation, nd)
    # windows of one at stride 1 (a 1x1 conv) are the elements themselves: a reshape, where the windowing below builds ~20 nodes
    # (pads, shrinks, permutes) that each eager call makes and walks for the schedule cache's key, for the same kernel
    if all(ki == 1 for ki in k) and all(si == 1 for si in s): return self.reshape(self.shape + (1,) * nd)
    return self._mop(_windows(self.uop, self.ndim, k, s, d))

  def unfold(self: Tensor, dim: int, size: int, step: int) -> Tensor:  # type: ignore[misc]
    """Windows of `size` every `step` along `dim` (torch.Tensor.unfold): that dim becomes the window count and a last dim
    of `size` is added."""
    from core.tensor.movement import _axis
    ax = _axis(dim, self.ndim, "unfold")
    n = self.shape[ax] if self.ndim else 1
    if size < 0: raise RuntimeError(f"unfold: size must be >= 0, got {size}")
    if step <= 0: raise RuntimeError(f"unfold: step must be > 0, got {step}")
    if size > n: raise RuntimeError(f"unfold: size {size} is larger than dim {ax} of size {n}")
    if self.ndim == 0: return self.reshape(1).unfold(0, size, step).reshape(size)
    return self._mop(_window_last(self.uop.permute(_moved(self.ndim, ax, self.ndim - 1)), size, step, 1).permute(_moved(self.ndim + 1, self.ndim - 1, ax)))

  def conv2d(self: Tensor, weight: Tensor, bias: Tensor | None = None, groups: int = 1, stride: Any = 1, dilation: Any = 1,  # type: ignore[misc]
             padding: Any = 0, dtype: Any = None) -> Tensor:
    """N-d convolution (1d/2d/3d by weight rank): self (bs, cin, *spatial), weight (cout, cin/groups, *k)."""
    _check_conv("conv2d", self, weight, groups, stride, dilation)
    bs, cin = self.shape[:2]
    cout, cin_g, *ks = weight.shape
    nd = len(ks)
    if self.ndim != nd + 2: raise ValueError(f"conv: input {self.shape} needs {nd + 2} dims for weight {weight.shape}")
    if cin != cin_g * groups or cout % groups:
      raise ValueError(f"conv: input channels {cin} != weight {weight.shape[1]} * groups {groups}, or out channels {cout} not divisible")
    # a large padded input is its own (copy) kernel: read through a PAD, every load of the conv kernel would be gated and its
    # index wrapped, which keeps the optimizer from vectorizing and register-tiling it; the copy costs one pass over the input.
    # Not for a depthwise conv (one input channel per group): its k*k products per input element cost about what that copy
    # does, and where the optimizer packs an input panel that copy reads the gated loads once (MobileNet's 3x3s, CPU time on a
    # loaded 2-core host: 8x96x112 stride 2 10-15 -> 5.5 ms, 8x144x56 4.2-6.6 -> 3.0-4.2 ms, 7x7 and 14x14 about even);
    # nor for a small one (_pad_in_place)
    pads = _padding(padding, nd)
    if (fast := _conv_uops(self, weight, bias, groups, make_tuple(stride, nd), make_tuple(dilation, nd), pads, dtype)) is not None:
      return fast
    # the input's gradient is a transposed conv (_conv_input_grad), not autograd through the windows below: that would build
    # a product 9x (kh*kw) the size of the input and fold it back with div/mod indexing; the weight's is _weight_grad's
    custom = dtypes.is_float(self.dtype)
    x = self.detach() if custom else self
    w_in = weight   # the weight's gradient too comes from the rule (_weight_grad), except a depthwise conv's
    if custom and _weight_grad_by_channels(groups, weight.shape): weight = weight.detach()
    if any(b or a for b, a in pads):
      ext = 0 if (in_place := _pad_in_place(x, pads, weight.shape, make_tuple(dilation, nd), groups)) else _line_pad(x, pads)
      x = x.pad([None, None] + _widened(pads, ext))
      if not in_place: x = x.contiguous()
      if ext: x = x.shrink([None] * (x.ndim - 1) + [(0, x.shape[-1] - ext)])
    x = x._pool(ks, stride, dilation)  # (bs, cin, *o, *k)
    os_ = x.shape[2:2 + nd]
    rc = cout // groups
    x = x.reshape(bs, groups, 1, cin_g, *os_, *ks)
    w = weight.reshape(1, groups, rc, cin_g, *([1] * nd), *ks)
    out_dt = least_upper_dtype(self.dtype, weight.dtype) if dtype is None else dtype
    prodt = x * w
    red = tuple([3] + list(range(4 + nd, 4 + 2 * nd)))
    ret = prodt.sum(red, dtype=sum_acc_dtype(prodt.dtype)).cast(out_dt).reshape(bs, cout, *os_)
    if custom:
      params = (groups, make_tuple(stride, nd), make_tuple(dilation, nd), tuple(pads))
      ret = type(self)._wrap(custom_vjp(ret.uop, "conv_input", params, self.uop, w_in.uop), ret, self, w_in)
    return ret if bias is None else ret + bias.reshape(1, -1, *([1] * nd))
  conv = conv2d

  def conv_transpose2d(self: Tensor, weight: Tensor, bias: Tensor | None = None, groups: int = 1, stride: Any = 1,  # type: ignore[misc]
                       dilation: Any = 1, padding: Any = 0, output_padding: Any = 0) -> Tensor:
    """The adjoint of conv2d: zeros inserted between inputs (stride), padded by d*(k-1)-p, then a conv with the flipped,
    channel-swapped weight (cin, cout/groups, *k)."""
    _check_conv("conv_transpose2d", self, weight, groups, stride, dilation)
    if weight.shape[0] != self.shape[1] or weight.shape[0] % groups:
      raise ValueError(f"Tensor.conv_transpose2d: weight {weight.shape} needs dim 0 = the input's channels {self.shape[1]}, divisible by groups {groups}")
    cin, rc, *ks = weight.shape
    nd = len(ks)
    s, d, op = make_tuple(stride, nd), make_tuple(dilation, nd), make_tuple(output_padding, nd)
    return _transposed(self, weight, groups, s, d, _padding(padding, nd), op, bias)

  def _pool_pads(self: Tensor, k: tuple[int, ...], stride: Any, dilation: Any, padding: Any,  # type: ignore[misc]
                 ceil_mode: bool, method: str = "pool") -> tuple[list[tuple[int, int]], list[tuple[int, int]], tuple[int, ...]]:
    """(the padding asked for, the padding to apply, the output sizes) of the last len(k) dims. ceil_mode rounds the
    output size up (torch's rule: a last window must start inside the input or its left padding) by padding more on
    the right."""
    nd = len(k)
    if not 0 < nd <= self.ndim: raise ValueError(f"Tensor.{method}: kernel_size {k} needs 1 to {self.ndim} dims (the input has shape {self.shape})")
    check_ints(method, "kernel_size", k, lo=1)
    s = check_ints(method, "stride", stride if stride is not None else k, lo=1, n=nd)
    d = check_ints(method, "dilation", dilation, lo=1, n=nd)
    pads = _padding(padding if isinstance(padding, int) else list(padding), nd)
    check_ints(method, "padding", [v for pair in pads for v in pair], lo=0)
    applied, outs = [], []
    for i, (n, (pb, pa)) in enumerate(zip(self.shape[-nd:], pads)):
      span, total = d[i] * (k[i] - 1) + 1, n + pb + pa
      if total < span: raise ValueError(f"pool: window {k[i]} (dilation {d[i]}) doesn't fit in padded size {total}")
      o = (total - span) // s[i] + 1
      if ceil_mode:
        o = -(-(total - span) // s[i]) + 1
        if (o - 1) * s[i] >= n + pb: o -= 1
      applied.append((pb, pa + max(0, (o - 1) * s[i] + span - total)))
      outs.append(o)
    return pads, applied, tuple(outs)

  def _pooled(self: Tensor, k: tuple[int, ...], stride: Any, dilation: Any, pads: list[tuple[int, int]],  # type: ignore[misc]
              outs: tuple[int, ...], value: Any) -> Tensor:
    """The (..., *outs, *k) windows of self padded by `pads` with `value`."""
    nd = len(k)
    x = self.pad([None] * (self.ndim - nd) + pads, value=value) if any(b or a for b, a in pads) else self
    x = x._pool(k, stride if stride is not None else k, dilation)
    return x.shrink([None] * (self.ndim - nd) + [(0, o) for o in outs] + [None] * nd)

  def avg_pool2d(self: Tensor, kernel_size: Any = (2, 2), stride: Any = None, dilation: Any = 1, padding: Any = 0,  # type: ignore[misc]
                 ceil_mode: bool = False, count_include_pad: bool = True) -> Tensor:
    """Average over windows of the last len(kernel_size) dims. The divisor counts the window's elements inside the input,
    and inside the asked-for padding too with count_include_pad (never the extra padding of ceil_mode), as in torch."""
    k = make_tuple(kernel_size, 2) if isinstance(kernel_size, int) else tuple(kernel_size)
    pads, applied, outs = self._pool_pads(k, stride, dilation, padding, ceil_mode, "avg_pool2d")
    x = self._float()
    axes = tuple(range(-len(k), 0))
    win = x._pooled(k, stride, dilation, applied, outs, 0.0)
    if applied == pads and (count_include_pad or not any(b or a for b, a in pads)): return win.mean(axes)
    # ones over the region that counts, zero-padded to the applied padding
    spatial = x.shape[-len(k):]
    region = x._const(1.0, shape=tuple(n + b + a for n, (b, a) in zip(spatial, pads)) if count_include_pad else spatial)
    extra = [(b - rb, a - ra) for (b, a), (rb, ra) in zip(applied, pads if count_include_pad else [(0, 0)] * len(k))]
    counts = region._pooled(k, stride, dilation, extra, outs, 0.0).sum(axes)
    return win.sum(axes) / counts

  def max_pool2d(self: Tensor, kernel_size: Any = (2, 2), stride: Any = None, dilation: Any = 1, padding: Any = 0,  # type: ignore[misc]
                 ceil_mode: bool = False, return_indices: bool = False) -> Tensor | tuple[Tensor, Tensor]:
    """Max over windows of the last len(kernel_size) dims. return_indices also gives, per output, the int32 index of the
    (first) maximum in the flattened pooled dims of the input, as max_unpool2d takes it."""
    from core.tensor.tensor import Tensor
    k = make_tuple(kernel_size, 2) if isinstance(kernel_size, int) else tuple(kernel_size)
    _, applied, outs = self._pool_pads(k, stride, dilation, padding, ceil_mode, "max_pool2d")
    axes = tuple(range(-len(k), 0))
    if not return_indices and dtypes.is_float(self.dtype):
      # the input's gradient from _max_pool_grad (a gather per input element), not the chain rule back through the windows
      nd = len(k)
      params = (k, make_tuple(stride if stride is not None else k, nd), make_tuple(dilation, nd), tuple(applied), outs)
      best = self.detach()._pooled(k, stride, dilation, applied, outs, self.dtype.min).max(axes)
      return type(self)._wrap(custom_vjp(best.uop, "max_pool", params, self.uop), best, self)
    win = self._pooled(k, stride, dilation, applied, outs, self.dtype.min)
    best = win.max(axes)
    if not return_indices: return best
    spatial = self.shape[-len(k):]
    size = prod(spatial)
    pos = Tensor.arange(size, device=self.device, dtype=dtypes.int32).reshape(spatial)._pooled(k, stride, dilation, applied, outs, size)
    first = (win == best.reshape(best.shape + (1,) * len(k))).where(pos, size).min(axes)
    return best, first.detach()

  def max_unpool2d(self: Tensor, indices: Tensor, kernel_size: Any = (2, 2), stride: Any = None, dilation: Any = 1,  # type: ignore[misc]
                   padding: Any = 0, output_size: Any = None) -> Tensor:
    """Puts each value at its index from max_pool2d(return_indices=True) in a zero tensor of the pooled input's shape
    (output_size, or the size the pooling arguments imply)."""
    from core.tensor.tensor import Tensor
    k = make_tuple(kernel_size, 2) if isinstance(kernel_size, int) else tuple(kernel_size)
    nd = len(k)
    if indices.shape != self.shape: raise ValueError(f"max_unpool2d: indices {indices.shape} must have the shape of the input {self.shape}")
    lead, spatial = self.shape[:-nd], self.shape[-nd:]
    if output_size is None:
      s, d = make_tuple(stride if stride is not None else k, nd), make_tuple(dilation, nd)
      outs = tuple((n - 1) * s[i] - pb - pa + d[i] * (k[i] - 1) + 1 for i, (n, (pb, pa)) in enumerate(zip(spatial, _padding(padding, nd))))
    else: outs = tuple(output_size)[-nd:]
    size, q = prod(outs), prod(spatial)
    hit = indices.reshape(lead + (1, q)) == Tensor.arange(size, device=self.device).reshape(size, 1)
    # overlapping windows can repeat an index (always with the same value): take it once, not a sum of the copies
    picked = hit.where(self.reshape(lead + (1, q)), self._const(self.dtype.min, shape=())).max(-1)
    return hit.any(-1).where(picked, self._const(0, shape=())).reshape(lead + outs)
  avg_pool = avg_pool2d
  max_pool = max_pool2d

  def interpolate(self: Tensor, size: Sequence[int], mode: str = "linear", align_corners: bool = False) -> Tensor:  # type: ignore[misc]
    """Resizes the last len(size) dims. mode: "nearest" (torch's floor rule), "nearest-exact", "linear"/"bilinear"/"trilinear"."""
    from core.tensor.tensor import Tensor
    if mode not in ("nearest", "nearest-exact", "linear", "bilinear", "trilinear"): raise ValueError(f"interpolate: unknown mode {mode!r}")
    if align_corners and mode.startswith("nearest"): raise ValueError("interpolate: align_corners only applies to linear modes")
    size = check_ints("interpolate", "size", size, lo=1)
    if len(size) > self.ndim: raise ValueError(f"Tensor.interpolate: argument 'size' {size} has more dims than the input {self.shape}")
    if self.dtype is dtypes.uint8 and not mode.startswith("nearest"): return _interpolate_uint8(self, size, align_corners)
    x = self
    for i, out in enumerate(size):
      ax = self.ndim - len(size) + i
      n = x.shape[ax]
      if out == n and not mode.startswith("nearest"): continue
      pos = Tensor.arange(out, device=self.device, dtype=dtypes.float32)
      idx_shape = [1] * ax + [out] + [1] * (x.ndim - ax - 1)
      gshape = list(x.shape)
      gshape[ax] = out
      def pick(ix: Tensor) -> Tensor: return x.gather(ax, ix.reshape(idx_shape).expand(gshape))
      if mode == "nearest": x = pick((pos * (n / out)).floor().cast(dtypes.int32).minimum(n - 1))
      elif mode == "nearest-exact": x = pick(((pos + 0.5) * (n / out)).floor().cast(dtypes.int32).minimum(n - 1))
      else:
        src = pos * ((n - 1) / (out - 1)) if align_corners and out > 1 else ((pos + 0.5) * (n / out) - 0.5).maximum(0.0)
        if align_corners and out == 1: src = pos * 0
        i0 = src.floor().cast(dtypes.int32).minimum(n - 1)
        i1 = (i0 + 1).minimum(n - 1)
        w = (src - i0.cast(dtypes.float32)).reshape(idx_shape)
        xf = x._float()
        x = xf.gather(ax, i0.reshape(idx_shape).expand(gshape)) * (1 - w) + xf.gather(ax, i1.reshape(idx_shape).expand(gshape)) * w
    return x.cast(self.dtype) if dtypes.is_float(self.dtype) else x.round().cast(self.dtype) if x.dtype != self.dtype else x


def _weight_bits(wmax: float) -> int:
  # the most fractional bits that keep every weight (at most wmax) below 2**15, at most 22
  p = 0
  while p < 22 and int(0.5 + wmax * (1 << (p + 1))) < (1 << 15): p += 1
  return p

def _interpolate_uint8(x: Tensor, size: Sequence[int], align_corners: bool) -> Tensor:
  """Linear interpolation of uint8 images as PyTorch's CPU kernel computes it: one axis at a time, last first, each in
  fixed point (weights rounded to as many fractional bits as stay below 2**15) and rounded half up back to uint8."""
  from core.tensor.tensor import Tensor
  for i in range(len(size) - 1, -1, -1):
    ax, out = x.ndim - len(size) + i, size[i]
    n = x.shape[ax]
    if out == n: continue
    i0s, i1s, ws = [], [], []
    for o in range(out):
      src = o * (n - 1) / (out - 1) if align_corners and out > 1 else 0.0 if align_corners else max((o + 0.5) * n / out - 0.5, 0.0)
      i0 = min(int(src), n - 1)
      i0s.append(i0)
      i1s.append(min(i0 + 1, n - 1))
      ws.append(0.0 if i0 == n - 1 else src - i0)
    bits = _weight_bits(max(max(ws), max(1 - w for w in ws)))
    shape = [1] * ax + [out] + [1] * (x.ndim - ax - 1)
    gshape = list(x.shape)
    gshape[ax] = out
    def col(v: list[int]) -> Tensor: return Tensor(v, device=x.device, dtype=dtypes.int32).reshape(shape)
    w1 = col([int(w * (1 << bits) + 0.5) for w in ws])
    w0 = col([int((1 - w) * (1 << bits) + 0.5) for w in ws])
    a = x.gather(ax, col(i0s).expand(gshape)).cast(dtypes.int32)
    b = x.gather(ax, col(i1s).expand(gshape)).cast(dtypes.int32)
    x = ((a * w0 + b * w1 + (1 << (bits - 1))) >> bits).clip(0, 255).cast(dtypes.uint8)
  return x
