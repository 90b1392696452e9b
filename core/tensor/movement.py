"""Movement ops on Tensors: reshape/permute/expand/pad/shrink/flip and what is built from them (cat, stack, split, repeat)."""
from __future__ import annotations
from typing import TYPE_CHECKING, Any, Sequence
from core.helpers import prod, argfix
from core.ir.dtype import dtypes
from core.ir.ops import UOp, Ops, sint, sym_val
from core.tensor.disk import on_disk, disk_view
from core.tensor.validate import check_shape, check_ints, check_int

if TYPE_CHECKING:
  from core.tensor.tensor import Tensor

def _axis(dim: int, ndim: int, op: str) -> int:
  if not -max(ndim, 1) <= dim < max(ndim, 1): raise IndexError(f"{op}: dim {dim} is out of range for a tensor with {ndim} dims")
  return dim + ndim if dim < 0 else dim

class MovementMixin:
  def _mop(self: Tensor, uop: UOp) -> Tensor:  # type: ignore[misc]
    if uop is self.uop: return self   # identity moves (UOp returns itself) keep the tensor
    # a contiguous slice of a file (DISK) is a view of it at once: DISK runs no kernels, so it can't be a lazy view
    if on_disk(uop) and (view := disk_view(uop)) is not None: uop = view
    return type(self)._wrap(uop, self)

  def reshape(self: Tensor, shape: Any, *args: int) -> Tensor:  # type: ignore[misc]
    """A new shape with the same number of elements; one dim may be -1 (inferred), None keeps that dim."""
    new = check_shape("reshape", "shape", argfix(shape, *args), allow=(-1, None))
    if new == self.shape: return self
    if all([type(d) is int and d >= 0 for d in new]) and type(n := self.numel()) is int:   # plain sizes (a conv's reshapes)
      if prod(new) == n: return self._mop(self.uop.reshape(new))
      raise ValueError(f"reshape {self.shape} -> {new}: sizes differ ({n} vs {prod(new)} elements)")
    new = tuple(self.shape[i] if d is None else d for i, d in enumerate(new))
    if new.count(-1) > 1: raise RuntimeError(f"reshape {self.shape} -> {new}: only one dim can be -1")
    if -1 in new:
      rest = prod(d for d in new if d != -1)
      if rest == 0 or self.numel() % rest: raise ValueError(f"reshape {self.shape} -> {new}: can't infer the -1 dim")
      new = tuple(self.numel() // rest if d == -1 else d for d in new)
    # symbolic dims (bound Variables) are checked with their current values
    if any(sym_val(d) < 0 for d in new) or sym_val(prod(new)) != sym_val(self.numel()):
      raise ValueError(f"reshape {self.shape} -> {new}: sizes differ ({self.numel()} vs {prod(new)} elements)")
    return self if new == self.shape else self._mop(self.uop.reshape(new))
  def view(self: Tensor, shape: Any, *args: int) -> Tensor: return self.reshape(shape, *args)  # type: ignore[misc]

  def permute(self: Tensor, order: Any, *args: int) -> Tensor:  # type: ignore[misc]
    o = tuple(_axis(d, self.ndim, "permute") for d in argfix(order, *args))
    if sorted(o) != list(range(self.ndim)): raise RuntimeError(f"permute: {o} is not a permutation of the {self.ndim} dims of {self.shape}")
    return self._mop(self.uop.permute(o))
  def transpose(self: Tensor, dim0: int = 1, dim1: int = 0) -> Tensor:  # type: ignore[misc]
    order = list(range(self.ndim))
    a, b = _axis(dim0, self.ndim, "transpose"), _axis(dim1, self.ndim, "transpose")
    order[a], order[b] = order[b], order[a]
    return self.permute(order)
  @property
  def T(self: Tensor) -> Tensor: return self.permute(tuple(range(self.ndim))[::-1])  # type: ignore[misc]
  def movedim(self: Tensor, source: int, destination: int) -> Tensor:  # type: ignore[misc]
    s, d = _axis(source, self.ndim, "movedim"), _axis(destination, self.ndim, "movedim")
    order = [i for i in range(self.ndim) if i != s]
    order.insert(d, s)
    return self.permute(order)
  moveaxis = movedim

  def flatten(self: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:  # type: ignore[misc]
    if self.ndim == 0: return self.reshape(1)
    s, e = _axis(start_dim, self.ndim, "flatten"), _axis(end_dim, self.ndim, "flatten")
    return self.reshape(self.shape[:s] + (prod(self.shape[s:e + 1]),) + self.shape[e + 1:])
  def unflatten(self: Tensor, dim: int, sizes: Sequence[int]) -> Tensor:  # type: ignore[misc]
    d = _axis(dim, self.ndim, "unflatten")
    return self.reshape(self.shape[:d] + tuple(sizes) + self.shape[d + 1:])
  def squeeze(self: Tensor, dim: int | Sequence[int] | None = None) -> Tensor:  # type: ignore[misc]
    if dim is None: return self.reshape(tuple(d for d in self.shape if d != 1))
    dims = {_axis(d, self.ndim, "squeeze") for d in ((dim,) if isinstance(dim, int) else dim)}
    return self.reshape(tuple(d for i, d in enumerate(self.shape) if not (i in dims and d == 1)))
  def unsqueeze(self: Tensor, dim: int) -> Tensor:  # type: ignore[misc]
    d = _axis(dim, self.ndim + 1, "unsqueeze")
    return self.reshape(self.shape[:d] + (1,) + self.shape[d:])

  def expand(self: Tensor, shape: Any, *args: int) -> Tensor:  # type: ignore[misc]
    """Broadcasts size-1 dims (and new leading dims) to `shape`; -1 keeps a dim."""
    new = check_shape("expand", "shape", argfix(shape, *args), allow=(-1,))
    if len(new) < self.ndim: raise ValueError(f"expand {self.shape} -> {new}: the target has fewer dims")
    base = (1,) * (len(new) - self.ndim) + self.shape
    new = tuple(b if n == -1 else n for b, n in zip(base, new))
    for b, n in zip(base, new):
      if b != n and b != 1: raise ValueError(f"expand {self.shape} -> {new}: only size-1 dims can grow")
    if new == self.shape: return self
    x = self.reshape(base)
    return x._mop(x.uop.expand(new))
  def expand_as(self: Tensor, other: Tensor) -> Tensor: return self.expand(other.shape)  # type: ignore[misc]

  def shrink(self: Tensor, arg: Sequence[tuple[sint, sint] | None]) -> Tensor:  # type: ignore[misc]
    a = tuple((0, s) if x is None else tuple(x) for x, s in zip(arg, self.shape))
    for (b, e), s in zip(a, self.shape):
      # symbolic bounds (bound Variables) are checked with their current values
      if not 0 <= sym_val(b) <= sym_val(e) <= sym_val(s): raise ValueError(f"shrink {self.shape} by {a}: ranges must satisfy 0 <= start <= end <= size")
    return self._mop(self.uop.shrink(a))  # type: ignore[arg-type]

  def flip(self: Tensor, axis: int | Sequence[int], *args: int) -> Tensor:  # type: ignore[misc]
    given = [_axis(a, self.ndim, "flip") for a in argfix(axis, *args)]
    if len(set(given)) != len(given): raise RuntimeError(f"flip: dims {given} repeat a dim")
    axes = set(given)
    return self._mop(self.uop.flip(tuple(i in axes for i in range(self.ndim))))

  def _pad_arg(self: Tensor, padding: Any) -> list[tuple[int, int]]:  # type: ignore[misc]
    """Per-dim (before, after) from either ((b, a) or None per dim) or torch's flat (left, right, ...) starting at the last dim."""
    p = list(padding)
    if p and all(isinstance(x, int) for x in p):
      if len(p) % 2 or len(p) // 2 > self.ndim: raise ValueError(f"pad: flat padding {p} needs an even length <= 2*{self.ndim}")
      pairs = [(p[2 * i], p[2 * i + 1]) for i in range(len(p) // 2)][::-1]
      return [(0, 0)] * (self.ndim - len(pairs)) + pairs
    if len(p) != self.ndim: raise ValueError(f"pad: {len(p)} (before, after) pairs for a tensor with {self.ndim} dims")
    return [(0, 0) if x is None else (int(x[0]), int(x[1])) for x in p]

  def pad(self: Tensor, padding: Any, mode: str = "constant", value: float = 0.0) -> Tensor:  # type: ignore[misc]
    """Pads (or, with negative amounts, crops) each dim. Modes: constant, reflect, replicate, circular."""
    pads = self._pad_arg(padding)
    if mode not in ("constant", "reflect", "replicate", "circular"): raise NotImplementedError(f"pad: unknown mode {mode!r}")
    # negative pads are crops. torch crops first for circular (the wrap comes from what is left) and pads first for
    # reflect and replicate (they read the whole input); for constant the order doesn't matter
    pos = [(max(0, b), max(0, a)) for b, a in pads]
    if mode in ("reflect", "replicate") and any(b < 0 or a < 0 for b, a in pads):
      padded = self.pad(pos, mode=mode)
      crop = [(max(0, -b), s - max(0, -a)) for (b, a), s in zip(pads, padded.shape)]
      if any(e < b for b, e in crop): raise ValueError(f"pad: negative padding {pads} removes more than shape {self.shape}")
      return padded.shrink(crop)
    x = self
    if pos != pads:   # a crop first (a shrink even by nothing costs its checks: a conv pads every call)
      crop = [(max(0, -b), s - max(0, -a)) for (b, a), s in zip(pads, self.shape)]
      if any(e < b for b, e in crop): raise ValueError(f"pad: negative padding {pads} removes more than shape {self.shape}")
      x = self.shrink(crop)
    if not any(b or a for b, a in pos): return x
    if mode == "constant":
      ret = x._mop(x.uop.pad(tuple(pos)))
      if value == 0: return ret
      inside = x._const(True, dtypes.bool).pad(pos)
      return inside.where(ret, value)
    for ax, (b, a) in enumerate(pos):
      if not (b or a): continue
      n = x.shape[ax]
      def sl(s: int, e: int) -> Tensor: return x.shrink([(s, e) if i == ax else None for i in range(x.ndim)])
      if mode == "reflect":
        if b >= n or a >= n: raise ValueError(f"pad reflect: padding {(b, a)} must be smaller than dim {ax} of size {n}")
        parts = [sl(1, b + 1).flip(ax), x, sl(n - a - 1, n - 1).flip(ax)]
      elif mode == "replicate":
        parts = [sl(0, 1).expand([b if i == ax else -1 for i in range(x.ndim)]), x,
                 sl(n - 1, n).expand([a if i == ax else -1 for i in range(x.ndim)])]
      else:
        if b > n or a > n: raise ValueError(f"pad circular: padding {(b, a)} must be at most dim {ax} of size {n}")
        parts = [sl(n - b, n), x, sl(0, a)]
      x = parts[0].cat(*parts[1:], dim=ax)
    return x

  def cat(self: Tensor, *args: Tensor, dim: int = 0) -> Tensor:  # type: ignore[misc]
    """Joins tensors along `dim`: each is padded to the full length with zeros and the results are added."""
    if isinstance(self, (list, tuple)):   # Tensor.cat([a, b])
      if args: raise ValueError("cat: pass the tensors either as one sequence or one by one, not both")
      return self[0].cat(*self[1:], dim=dim)
    ts = [self, *args]
    d = _axis(dim, self.ndim, "cat")
    for t in ts:
      if t.ndim != self.ndim or any(a != b for i, (a, b) in enumerate(zip(t.shape, self.shape)) if i != d):
        raise ValueError(f"cat: shapes {[x.shape for x in ts]} differ outside dim {d}")
    from core.ir.dtype import least_upper_dtype
    dt = least_upper_dtype(*[t.dtype for t in ts])
    ts = [t.cast(dt) for t in ts]
    if len(ts) == 1: return ts[0]
    total, off, parts = sum(t.shape[d] for t in ts), 0, []
    for t in ts:
      parts.append(t.pad([(off, total - off - t.shape[d]) if i == d else None for i in range(t.ndim)]))
      off += t.shape[d]
    out = parts[0]
    for p in parts[1:]: out = out._alu(Ops.OR if dt is dtypes.bool else Ops.ADD, p)
    return out
  def stack(self: Tensor, *args: Tensor, dim: int = 0) -> Tensor:  # type: ignore[misc]
    if isinstance(self, (list, tuple)):   # Tensor.stack([a, b])
      if args: raise ValueError("stack: pass the tensors either as one sequence or one by one, not both")
      return self[0].stack(*self[1:], dim=dim)
    d = _axis(dim, self.ndim + 1, "stack")
    return self.unsqueeze(d).cat(*[t.unsqueeze(d) for t in args], dim=d)

  def repeat(self: Tensor, repeats: Any, *args: int) -> Tensor:  # type: ignore[misc]
    """Tiles the tensor `repeats[i]` times along dim i (like torch.Tensor.repeat)."""
    reps = check_ints("repeat", "repeats", argfix(repeats, *args), lo=0)
    if len(reps) < self.ndim: raise ValueError(f"repeat: {reps} has fewer entries than the {self.ndim} dims of {self.shape}")
    base = (1,) * (len(reps) - self.ndim) + self.shape
    x = self.reshape([v for s in base for v in (1, s)])
    x = x.expand([v for r, s in zip(reps, base) for v in (r, s)])
    return x.reshape([r * s for r, s in zip(reps, base)])
  def repeat_interleave(self: Tensor, repeats: int, dim: int | None = None) -> Tensor:  # type: ignore[misc]
    repeats = check_int("repeat_interleave", "repeats", repeats, lo=0)
    x, d = (self.flatten(), 0) if dim is None else (self, _axis(dim, self.ndim, "repeat_interleave"))
    x = x.unsqueeze(d + 1).expand([repeats if i == d + 1 else -1 for i in range(x.ndim + 1)])
    return x.flatten(d, d + 1)

  def split(self: Tensor, sizes: int | Sequence[int], dim: int = 0) -> list[Tensor]:  # type: ignore[misc]
    d = _axis(dim, self.ndim, "split")
    n = self.shape[d]
    if isinstance(sizes, int):
      if sizes <= 0: raise ValueError(f"split: size must be > 0, got {sizes}")
      sizes = [min(sizes, n - i) for i in range(0, max(n, 1), sizes)]
    if sum(sizes) != n: raise ValueError(f"split: sizes {list(sizes)} don't add up to dim {d} of size {n}")
    out, off = [], 0
    for s in sizes:
      out.append(self.shrink([(off, off + s) if i == d else None for i in range(self.ndim)]))
      off += s
    return out
  def chunk(self: Tensor, chunks: int, dim: int = 0) -> list[Tensor]:  # type: ignore[misc]
    if chunks <= 0: raise ValueError(f"chunk: chunks must be > 0, got {chunks}")
    d = _axis(dim, self.ndim, "chunk")
    return self.split(max(1, -(-self.shape[d] // chunks)), d)
  def unbind(self: Tensor, dim: int = 0) -> list[Tensor]:  # type: ignore[misc]
    return [t.squeeze(dim) for t in self.split(1, dim)]

  def roll(self: Tensor, shifts: int | Sequence[int], dims: int | Sequence[int] | None = None) -> Tensor:  # type: ignore[misc]
    """Shifts elements circularly along `dims` (the flattened tensor when dims is None), like torch.roll."""
    if dims is None: return self.flatten().roll(shifts, 0).reshape(self.shape)
    ds = (dims,) if isinstance(dims, int) else tuple(dims)
    ss = (shifts,) if isinstance(shifts, int) else tuple(shifts)
    if len(ds) != len(ss): raise RuntimeError(f"roll: {len(ss)} shifts for {len(ds)} dims")
    x = self
    for d, s in zip(ds, ss):
      ax = _axis(d, self.ndim, "roll")
      n = x.shape[ax]
      if n == 0 or s % n == 0: continue
      head, tail = x.split([n - s % n, s % n], ax)
      x = tail.cat(head, dim=ax)
    return x

  def _tri_mask(self: Tensor, diagonal: int, upper: bool) -> Tensor:  # type: ignore[misc]
    from core.tensor.tensor import Tensor
    if self.ndim < 2: raise ValueError(f"{'triu' if upper else 'tril'} needs at least 2 dims, got shape {self.shape}")
    r, c = self.shape[-2], self.shape[-1]
    rows = Tensor.arange(diagonal, r + diagonal, device=self.device).reshape(r, 1)
    cols = Tensor.arange(c, device=self.device).reshape(1, c)
    return rows <= cols if upper else rows >= cols
  def triu(self: Tensor, diagonal: int = 0) -> Tensor:  # type: ignore[misc]
    """The elements on and above the `diagonal`-th diagonal of the last two dims; the rest are 0."""
    return self._tri_mask(diagonal, True).where(self, self._const(0))
  def tril(self: Tensor, diagonal: int = 0) -> Tensor:  # type: ignore[misc]
    """The elements on and below the `diagonal`-th diagonal of the last two dims; the rest are 0."""
    return self._tri_mask(diagonal, False).where(self, self._const(0))

  def diag(self: Tensor) -> Tensor:  # type: ignore[misc]
    """A 1-D tensor as the diagonal of a square matrix (each element followed by n zeros, read back with period n+1)."""
    if self.ndim != 1: raise ValueError(f"diag needs a 1-D tensor, got shape {self.shape}")
    n = self.shape[0]
    return self.unsqueeze(-1).pad([None, (0, n)]).flatten()[:n * n].reshape(n, n)
  def diagonal(self: Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:  # type: ignore[misc]
    """The `offset`-th diagonal of the (dim1, dim2) planes, as a new last dim (torch.diagonal)."""
    a, b = _axis(dim1, self.ndim, "diagonal"), _axis(dim2, self.ndim, "diagonal")
    if a == b: raise RuntimeError(f"diagonal: dim1 and dim2 are the same dim ({a})")
    x = self.permute([i for i in range(self.ndim) if i not in (a, b)] + [a, b])
    r, c = x.shape[-2], x.shape[-1]
    lo_r, lo_c = max(0, -offset), max(0, offset)
    d = max(0, min(r - lo_r, c - lo_c))
    x = x.shrink([None] * (x.ndim - 2) + [(min(lo_r, r), min(lo_r, r) + d), (min(lo_c, c), min(lo_c, c) + d)])
    if d == 0: return x.reshape(x.shape[:-2] + (0,))
    return x.flatten(-2)[..., ::d + 1]

  def meshgrid(self: Tensor, *args: Tensor, indexing: str = "ij") -> tuple[Tensor, ...]:  # type: ignore[misc]
    """Coordinate grids from 1-D (or 0-d) tensors; indexing "ij" (matrix) or "xy" (Cartesian: the first two swap)."""
    if indexing not in ("ij", "xy"): raise RuntimeError(f"meshgrid: indexing must be 'ij' or 'xy', got {indexing!r}")
    ts = (self, *args)
    sizes = [t.numel() for t in ts]
    if indexing == "xy" and len(ts) > 1: sizes[0], sizes[1] = sizes[1], sizes[0]
    out = []
    for i, t in enumerate(ts):
      pos = (1 if i == 0 else 0 if i == 1 else i) if indexing == "xy" and len(ts) > 1 else i
      out.append(t.reshape([-1 if j == pos else 1 for j in range(len(ts))]).expand(sizes))
    return tuple(out)
