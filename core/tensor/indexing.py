"""Indexing: __getitem__ (ints, slices with steps, None, Ellipsis, integer tensors), __setitem__, gather, one_hot."""
from __future__ import annotations
from typing import TYPE_CHECKING, Any
from core.helpers import prod
from core.ir.dtype import dtypes
from core.tensor.validate import check_index_values, check_index_tensor
from core.ir.ops import UOp, sint

if TYPE_CHECKING:
  from core.tensor.tensor import Tensor

def _strided(x: Tensor, ax: int, start: int, step: int, count: int) -> Tensor:
  """Elements start, start+step, ... (count of them, step > 0) of dim `ax`, from movement ops only."""
  if count == 0 or step == 1: return x.shrink([(start, start + count) if i == ax else None for i in range(x.ndim)])
  n = x.shape[ax]
  x = x.shrink([(start, n) if i == ax else None for i in range(x.ndim)])
  need = count * step
  # pad to a whole number of steps (pad, not read: the shrink below only keeps column 0)
  x = x.pad([(0, need - x.shape[ax]) if i == ax else None for i in range(x.ndim)]) if need > x.shape[ax] else \
    x.shrink([(0, need) if i == ax else None for i in range(x.ndim)])
  x = x.reshape(x.shape[:ax] + (count, step) + x.shape[ax + 1:])
  x = x.shrink([(0, 1) if i == ax + 1 else None for i in range(x.ndim)])
  return x.reshape(x.shape[:ax + 1] + x.shape[ax + 2:])

def _symbolic_bounds(i: slice, n: sint, ax: int) -> tuple[sint, sint]:
  """(start, stop) of a step-1 slice whose bounds or dim are symbolic (bound Variables): None means the dim's ends, a
  negative int counts from the end; a symbolic bound is taken as it is (shrink checks it with its current value)."""
  if i.step not in (None, 1): raise IndexError(f"dim {ax}: a slice with a symbolic bound or size must have step 1, got {i.step}")
  def bound(v: Any, default: sint) -> sint:
    if v is None: return default
    if isinstance(v, int) and v < 0: return n + v if isinstance(n, UOp) else max(0, n + v)
    return min(v, n) if isinstance(v, int) and isinstance(n, int) else v
  return bound(i.start, 0), bound(i.stop, n)

def _has_float(v: Any) -> bool:
  return isinstance(v, float) or (isinstance(v, (list, tuple)) and any(_has_float(x) for x in v))

