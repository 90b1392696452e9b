"""Renderer.own_kernel: a kernel the renderer writes whole skips the optimizer and the lowering; its PROGRAM holds the renderer's
source, global size and estimates, and the kernel's PARAMs (its arguments, in slot order) as its LINEAR. A renderer that writes
none (the default) gets the usual program."""
from __future__ import annotations
import copy
import numpy as np
from core import Tensor
from core.ir.ops import Ops
from core.codegen.program import get_program, program_shape, program_source, program_uops
from core.device.registry import Device
from core.schedule.kernelize import create_schedule

def _ast():
  a, b = Tensor(np.ones((4, 8), np.float32)).realize(), Tensor(np.ones((8, 3), np.float32)).realize()
  (item,) = [it for it in create_schedule([(a @ b).uop])[0] if it.ast.op is Ops.SINK and it.ast.src]
  return item.ast

class _Writes:
  """A renderer's own_kernel that writes every kernel as `text`, recording what it was asked."""
  def __init__(self): self.asked: list[tuple] = []
  def __call__(self, ast, name):
    self.asked.append((ast, name))
    return f"// {name}", (5, 1, 1), {"ops": 7, "mem": 9}

def test_own_kernel_is_the_program():
  ast, rnd = _ast(), copy.copy(Device[Device.DEFAULT].renderer)
  rnd.own_kernel = own = _Writes()
  p = get_program(ast, rnd)
  assert own.asked == [(ast, ast.arg)]
  assert program_source(p) == f"// {ast.arg}" and p.src[0] is ast
  assert p.arg.global_size == (5, 1, 1) and p.arg.local_size == (1, 1, 1) and p.arg.estimates == {"ops": 7, "mem": 9}
  params = program_uops(p)
  assert [u.op for u in params] == [Ops.PARAM] * 3 and [u.arg for u in params] == [0, 1, 2]
  assert program_shape(p) == [5]   # what DEBUG=2 and the profiler show: its blocks (its LINEAR has no loops)

def test_no_own_kernel_keeps_the_usual_program():
  ast, rnd = _ast(), copy.copy(Device[Device.DEFAULT].renderer)
  rnd.own_kernel = lambda ast, name: None
  p = get_program(ast, rnd)
  assert not program_source(p).startswith("//") and any(u.op is Ops.STORE for u in program_uops(p))
