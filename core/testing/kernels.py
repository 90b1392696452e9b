"""Hand-linearized kernels for backend tests: what a device's renderer receives, built without the scheduler, so a plugin's
renderer, program reader or host build can be tested one kernel at a time (an LDS kernel with a barrier, a loop kernel)."""
from __future__ import annotations
from typing import Any
from core.ir.dtype import AddrSpace, DType, dtypes
from core.ir.ops import UOp, Ops, AxisType

def linear(*roots: UOp) -> list[UOp]:
  """Every node under `roots` in dependency order (a hand-driven linearizer)."""
  out: dict[UOp, None] = {}
  for r in roots:
    for u in r.toposort(): out.setdefault(u, None)
  return list(out)

def c(v: Any, dt: DType = dtypes.int32) -> UOp: return UOp.const(dt, v)
def special(name: str, n: int) -> UOp: return UOp(Ops.SPECIAL, dtypes.int32, (c(n),), name)

def lds_kernel(local: int = 64, groups: int = 4) -> list[UOp]:
  """out[g*L + l] = in[g*L + (L-1-l)]: each workgroup reverses its slice through LDS (store, barrier, load)."""
  out, inp = UOp.param(0, dtypes.float32.ptr(local * groups)), UOp.param(1, dtypes.float32.ptr(local * groups))
  gid, lid = special("gidx0", groups), special("lidx0", local)
  lds = UOp(Ops.DEFINE_LOCAL, dtypes.float32.ptr(local, AddrSpace.LOCAL), (), 0)
  base = gid * c(local)
  st = lds.index(lid).store(inp.index(base + lid).load())
  bar = UOp(Ops.BARRIER, dtypes.void, (st,))
  v = lds.after(bar).index(c(local - 1) - lid).load()
  return linear(out.index(base + lid).store(v))

def loop_kernel(dt: DType = dtypes.float32, fn: Ops | None = Ops.SIN) -> list[UOp]:
  """out[g] = sum_i fn(in[g*8 + i]) * n over an 8-long loop, with an int32 variable n: registers, a loop and a variable.
  `fn=None` sums the inputs themselves (no unary op: a target with no native transcendental still gets a plain loop)."""
  out, inp = UOp.param(0, dt.ptr(64)), UOp.param(1, dt.ptr(512))
  n = UOp(Ops.DEFINE_VAR, dtypes.int32, (), ("n", 1, 10))
  gid = special("gidx0", 64)
  r = UOp(Ops.RANGE, dtypes.int32, (c(8),), (0, AxisType.REDUCE))
  acc = UOp(Ops.DEFINE_REG, dt.ptr(1, AddrSpace.REG), (), 0)
  init = acc.index(c(0)).store(c(0.0, dt))
  acc_in = acc.after(init, r)
  x = inp.index(gid * c(8) + r).load()
  upd = acc_in.index(c(0)).store(acc_in.index(c(0)).load() + (x if fn is None else UOp(fn, dt, (x,))) * n.cast(dt)).end(r)
  return linear(out, inp, n, out.index(gid).store(acc.after(upd).index(c(0)).load()))

def grid_kernel(g0: int, g1: int, l0: int) -> list[UOp]:
  """out[(gidx1*g0 + gidx0)*l0 + lidx0] = gidx0 + 100*gidx1 + 10000*lidx0 + v: every id and the variable land in the output."""
  out = UOp.param(0, dtypes.int32.ptr(g0 * g1 * l0))
  v = UOp(Ops.DEFINE_VAR, dtypes.int32, (), ("v", 0, 1000))
  x, y, lx = special("gidx0", g0), special("gidx1", g1), special("lidx0", l0)
  return linear(out, v, out.index((y * c(g0) + x) * c(l0) + lx).store(x + y * c(100) + lx * c(10000) + v))
