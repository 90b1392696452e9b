"""Stage 1, prep runtime: compile kernels, stage copies that need host memory, prepare programs, fill kernarg buffers."""
from __future__ import annotations
import dataclasses
from core.ir.dtype import dtypes
from core.ir.ops import UOp, Ops
from core.ir.pattern import PatternMatcher, UPat, graph_rewrite
from core.hcq.queue_ir import ProgramData, placeholder, prepared_program, launch, getaddr, host_patch
from core.hcq.state import HCQState
from core.codegen.program import program_device, program_uops

def schedule_linear(items: list) -> UOp:
  """The schedule as the pipeline's input: LINEAR(CALL(kernel SINK or COPY, *buffers output first), ...)."""
  return UOp(Ops.LINEAR, src=tuple(UOp(Ops.CALL, src=(it.ast,) + tuple(it.bufs)) for it in items))

def _exec_device(call: UOp) -> str: return call.src[1].src[1].arg   # the output buffer's device runs the call

def _compile(ctx: HCQState, call: UOp) -> UOp:
  prog = ctx.compile(call.src[0], dev := _exec_device(call))
  # the DEVICE source names the instance that runs it ("CPU:1"): pm_prep_program prepares it for that device
  if program_device(prog) != dev: prog = prog.replace(src=(prog.src[0], UOp(Ops.DEVICE, arg=dev)) + prog.src[2:])
  spec = prog.arg
  # the kernel's parameters are the buffers of the slots it uses, in slot order (the schedule may pass one it never reads)
  slots = sorted(u.arg for u in program_uops(prog) if u.op is Ops.PARAM)
  # the kernel's lifted literals are fixed per launch: constants written into its kernargs now, not patched per run; the
  # program without them is the one every kernel differing only in literals shares (prepared and uploaded once)
  if spec.consts:
    fixed = dict(spec.consts)
    variables = tuple(UOp.const(dtypes.int32, fixed[v.arg]) if v.arg in fixed else v for v in spec.vars)
    prog = prog.replace(arg=dataclasses.replace(spec, consts=()))
  else: variables = tuple(spec.vars)
  return call.replace(src=(prog,) + tuple(call.src[1 + i] for i in slots), arg=(tuple(spec.global_size), tuple(spec.local_size), variables))

def _stage_copy(ctx: HCQState, call: UOp) -> UOp | None:
  # a copy between devices that can't reach each other's memory goes through a staging buffer the plugin provides
  dest, src = call.src[1], call.src[2]
  ddev, sdev = dest.src[1].arg, src.src[1].arg
  # asked of both ends (the contract is symmetric): the staging buffer is on the device that asked for it, so a device whose
  # memory no other can address (WEBGPU's GPU buffers) stages a copy out of it in its own host-visible buffer
  if ddev == sdev: return None
  if ctx.hcq_of(ddev).needs_staging(sdev): on = ddev
  elif ctx.hcq_of(sdev).needs_staging(ddev): on = sdev
  else: return None
  stage = placeholder("staging", on, dest.arg * dest.dtype.itemsize)
  return UOp(Ops.LINEAR, src=(UOp(Ops.CALL, src=(call.src[0], stage, src), arg=sdev), UOp(Ops.CALL, src=(call.src[0], dest, stage), arg=ddev)))

pm_compile_calls = PatternMatcher([
  (UPat(Ops.CALL, src=(UPat(Ops.SINK),), allow_any_len=True, name="call"), lambda ctx, call: _compile(ctx, call) if call.arg is None else None),
  (UPat(Ops.CALL, src=(UPat(Ops.COPY),), allow_any_len=True, name="call"), lambda ctx, call: _stage_copy(ctx, call) if call.arg is None else None),
], name="compile calls")

def _program_image(ctx: HCQState, p: UOp, image: UOp) -> UOp:
  # the image bytes wait in ctx.contents until bufferize gives the placeholder memory
  ph = placeholder("program", p.src[0].arg, len(image.arg))
  ctx.contents[ph] = bytes(image.arg)
  return prepared_program(p.src[0].arg, ph, p.arg)

pm_program_image = PatternMatcher([
  (UPat(Ops.PROGRAM, src=(UPat(Ops.DEVICE), UPat(Ops.BINARY, name="image")), name="p", custom=lambda p: isinstance(p.arg, ProgramData)),
   _program_image),
], name="program images")

def _kernargs(call: UOp) -> UOp:
  """Kernel CALL -> LINEAR(host patches filling its kernarg buffer, CALL(launch, *bufs)): buffer addresses then variables."""
  prog, bufs = call.src[0], call.src[1:]
  data: ProgramData = prog.arg
  gs, ls, variables = call.arg
  kargs = placeholder("kernargs", prog.src[0].arg, max(data.kernarg_size, 1))
  vals = [getaddr(b, device=prog.src[0].arg) for b in bufs] + [v.cast(dtypes.int32) if v.dtype is not dtypes.int32 else v for v in variables]
  if len(vals) > len(data.arg_offsets):
    raise RuntimeError(f"{data.name}: the plugin's ProgramData has {len(data.arg_offsets)} argument offsets for {len(vals)} arguments")
  patches = [host_patch(kargs, off, v) for off, v in zip(data.arg_offsets, vals)]
  return UOp(Ops.LINEAR, src=tuple(patches) + (UOp(Ops.CALL, src=(launch(prog, kargs, gs, ls),) + bufs),))

pm_kernargs = PatternMatcher([
  (UPat(Ops.CALL, src=(UPat(Ops.PROGRAM),), allow_any_len=True, name="call",
        custom=lambda call: isinstance(call.src[0].arg, ProgramData) and call.src[0].src[1].op is Ops.BUFFER), _kernargs),
], name="kernargs")

def flatten_linear(x: UOp) -> UOp:
  """Splice nested LINEARs; host patches move to the front (they fill distinct bytes, and submits must stay adjacent to merge)."""
  out: list[UOp] = []
  stack = list(reversed(x.src))
  while stack:
    u = stack.pop()
    if u.op is Ops.LINEAR: stack.extend(reversed(u.src))
    else: out.append(u)
  patches = [u for u in out if u.op is Ops.HOST_PATCH]
  return x.replace(src=tuple(dict.fromkeys(patches)) + tuple(u for u in out if u.op is not Ops.HOST_PATCH))

def prep_runtime(linear: UOp, ctx: HCQState) -> UOp:
  linear = graph_rewrite(linear, pm_compile_calls, ctx, name="compile calls")
  linear = flatten_linear(linear)
  compiled = [c.src[0] for c in linear.src if c.op is Ops.CALL and c.src[0].op is Ops.PROGRAM]
  for dev in sorted({program_device(p) for p in compiled}):
    if (pm := ctx.hooks.pm_prep_program(dev)) is None: raise RuntimeError(f"no plugin answers core_pm_prep_program({dev!r})")
    progs = [p for p in compiled if program_device(p) == dev]
    done = graph_rewrite(UOp(Ops.SINK, src=tuple(dict.fromkeys(progs))), pm, ctx.hcq_of(dev), name=f"prep program {dev}")
    linear = linear.substitute(dict(zip(dict.fromkeys(progs), done.src)))
  linear = graph_rewrite(linear, pm_program_image, ctx, name="program images")
  return flatten_linear(graph_rewrite(linear, pm_kernargs, name="kernargs"))
