"""Indexing: __getitem__ (ints, slices with steps, None, Ellipsis, integer tensors), __setitem__, gather, one_hot."""
from __future__ import annotations
from typing import TYPE_CHECKING, Any
from core.helpers import prod
from core.ir.dtype import dtypes

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
        n = x.shape[ax]
        start, stop, step = i.indices(n)
        count = len(range(start, stop, step))
        if step > 0: x = _strided(x, ax, start, step, count)
        else:
          lo = start + (count - 1) * step if count else 0
          x = x.shrink([(lo, lo + ((count - 1) * -step + 1 if count else 0)) if k == ax else None for k in range(x.ndim)]).flip(ax)
          x = _strided(x, ax, 0, -step, count)
        ax += 1
      elif isinstance(i, (Tensor, list, tuple)):
        t = i if isinstance(i, Tensor) else Tensor(list(i), device=self.device, dtype=dtypes.int32)
        if not dtypes.is_int(t.dtype): raise IndexError(f"tensor indices must be integers, got {t.dtype}")
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
    if index.ndim != self.ndim or any(a > b for i, (a, b) in enumerate(zip(index.shape, self.shape)) if i != d):
      raise ValueError(f"gather: index shape {index.shape} must have the rank of {self.shape} and no larger dims outside dim {d}")
    n = self.shape[d]
    x = self.shrink([None if i == d else (0, s) for i, s in enumerate(index.shape)])
    x = x.unsqueeze(-1).transpose(d, -1)  # dim d moves to the end, a 1 takes its place
    mask = index.unsqueeze(-1) == Tensor.arange(n, device=self.device).reshape((1,) * index.ndim + (n,))
    full = index.shape + (n,)
    picked = mask.where(x.expand(full), 0)
    return picked.sum(-1, dtype=picked.dtype if picked.dtype is not dtypes.bool else dtypes.uint8).cast(self.dtype)

  def one_hot(self: Tensor, num_classes: int = -1) -> Tensor:  # type: ignore[misc]
    from core.tensor.tensor import Tensor
    if num_classes == -1: num_classes = int(self.max().item()) + 1
    return (self.unsqueeze(-1) == Tensor.arange(num_classes, device=self.device)).cast(dtypes.default_int)

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
