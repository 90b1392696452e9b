"""Reverse-mode autograd as rewrite rules: `pm_gradient` maps each tensor-level op and its output gradient to the
gradients of its sources; `compute_gradient` applies it over the graph in reverse topological order."""
from __future__ import annotations
import math
from typing import Callable
from core.helpers import argsort
from core.ir.dtype import dtypes, sum_acc_dtype
from core.ir.ops import UOp, Ops, GroupOp
from core.ir.pattern import UPat, PatternMatcher

# the rules build with ADD/MUL/NEG/RECIPROCAL/CMPLT/CMPNE/WHERE only, the same small set the Tensor layer uses

def _sub(a: UOp, b: UOp) -> UOp: return a + b.alu(Ops.NEG)
def _div(a: UOp, b: UOp) -> UOp: return a * b.reciprocal()
def _eq(a: UOp, b: UOp) -> UOp: return a.ne(b).ne(True)
def _zero(x: UOp) -> UOp: return x.const_like(0)

def _reduce_to(grad: UOp, shape: tuple) -> UOp:
  """Sum `grad` over the dims where `shape` has 1 and grad doesn't (the adjoint of EXPAND), accumulating in sum_acc_dtype."""
  assert grad.shape is not None
  axes = tuple(i for i, (g, s) in enumerate(zip(grad.shape, shape)) if g != s)
  if not axes: return grad
  acc = sum_acc_dtype(grad.dtype)
  return grad.cast(acc).r(Ops.ADD, axes).cast(grad.dtype)

def _max_grad(ctx: UOp, ret: UOp) -> tuple[UOp, UOp]:
  # the larger source gets the gradient; ties split it evenly
  a, b = ret.src
  a_big, b_big = b < a, a < b
  tie = _eq(a, b)
  half = ctx * ctx.const_like(0.5)
  return a_big.where(ctx, tie.where(half, _zero(ctx))), b_big.where(ctx, tie.where(half, _zero(ctx)))

def _reduce_max_grad(ctx: UOp, ret: UOp) -> tuple[UOp]:
  # every position equal to the max shares the gradient evenly
  x = ret.src[0]
  assert x.shape is not None
  is_max = _eq(x, ret.expand(x.shape))
  count = is_max.cast(ctx.dtype).r(Ops.ADD, ret.arg[1])
  return (is_max.where(_div(ctx, count).expand(x.shape), UOp.const(ctx.dtype, 0, x.device, x.shape)),)

def _prod_grad(ctx: UOp, ret: UOp) -> tuple[UOp]:
  """d(prod)/dx_i is the product of the other elements. prod/x_i is that only without zeros: with one zero, the zero's
  slot gets the product of the nonzero elements and every other slot 0; with two or more zeros everything is 0."""
  x = ret.src[0]
  assert x.shape is not None
  axes = ret.arg[1]
  zero = _eq(x, x.const_like(0))
  nonzero_prod = zero.where(x.const_like(1), x).r(Ops.MUL, axes).expand(x.shape)
  zeros = zero.where(x.const_like(1), x.const_like(0)).r(Ops.ADD, axes).expand(x.shape)
  none, one = _eq(zeros, zeros.const_like(0)), _eq(zeros, zeros.const_like(1))
  others = zero.where(one.where(nonzero_prod, x.const_like(0)), none.where(_div(nonzero_prod, zero.where(x.const_like(1), x)), x.const_like(0)))
  return (ctx.expand(x.shape) * others,)

def _pad_grad(ctx: UOp, ret: UOp) -> tuple[UOp]:
  assert ret.src[0].shape is not None
  return (ctx.shrink(tuple((b, b + s) for (b, _), s in zip(ret.arg, ret.src[0].shape))),)
def _shrink_grad(ctx: UOp, ret: UOp) -> tuple[UOp]:
  assert ret.src[0].shape is not None
  return (ctx.pad(tuple((b, s - e) for (b, e), s in zip(ret.arg, ret.src[0].shape))),)

