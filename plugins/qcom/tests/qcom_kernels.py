"""Hand-linearized kernels for the QCOM tests (a tiny linearizer: every node under the roots in dependency order)."""
from __future__ import annotations
from typing import Any
from core.ir.dtype import AddrSpace, DType, dtypes
from core.ir.ops import UOp, Ops, AxisType

def linear(*roots: UOp) -> list[UOp]:
  out: dict[UOp, None] = {}
  for r in roots:
    for u in r.toposort(): out.setdefault(u, None)
  return list(out)

def c(v: Any, dt: DType = dtypes.int32) -> UOp: return UOp.const(dt, v)
def special(name: str, n: int) -> UOp: return UOp(Ops.SPECIAL, dtypes.int32, (c(n),), name)

def reverse_kernel(threads: int = 16, groups: int = 4) -> list[UOp]:
  """out[g*T + t] = in[g*T + (T-1-t)] through local memory: store, barrier, load."""
  out, inp = UOp.param(0, dtypes.float32.ptr(threads * groups)), UOp.param(1, dtypes.float32.ptr(threads * groups))
  gid, lid = special("gidx0", groups), special("lidx0", threads)
  smem = UOp(Ops.DEFINE_LOCAL, dtypes.float32.ptr(threads, AddrSpace.LOCAL), (), 0)
  base = gid * c(threads)
  st = smem.index(lid).store(inp.index(base + lid).load())
  v = smem.after(UOp(Ops.BARRIER, dtypes.void, (st,))).index(c(threads - 1) - lid).load()
  return linear(out.index(base + lid).store(v))

def half_kernel(n: int = 8) -> list[UOp]:
  """out[i] = a[i] * b[i] + 1 in half, with int variable k added as half: one rounding per op."""
  out, a, b = (UOp.param(i, dtypes.float16.ptr(n)) for i in range(3))
  k = UOp(Ops.DEFINE_VAR, dtypes.int32, (), ("k", 0, 10))
  i = special("gidx0", n)
  v = a.index(i).load() * b.index(i).load() + c(1.0, dtypes.float16) + k.cast(dtypes.float16)
  return linear(out, a, b, k, out.index(i).store(v))

def loop_kernel() -> list[UOp]:
  """out[g] = sum_i in[g*8 + i] over an 8-long loop with a register accumulator."""
  out, inp = UOp.param(0, dtypes.float32.ptr(4)), UOp.param(1, dtypes.float32.ptr(32))
  gid = special("gidx0", 4)
  r = UOp(Ops.RANGE, dtypes.int32, (c(8),), (0, AxisType.REDUCE))
  acc = UOp(Ops.DEFINE_REG, dtypes.float32.ptr(1, AddrSpace.REG), (), 0)
  init = acc.index(c(0)).store(c(0.0, dtypes.float32))
  acc_in = acc.after(init, r)
  upd = acc_in.index(c(0)).store(acc_in.index(c(0)).load() + inp.index(gid * c(8) + r).load()).end(r)
  return linear(out, inp, out.index(gid).store(acc.after(upd).index(c(0)).load()))