class IndexingMixin:
  def _basic_index(self: Tensor, idx: tuple[Any, ...]) -> tuple[Tensor, list[tuple[int, Tensor]]]:  # type: ignore[misc]
    """Applies ints, slices and None; returns the view and [(dim in the view, index tensor)] still to gather."""
    from core.tensor.tensor import Tensor
    if sum(1 for i in idx if i is Ellipsis) > 1: raise IndexError("an index can only have a single ellipsis")
    consumed = sum(1 for i in idx if i is not None and i is not Ellipsis)
    if consumed > self.ndim: raise IndexError(f"too many indices ({consumed}) for a tensor with {self.ndim} dims (shape {self.shape})")
    if Ellipsis in [i for i in idx if not isinstance(i, Tensor)]:
      e = next(k for k, i in enumerate(idx) if i is Ellipsis)
      idx = idx[:e] + (slice(None),) * (self.ndim - consumed) + idx[e + 1:]
    else: idx = idx + (slice(None),) * (self.ndim - consumed)
    x, ax, tensors = self, 0, []
    for i in idx:
      if i is None:
        x = x.unsqueeze(ax)
        ax += 1
      elif isinstance(i, bool): raise TypeError("boolean scalar indices are not supported; use where()")
      elif isinstance(i, int):
        n = x.shape[ax]
        if not -n <= i < n: raise IndexError(f"index {i} is out of bounds for dim {ax} with size {n}")
        i = i + n if i < 0 else i
        x = x.shrink([(i, i + 1) if k == ax else None for k in range(x.ndim)])
        x = x.reshape(x.shape[:ax] + x.shape[ax + 1:])
      elif isinstance(i, slice):
        if any(isinstance(v, Tensor) for v in (i.start, i.stop, i.step)): raise TypeError("a Tensor can't be a slice bound; use an int")
        n = x.shape[ax]
        if any(isinstance(v, UOp) for v in (i.start, i.stop)) or isinstance(n, UOp):
          x = x.shrink([_symbolic_bounds(i, n, ax) if k == ax else None for k in range(x.ndim)])
          ax += 1
          continue
        start, stop, step = i.indices(n)
        count = len(range(start, stop, step))
        if step > 0: x = _strided(x, ax, start, step, count)
        else:
          lo = start + (count - 1) * step if count else 0
          x = x.shrink([(lo, lo + ((count - 1) * -step + 1 if count else 0)) if k == ax else None for k in range(x.ndim)]).flip(ax)
          x = _strided(x, ax, 0, -step, count)
        ax += 1
      elif isinstance(i, (Tensor, list, tuple)):
        if not isinstance(i, Tensor) and (_has_float(i) or (len(i) and all(isinstance(v, bool) for v in i))):
          raise IndexError(f"indices must be ints (boolean masks aren't supported), got {i}")
        if not isinstance(i, Tensor):   # Python ints are checked here, like a plain int index (tensor values can't be: see docs)
          import numpy as np
          try: vals = np.asarray(i, dtype=np.int64)
          except (ValueError, TypeError, OverflowError): raise IndexError(f"Tensor.__getitem__: a list index must hold ints in a rectangular nesting, got {i!r}"[:300]) from None
          check_index_values("__getitem__", vals.reshape(-1).tolist(), x.shape[ax], ax)
        t = i if isinstance(i, Tensor) else Tensor(list(i), device=self.device, dtype=dtypes.int32)
        if not dtypes.is_int(t.dtype): raise IndexError(f"tensor indices must be integers, got {t.dtype}")
        if isinstance(i, Tensor): check_index_tensor("__getitem__", "index", t, -x.shape[ax], x.shape[ax], ax)
        tensors.append((ax, t))
        ax += 1
      else: raise TypeError(f"can't index a Tensor with {type(i).__name__}")
    return x, tensors

  def __getitem__(self: Tensor, indices: Any) -> Tensor:  # type: ignore[misc]
    idx = indices if isinstance(indices, tuple) else (indices,)
    x, tensors = self._basic_index(idx)
    if not tensors: return x
    return x._gather_dims(tensors)

  def _gather_dims(self: Tensor, tensors: list[tuple[int, Tensor]]) -> Tensor:  # type: ignore[misc]
    """Advanced indexing: the index tensors broadcast together; their dims replace the indexed dims (in place when the
    indexed dims are adjacent, else in front, like numpy). Gathers by summing a one-hot mask (no data-dependent loads)."""
    from core.tensor.tensor import Tensor
    dims = [d for d, _ in tensors]
    bshape = Tensor._broadcast_shape(*[t.shape for _, t in tensors])
    rest = [d for d in range(self.ndim) if d not in dims]
    x = self.permute(dims + rest)
    k, nb = len(dims), len(bshape)
    mask = None
    for j, (d, t) in enumerate(tensors):
      n = self.shape[d]
      t = t._broadcast_to(bshape)
      t = (t < 0).where(t + n, t)
      oh = t.reshape(bshape + (1,) * j + (1,) + (1,) * (k - j - 1)) == \
        Tensor.arange(n, device=self.device).reshape((1,) * nb + (1,) * j + (n,) + (1,) * (k - j - 1))
      mask = oh if mask is None else mask & oh
    assert mask is not None
    rshape = tuple(self.shape[d] for d in rest)
    xe = x.reshape((1,) * nb + x.shape)
    m = mask.reshape(mask.shape + (1,) * len(rshape))
    full = bshape + tuple(self.shape[d] for d in dims) + rshape
    picked = m.expand(full).where(xe.expand(full), 0)
    ret = picked.sum(tuple(range(nb, nb + k)), dtype=picked.dtype if picked.dtype is not dtypes.bool else dtypes.uint8).cast(self.dtype)
    # numpy rule: adjacent advanced dims stay where they were
    if dims == list(range(dims[0], dims[0] + k)) and dims[0] > 0:
      order = list(range(nb, nb + dims[0])) + list(range(nb)) + list(range(nb + dims[0], ret.ndim))
      ret = ret.permute(order)
    return ret

  def gather(self: Tensor, dim: int, index: Tensor) -> Tensor:  # type: ignore[misc]
    """out[i][j][k] = self[index[i][j][k]][j][k] for dim=0 (torch.gather): index has self's rank, sizes <= self's."""
    from core.tensor.tensor import Tensor
    from core.tensor.movement import _axis
    d = _axis(dim, self.ndim, "gather")
    if not dtypes.is_int(index.dtype): raise TypeError(f"Tensor.gather: argument 'index' must be an int tensor, got {index.dtype}")
    check_index_tensor("gather", "index", index, 0, self.shape[d], d)
    if index.ndim != self.ndim or any(a > b for i, (a, b) in enumerate(zip(index.shape, self.shape)) if i != d):
      raise RuntimeError(f"gather: index shape {index.shape} must have the rank of {self.shape} and no larger dims outside dim {d}")
    n = self.shape[d]
    x = self.shrink([None if i == d else (0, s) for i, s in enumerate(index.shape)])
    x = x.unsqueeze(-1).transpose(d, -1)  # dim d moves to the end, a 1 takes its place
    mask = index.unsqueeze(-1) == Tensor.arange(n, device=self.device).reshape((1,) * index.ndim + (n,))
    full = index.shape + (n,)
    picked = mask.where(x.expand(full), 0)
    return picked.sum(-1, dtype=picked.dtype if picked.dtype is not dtypes.bool else dtypes.uint8).cast(self.dtype)

  def one_hot(self: Tensor, num_classes: int) -> Tensor:  # type: ignore[misc]
    """(..., num_classes) int32 with a 1 at each element's value. As in tinygrad, num_classes must be given (>= 0)."""
    from core.tensor.tensor import Tensor
    if not dtypes.is_int(self.dtype): raise RuntimeError(f"one_hot needs an int tensor, got {self.dtype}")
    if num_classes < 0: raise ValueError(f"one_hot: num_classes must be >= 0, got {num_classes}")
    check_index_tensor("one_hot", "self", self, 0, num_classes)
    return (self.unsqueeze(-1) == Tensor.arange(num_classes, device=self.device)).cast(dtypes.default_int)

  # *** data-dependent selection: the result size is read from the device (not capturable in a Jit unless `size` is given) ***

  def masked_select(self: Tensor, mask: Tensor, size: int | None = None, fill_value: Any = 0) -> Tensor:  # type: ignore[misc]
    """The elements where `mask` (broadcast to self) is true, flattened in row-major order. With `size`, exactly that
    many (cut, or padded with fill_value), without reading the count from the device."""
    from core.tensor.tensor import Tensor
    if mask.dtype is not dtypes.bool: raise RuntimeError(f"masked_select needs a bool mask, got {mask.dtype}")
    shape = Tensor._broadcast_shape(self.shape, mask.shape)
    x, m = self._broadcast_to(shape).flatten(), mask._broadcast_to(shape).flatten()
    count = int(m.sum().item()) if size is None else size
    if count == 0 or x.numel() == 0: return Tensor.full((count,), fill_value, dtype=self.dtype, device=self.device)
    # the k-th selected element sits at position #{j : (number of trues in m[0..j]) <= k}
    k = Tensor.arange(count, device=self.device)
    src = (m.cumsum().unsqueeze(0) <= k.unsqueeze(1)).sum(1)
    picked = x[src.minimum(x.numel() - 1)]
    return picked if size is None else (k < m.sum()).where(picked, fill_value).cast(self.dtype)

  def nonzero(self: Tensor, size: int | None = None, fill_value: Any = 0) -> Tensor:  # type: ignore[misc]
    """(count, ndim) int32 coordinates of the nonzero elements, in row-major order (torch.nonzero)."""
    from core.tensor.tensor import Tensor
    nz = self != 0
    if self.ndim == 0:
      return Tensor.full((int(nz.item()) if size is None else size, 0), 0, dtype=dtypes.int32, device=self.device)
    coords = [Tensor.arange(s, device=self.device).reshape([s if j == i else 1 for j in range(self.ndim)])._broadcast_to(self.shape)
              for i, s in enumerate(self.shape)]
    grid = coords[0].unsqueeze(-1).cat(*[c.unsqueeze(-1) for c in coords[1:]], dim=-1)
    sel = grid.masked_select(nz.unsqueeze(-1), None if size is None else size * self.ndim, fill_value)
    return sel.reshape(-1, self.ndim).cast(dtypes.int32)

  # *** scatter: one-hot masks and reductions, no data-dependent stores ***

  def _scatter_parts(self: Tensor, dim: int, index: Tensor, src: Tensor) -> tuple[int, Tensor, Tensor, Tensor]:  # type: ignore[misc]
    """(dim, hit, values, iota) at self's shape plus a last axis j over index's `dim`: hit[..., k (at dim), ..., j] says
    index[..., j (at dim), ...] == k, values holds src[..., j, ...] there. Dims index doesn't cover are never hit."""
    from core.tensor.tensor import Tensor
    from core.tensor.movement import _axis
    d = _axis(dim, self.ndim, "scatter")
    if not (index.ndim == self.ndim == src.ndim):
      raise RuntimeError(f"scatter: self {self.shape}, index {index.shape} and src {src.shape} need the same number of dims")
    if not dtypes.is_int(index.dtype): raise RuntimeError(f"scatter: index must be an int tensor, got {index.dtype}")
    check_index_tensor("scatter", "index", index, 0, self.shape[d], d)
    if any((i != d and it > st) or it > sr for i, (st, it, sr) in enumerate(zip(self.shape, index.shape, src.shape))):
      raise RuntimeError(f"scatter: index {index.shape} must be no larger than src {src.shape}, nor than self {self.shape} outside dim {d}")
    if src.dtype != self.dtype: raise RuntimeError(f"scatter: src dtype {src.dtype} differs from self dtype {self.dtype}")
    n, m = self.shape[d], index.shape[d]
    src = src.shrink([(0, s) for s in index.shape])
    # move dim d of index/src to a new last axis and put the target position k at d
    idx = index.unsqueeze(-1).transpose(d, -1)
    val = src.unsqueeze(-1).transpose(d, -1)
    k = Tensor.arange(n, device=self.device).reshape([n if i == d else 1 for i in range(self.ndim)] + [1])
    hit = idx == k
    full = tuple(n if i == d else s for i, s in enumerate(index.shape)) + (m,)
    hit, val = hit._broadcast_to(full), val._broadcast_to(full)
    pad = [(0, st - s) if i != d else None for i, (st, s) in enumerate(zip(self.shape, full))] + [None]
    iota = Tensor.arange(m, device=self.device)
    return d, hit.pad(pad), val.pad(pad), iota

  def scatter(self: Tensor, dim: int, index: Tensor, src: Any, reduce: str | None = None) -> Tensor:  # type: ignore[misc]
    """out[index[i][j]][j] = src[i][j] (dim 0) and so on for other dims; where several go to one place the last one
    wins. reduce="add"/"multiply" combine them with self instead (as scatter_reduce with include_self)."""
    from core.tensor.tensor import Tensor
    if reduce not in (None, "add", "multiply"): raise TypeError(f"scatter: reduce must be None, 'add' or 'multiply', got {reduce!r}")
    if not isinstance(src, Tensor): src = Tensor.full(index.shape, src, dtype=self.dtype, device=self.device)
    elif reduce is not None: raise TypeError("scatter: reduce= takes a scalar src; use scatter_reduce for tensors")
    if reduce is not None: return self.scatter_reduce(dim, index, src, "sum" if reduce == "add" else "prod")
    _, hit, val, iota = self._scatter_parts(dim, index, src)
    last = hit.where(iota, -1).max(-1, keepdim=True)
    chosen = hit & (iota == last)
    picked = chosen.where(val, val._const(0)).sum(-1, dtype=self.dtype if self.dtype is not dtypes.bool else dtypes.uint8).cast(self.dtype)
    return (last.squeeze(-1) >= 0).where(picked, self)

  def scatter_reduce(self: Tensor, dim: int, index: Tensor, src: Tensor, reduce: str, include_self: bool = True) -> Tensor:  # type: ignore[misc]
    """Combines the src values scattered to each place with `reduce` ("sum", "prod", "mean", "amax", "amin"), together
    with self's value there unless include_self=False (places nothing is scattered to keep self)."""
    if reduce not in ("sum", "prod", "mean", "amax", "amin"):
      raise RuntimeError(f"scatter_reduce: reduce must be 'sum', 'prod', 'mean', 'amax' or 'amin', got {reduce!r}")
    _, hit, val, _ = self._scatter_parts(dim, index, src)
    touched = hit.any(-1)
    def own(neutral: Any) -> Tensor: return self if include_self else touched.where(self._const(neutral), self)
    if reduce == "sum": return (hit.where(val, 0).sum(-1, dtype=self.dtype) + own(0)).cast(self.dtype)
    if reduce == "prod": return (hit.where(val, 1).prod(-1, dtype=self.dtype) * own(1)).cast(self.dtype)
    if reduce == "amax": return hit.where(val, self.dtype.min).max(-1).maximum(own(self.dtype.min))
    if reduce == "amin": return hit.where(val, self.dtype.max).min(-1).minimum(own(self.dtype.max))
    total = hit.where(val, 0).sum(-1, dtype=self.dtype) + own(0)
    count = hit.sum(-1) + (1 if include_self else touched.logical_not().cast(dtypes.int32))
    if dtypes.is_float(self.dtype): return (total / count.cast(self.dtype)).cast(self.dtype)
    return total.floordiv(count.cast(self.dtype)).cast(self.dtype)   # torch's integer mean rounds down

  def __setitem__(self: Tensor, indices: Any, v: Any) -> None:  # type: ignore[misc]
    """Writes `v` (broadcast) into the indexed part. Basic indices assign into a view of the buffer; tensor indices
    rebuild the whole tensor with where() from a scatter of v."""
    from core.tensor.tensor import Tensor
    idx = indices if isinstance(indices, tuple) else (indices,)
    view, tensors = self._basic_index(idx)
    target = view._gather_dims(tensors) if tensors else view
    val = v if isinstance(v, Tensor) else Tensor(v, device=self.device, dtype=self.dtype)
    val = val.cast(self.dtype)._broadcast_to(target.shape)
    if self.requires_grad or val.requires_grad:
      # writing into the buffer cuts the graph: refuse rather than silently drop gradients (tinygrad refuses too)
      raise RuntimeError(f"__setitem__ on a tensor of shape {self.shape} that needs gradients is not supported; "
                         "build the result with where()/cat() instead, or .detach() first")
    if not tensors and prod(target.shape) > 0:
      self._own_buffer()
      view, _ = self._basic_index(idx)
      view.assign(val).realize()
      return
    if prod(target.shape) == 0: return
    # scatter through the gradient of the gather: d(sum(self[idx] * val))/d(self) puts val at the indexed positions
    base = self.detach().cast(dtypes.float32) if not dtypes.is_float(self.dtype) else self.detach()
    probe = Tensor(base.uop, requires_grad=False)
    picked = probe[indices]
    onesv = val.cast(base.dtype).detach()
    (scat,) = (picked * onesv).sum().gradient(probe)
    (hit,) = (picked * picked._const(1.0)).sum().gradient(probe)
    self.assign((hit != 0).where(scat.cast(self.dtype), self.detach()))
    self.realize()