def with_gradient(value: UOp, *pairs: tuple[UOp, UOp]) -> UOp:
  """`value`, whose gradient with respect to each x of `pairs` (x, g) is the output gradient times g (g the shape of
  value, computed without gradients of its own): DETACH(value, x1, g1, x2, g2, ...). The scheduler drops a DETACH for its
  first source, so x and g cost nothing unless a gradient asks for them."""
  return UOp(Ops.DETACH, value.dtype, (value,) + tuple(u for p in pairs for u in p), "grad")

# name -> rule(output gradient, inputs, params) giving each input's gradient (None for none), for custom_vjp
VJPRule = Callable[[UOp, tuple[UOp, ...], tuple], tuple["UOp | None", ...]]
VJP_RULES: dict[str, VJPRule] = {}

def register_vjp(name: str) -> Callable[[VJPRule], VJPRule]:
  """Registers a custom_vjp rule under `name` (a decorator)."""
  def deco(fn: VJPRule) -> VJPRule:
    VJP_RULES[name] = fn
    return fn
  return deco

def custom_vjp(value: UOp, name: str, params: tuple, *inputs: UOp) -> UOp:
  """`value`, whose gradient with respect to each of `inputs` is VJP_RULES[name](output gradient, inputs, params), an
  expression of any shape built only when a gradient asks for it: DETACH(value, *inputs) with arg ("vjp", name, params)
  (hashable params, no state on the node). The output gradient also flows on into value's own graph, so value computes
  the inputs the rule handles from their .detach() and the rest (a weight) keep their ordinary chain rule."""
  assert name in VJP_RULES, f"no vjp rule registered as {name!r}"
  return UOp(Ops.DETACH, value.dtype, (value,) + inputs, ("vjp", name, params))

def _detach_grad(ctx: UOp, ret: UOp) -> tuple[UOp | None, ...]:
  if isinstance(ret.arg, tuple) and ret.arg[0] == "vjp": return (ctx,) + VJP_RULES[ret.arg[1]](ctx, ret.src[1:], ret.arg[2])
  # a plain DETACH has no gradient; with_gradient's form gives x_i the output gradient times g_i
  return (None,) + tuple(ctx * ret.src[k + 1] if k % 2 else None for k in range(1, len(ret.src)))

LN2 = math.log(2)

