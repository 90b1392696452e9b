"""Sorting from movement and where ops: a bitonic network over (value, original index) pairs, and argsort/topk on it."""
from __future__ import annotations
from typing import TYPE_CHECKING
from core.ir.dtype import dtypes

if TYPE_CHECKING:
  from core.tensor.tensor import Tensor

def _greater(a: Tensor, b: Tensor) -> Tensor:
  """a > b in sort order: NaN is the largest value (torch sorts NaNs last ascending, first descending)."""
  if not dtypes.is_float(a.dtype): return a > b
  return (a > b) | (a.isnan() & b.isnan().logical_not())
def _same(a: Tensor, b: Tensor) -> Tensor:
  return (a == b) | (a.isnan() & b.isnan()) if dtypes.is_float(a.dtype) else a == b

def _exchange(a: tuple[Tensor, Tensor], b: tuple[Tensor, Tensor], descending: bool) -> tuple[tuple[Tensor, Tensor], tuple[Tensor, Tensor]]:
  """One comparator: (value, index) pairs a and b come out in order. Ties go by original index, which makes the order
  total, so the network's result is unique and the sort stable."""
  (av, ai), (bv, bi) = a, b
  first = _greater(bv, av) if descending else _greater(av, bv)
  swap = first | (_same(av, bv) & (ai > bi))
  return (swap.where(bv, av), swap.where(bi, ai)), (swap.where(av, bv), swap.where(ai, bi))

def _compare_halves(v: Tensor, i: Tensor, block: int, mirror: bool, descending: bool) -> tuple[Tensor, Tensor]:
  """Compares element j of the first half of every `block`-long run of the last dim with element j of the second half
  (with `mirror`, with element block-1-j), keeping the earlier one in the first half."""
  lead, n = v.shape[:-1], v.shape[-1]
  def halves(t: Tensor) -> tuple[Tensor, Tensor]:
    t = t.reshape(lead + (n // block, 2, block // 2))
    lo, hi = t[..., 0, :], t[..., 1, :]
    return lo, (hi.flip(-1) if mirror else hi)
  (av, bv), (ai, bi) = halves(v), halves(i)
  (av, ai), (bv, bi) = _exchange((av, ai), (bv, bi), descending)
  if mirror: bv, bi = bv.flip(-1), bi.flip(-1)
  # a buffer per layer, forward and backward: each layer reads every element twice, so a fused network (or its
  # gradient) would grow exponentially with the depth
  return av.stack(bv, dim=-2).reshape(lead + (n,)).contiguous().contiguous_backward(), ai.stack(bi, dim=-2).reshape(lead + (n,)).contiguous()

class SortMixin:
  def sort(self: Tensor, dim: int = -1, descending: bool = False) -> tuple[Tensor, Tensor]:  # type: ignore[misc]
    """(sorted values, their int32 indices in self) along `dim`; stable: equal values keep their order."""
    from core.tensor.tensor import Tensor
    from core.tensor.movement import _axis
    ax = _axis(dim, self.ndim, "sort")
    if self.ndim == 0: return self, self._const(0, dtypes.int32)
    if self.dtype is dtypes.bool:
      v, i = self.cast(dtypes.uint8).sort(ax, descending)
      return v.cast(dtypes.bool), i
    x = self.movedim(ax, -1)
    n = x.shape[-1]
    idx = Tensor.arange(n, device=self.device, dtype=dtypes.int32)._broadcast_to(x.shape)
    if n > 1:
      stages = (n - 1).bit_length()
      pad = [None] * (x.ndim - 1) + [(0, (1 << stages) - n)]
      # padding sorts after every real element: the largest value (NaN for floats ascending), ties broken by index n
      fill = self.dtype.min if descending else (float("nan") if dtypes.is_float(self.dtype) else self.dtype.max)
      x, idx = x.pad(pad, value=fill), idx.pad(pad, value=n)
      for s in range(1, stages + 1):
        x, idx = _compare_halves(x, idx, 1 << s, True, descending)
        for j in range(s - 1, 0, -1): x, idx = _compare_halves(x, idx, 1 << j, False, descending)
      x, idx = x[..., :n], idx[..., :n]
    return x.movedim(-1, ax), idx.movedim(-1, ax)

  def argsort(self: Tensor, dim: int = -1, descending: bool = False) -> Tensor:  # type: ignore[misc]
    return self.sort(dim, descending)[1]

  def topk(self: Tensor, k: int, dim: int = -1, largest: bool = True, sorted_: bool = True) -> tuple[Tensor, Tensor]:  # type: ignore[misc]
    """The k largest (or smallest) values along `dim` and their indices, in sorted order (also when sorted_=False,
    which leaves the order free)."""
    from core.tensor.movement import _axis
    ax = _axis(dim, self.ndim, "topk")
    n = self.shape[ax] if self.ndim else 1
    if not 0 <= k <= n: raise ValueError(f"topk: k={k} is out of range for dim {ax} of size {n}")
    v, i = self.sort(ax, descending=largest)
    if self.ndim == 0: return v, i
    cut = [(0, k) if d == ax else None for d in range(self.ndim)]
    return v.shrink(cut), i.shrink(cut)
