"""Tensors on the DISK device (core/device/disk.py): a contiguous slice or reshape of a file-backed tensor is a view of the
file at an offset, made at once, so reading it back (`t[a:b].to("CPU")`, `numpy()`) copies just those bytes and needs no
kernel (DISK runs none)."""
from __future__ import annotations
from typing import Any
from core.ir.dtype import DType
from core.ir.ops import UOp, Ops

def on_disk(u: UOp) -> bool:
  """Whether u is a movement op directly over (a reshape of) a DISK buffer: the only shapes a disk tensor takes."""
  s = u.src[0] if u.src else u
  if s.op is Ops.RESHAPE: s = s.src[0]
  return s.op is Ops.BUFFER and s.src[1].arg.startswith("DISK:")

def contiguous_span(u: UOp) -> tuple[UOp, int, int] | None:
  """(BUFFER, first element, element count) when u, a chain of reshapes and shrinks over a buffer, is one row-major run of
  its elements; None otherwise (a strided or symbolic view)."""
  chain: list[UOp] = []
  shape: tuple[Any, ...]
  while u.op in (Ops.RESHAPE, Ops.SHRINK):
    chain.append(u)
    u = u.src[0]
  if u.op is not Ops.BUFFER: return None
  off, shape = 0, (u.arg,)
  for m in reversed(chain):
    if not all(isinstance(d, int) for d in m.shape or ()): return None
    if m.op is Ops.SHRINK:
      ext = [e - b for b, e in m.arg]
      # a box of a row-major array is one run when the dims before some dim k are single rows and the dims after k are whole
      k = next((i for i, x in enumerate(ext) if x != 1), len(ext))
      if any(x == 0 for x in ext): return u, off, 0
      if any(tuple(m.arg[i]) != (0, shape[i]) for i in range(k + 1, len(shape))): return None
      stride = 1
      for i in reversed(range(len(shape))):
        off += m.arg[i][0] * stride
        stride *= shape[i]
    shape = tuple(m.shape or ())
  n = 1
  for d in shape: n *= d
  return u, off, n

def disk_view(u: UOp, dtype: DType | None = None) -> UOp | None:
  """u as a buffer of its own: a view of its DISK buffer's file at the span's byte offset (read as `dtype`, whose itemsize
  must divide the span's bytes), or None when u is no single run of the file."""
  from core.engine.realize import adopt_buffer
  from core.engine.run import buffer_of
  if (span := contiguous_span(u)) is None: return None
  base, first, n = span
  dt = dtype or u.dtype
  nbytes = n * base.dtype.itemsize
  if nbytes % dt.itemsize: raise ValueError(f"disk view: {nbytes} bytes are not a whole number of {dt} elements")
  view = buffer_of(base).view(nbytes // dt.itemsize, dt, first * base.dtype.itemsize)
  shape = u.shape if dtype is None else (nbytes // dt.itemsize,)
  return adopt_buffer(view.allocate(), tuple(shape or ()))  # type: ignore[arg-type]