pm_gradient = PatternMatcher([
  # elementwise
  (UPat(Ops.ADD, name="ret"), lambda ctx, ret: (ctx, ctx)),
  (UPat(Ops.SUB, name="ret"), lambda ctx, ret: (ctx, ctx.alu(Ops.NEG))),
  (UPat(Ops.MUL, name="ret"), lambda ctx, ret: (ctx * ret.src[1], ctx * ret.src[0])),
  (UPat(Ops.FDIV, name="ret"), lambda ctx, ret: (_div(ctx, ret.src[1]), _div(ctx * ret.alu(Ops.NEG), ret.src[1]))),
  (UPat(Ops.NEG, name="ret"), lambda ctx, ret: (ctx.alu(Ops.NEG),)),
  (UPat(Ops.RECIPROCAL, name="ret"), lambda ctx, ret: ((ctx * ret * ret).alu(Ops.NEG),)),
  (UPat(Ops.EXP2, name="ret"), lambda ctx, ret: (ctx * ret * ret.const_like(LN2),)),
  (UPat(Ops.LOG2, name="ret"), lambda ctx, ret: (_div(ctx, ret.src[0] * ret.const_like(LN2)),)),
  (UPat(Ops.SQRT, name="ret"), lambda ctx, ret: (_div(ctx, ret * ret.const_like(2)),)),
  (UPat(Ops.SIN, name="ret"), lambda ctx, ret: (ctx * _sub(ret.const_like(math.pi / 2), ret.src[0]).sin(),)),
  (UPat(Ops.TRUNC, name="ret"), lambda ctx, ret: (_zero(ctx),)),
  (UPat(Ops.MAX, name="ret"), _max_grad),
  (UPat(Ops.POW, name="ret"), lambda ctx, ret: (_div(ctx * ret * ret.src[1], ret.src[0]), ctx * ret * ret.src[0].log2() * ret.const_like(LN2))),
  (UPat(Ops.MULACC, name="ret"), lambda ctx, ret: (ctx * ret.src[1], ctx * ret.src[0], ctx)),
  (UPat(Ops.WHERE, name="ret"), lambda ctx, ret: (None, ret.src[0].where(ctx, _zero(ctx)), ret.src[0].where(_zero(ctx), ctx))),
  (UPat(GroupOp.Comparison | {Ops.IDIV, Ops.MOD, Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR}, name="ret"), lambda ctx, ret: (None,) * len(ret.src)),
  (UPat(Ops.CAST, name="ret"), lambda ctx, ret: (ctx.cast(ret.src[0].dtype) if dtypes.is_float(ret.src[0].dtype) else None,)),
  (UPat(Ops.BITCAST, name="ret"), lambda ctx, ret: (None,)),
  # movement
  (UPat(Ops.RESHAPE, name="ret"), lambda ctx, ret: (ctx.reshape(ret.src[0].shape),)),
  (UPat(Ops.PERMUTE, name="ret"), lambda ctx, ret: (ctx.permute(tuple(argsort(list(ret.arg)))),)),
  (UPat(Ops.EXPAND, name="ret"), lambda ctx, ret: (_reduce_to(ctx, ret.src[0].shape),)),
  (UPat(Ops.PAD, name="ret"), _pad_grad),
  (UPat(Ops.SHRINK, name="ret"), _shrink_grad),
  (UPat(Ops.FLIP, name="ret"), lambda ctx, ret: (ctx.flip(ret.arg),)),
  # reductions
  (UPat(Ops.REDUCE_AXIS, name="ret", arg=None, custom=lambda u: u.arg[0] is Ops.ADD), lambda ctx, ret: (ctx.expand(ret.src[0].shape),)),
  (UPat(Ops.REDUCE_AXIS, name="ret", custom=lambda u: u.arg[0] is Ops.MAX), _reduce_max_grad),
  (UPat(Ops.REDUCE_AXIS, name="ret", custom=lambda u: u.arg[0] is Ops.MUL), _prod_grad),
  # markers and copies
  (UPat(Ops.CONTIGUOUS, name="ret"), lambda ctx, ret: (ctx,)),
  (UPat(Ops.CONTIGUOUS_BACKWARD, name="ret"), lambda ctx, ret: (ctx.contiguous(),)),
  (UPat(Ops.DETACH, name="ret"), _detach_grad),
  (UPat(Ops.COPY, name="ret"), lambda ctx, ret: (ctx.copy_to_device(ret.src[0].device), None)),
  (UPat(Ops.ASSIGN, name="ret"), lambda ctx, ret: (None, None)),
  (UPat((Ops.BUFFER, Ops.CONST, Ops.DEVICE, Ops.UNIQUE, Ops.BUFFER_VIEW), name="ret"), lambda ctx, ret: (None,) * len(ret.src)),
], name="gradient")

def compute_gradient(root: UOp, root_grad: UOp, targets: list[UOp]) -> dict[UOp, UOp]:
  """{target: d(root)/d(target)} for each target root depends on; targets it doesn't depend on are left out."""
  tset = set(targets)
  topo = list(root.toposort())
  # only nodes that lie on a path from a target to root need a gradient
  on_path: set[UOp] = set()
  for u in topo:
    if u in tset or any(s in on_path for s in u.src): on_path.add(u)
  grads: dict[UOp, UOp] = {root: root_grad}
  for u in reversed(topo):
    if u not in on_path or u not in grads or u in tset and not any(s in on_path for s in u.src): continue
    src_grads = pm_gradient.rewrite(u, ctx=grads[u])
    if src_grads is None: raise NotImplementedError(f"no gradient rule for {u.op.name} (arg={u.arg!r})")
    for s, g in zip(u.src, src_grads):
      if g is None or s not in on_path: continue
      if g.shape != s.shape: raise RuntimeError(f"gradient rule for {u.op.name} gave shape {g.shape} for a source of shape {s.shape}")
      grads[s] = grads[s] + g if s in grads else g
  return {t: grads[t] for t in targets if t in grads}
