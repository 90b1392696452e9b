"""A loop over a padded axis (a row of 1000 floats in 16-lane vectors: 62 whole vectors and a half) runs its whole vectors
unmasked and its partial last one in a copy of its body after it (plugin_cpu.peel), with the same values bit for bit."""
from __future__ import annotations
import copy, re
import numpy as np
import pytest
from numpy.lib.stride_tricks import sliding_window_view
from core import Tensor
import core.tensor.conv as conv
from core.device.registry import Device
from core.codegen.program import get_program, program_source, program_uops
from core.device.compiler import llvm_compile_here
from core.ir.ops import Ops
from core.schedule.kernelize import create_schedule
from plugin_cpu.compiler import arch_flags, host_flags
from plugin_cpu.peel import peel_tail_iterations
from cpu_kernels import AVX512, device, run_item, run_rendered

pytestmark = pytest.mark.skipif(not {"avx2", "fma"} <= host_flags(), reason="renders for x86-64 CPUs with AVX2 (arch_flags needs them here)")
# a masked load whose mask is computed at run time (a loop's gate), not a constant
GATED_LOAD = re.compile(r"@llvm\.masked\.load\.[^(]+\(ptr [^,]+, i32 \d+, <\d+ x i1> %")
OPS = {"softmax": lambda t: t.softmax(-1), "log_softmax": lambda t: t.log_softmax(-1)}

def _renderers(flags: frozenset[str]):
  new = copy.copy(device("LLVM").renderer)
  new.target(flags)
  old = copy.copy(new)
  old.peel_tails = False
  return new, old

def _rows(cols: int) -> np.ndarray:
  # rows enough that the kernel splits them over threads (as the benchmark's 4096 rows), not its columns
  x = (np.random.default_rng(cols).standard_normal((64, cols)) * 3).astype(np.float32)
  x[1, -1], x[2, ::3], x[3] = -np.inf, -np.inf, x[3] + 300   # -inf in the partial last vector and elsewhere; a row far from 0
  x[4, -2] = x[4].max() + 1                                  # the row max in the partial last vector
  return x

def _src(ren, fn, x: np.ndarray) -> str:
  (item,) = [it for it in create_schedule([fn(Tensor(x)).uop])[0] if it.ast.op is Ops.SINK]
  return program_source(get_program(item.ast, ren))

# AVX-512's 16 lanes on the benchmark's 1000 columns; AVX2's 8 lanes on 1001 (its 1000 are whole vectors: unchanged)
@pytest.mark.parametrize("flags,cols", [(AVX512, 1000), ("haswell", 1001)], ids=["avx512-1000", "avx2-1001"])
@pytest.mark.parametrize("op", OPS)
def test_padded_row_loops_mask_only_their_last_vector(flags, cols, op):
  flags = arch_flags(flags) if isinstance(flags, str) else flags
  new, old = _renderers(flags)
  x, fn = _rows(cols), OPS[op]
  src, old_src = _src(new, fn, x), _src(old, fn, x)
  # the row max and the exp loop (no stores) take none; log_softmax's last loop reads x again and stores: it keeps its one
  assert len(GATED_LOAD.findall(src)) == (op == "log_softmax") < len(GATED_LOAD.findall(old_src)), src
  if not flags <= host_flags(): pytest.skip("values need the target's vectors (the structure is checked)")
  got, want = run_rendered(new, fn, x)[0], run_rendered(old, fn, x)[0]
  np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
  with np.errstate(divide="ignore"):
    d = x.astype(np.float64) - x.max(-1, keepdims=True)
    ref = d - np.log(np.exp(d).sum(-1, keepdims=True)) if op == "log_softmax" else np.exp(d) / np.exp(d).sum(-1, keepdims=True)
  np.testing.assert_allclose(got.reshape(x.shape), ref, rtol=2e-6, atol=1e-7)

def test_a_loop_storing_to_a_buffer_keeps_its_masks():
  # softmax's last loop stores the row plainly (64 rows: below the streaming bound; streamed ones are peeled, see
  # test_streaming_stores): it keeps its 63 iterations and its gated stores, where the exp loop before it runs 62
  src = _src(_renderers(AVX512)[0], OPS["softmax"], _rows(1000))
  heads = re.findall(r"icmp slt i32 %ridx\d+, (\d+)\n  br i1 %t\d+, label %loop\d+\.body", src)
  assert heads.count("62") == 1 and heads.count("63") == 1, heads
  assert re.search(r"@llvm\.masked\.store\.[^(]+\(<\d+ x float> %\w+, ptr %\w+, i32 \d+, <\d+ x i1> %", src)

def _conv_grad_kernels(monkeypatch):
  # the gradient of a stride-2 conv, its phases in one conv over a common range (conv.PHASES_IN_ONE_CONV): that kernel has a
  # 2-iteration loop whose gate `ridx < 1` makes a lane mask, and a constant mask equal to the one the true gate gives is
  # hoisted before the loop (the phase convs by output phase have no such gate)
  monkeypatch.setattr(conv, "PHASES_IN_ONE_CONV", 1e9)
  rng = np.random.default_rng(1)
  x = Tensor(rng.standard_normal((1, 2, 6, 6)).astype(np.float32), requires_grad=True)
  x.conv2d(Tensor(rng.standard_normal((3, 2, 3, 3)).astype(np.float32)), stride=2, padding=1).sum().backward()
  return [it.ast for it in create_schedule([x.grad.uop])[0] if it.ast.op is Ops.SINK]

@pytest.mark.parametrize("flags", [AVX512, "haswell"], ids=["avx512", "avx2"])
def test_a_node_the_true_gate_makes_is_placed_once(monkeypatch, flags):
  # placed again in the loop, a node the kernel already had was rendered there, and its uses after the loop named a value the
  # loop defines (LLVM: "Instruction does not dominate all uses!")
  ren = _renderers(arch_flags(flags) if isinstance(flags, str) else flags)[0]
  peeled = 0
  for ast in _conv_grad_kernels(monkeypatch):
    prog = get_program(ast, ren)
    uops = peel_tail_iterations(program_uops(prog))
    assert len(set(uops)) == len(uops)
    peeled += len(uops) != len(program_uops(prog))
    llvm_compile_here(device("LLVM").compiler.target, program_source(prog))
  assert peeled

def test_a_padded_tile_loop_drops_its_padded_outputs_work(monkeypatch):
  # AVX2's 3x3 conv tile of 4 channel vectors x 3 pixels pads the row of 56 to 57 (19 blocks): its last block runs in a copy of
  # the loop body after 18 ungated ones, where the padded pixel's stores are gone and LLVM drops its FMAs (2 pixels' worth)
  monkeypatch.setattr(Device[Device.DEFAULT].renderer, "large_conv_in_place", False)   # the padded copy, as on an AVX2 host
  monkeypatch.setattr(conv, "replayed", lambda key, inputs, build: build())
  new, old = _renderers(arch_flags("haswell"))
  rng = np.random.default_rng(2)
  x, w = rng.standard_normal((1, 64, 56, 56)).astype(np.float32), (rng.standard_normal((64, 64, 3, 3)) / 24).astype(np.float32)
  items = [it for it in create_schedule([Tensor(x).realize().conv2d(Tensor(w).realize(), padding=1).uop])[0] if it.ast.op is Ops.SINK]
  heads = [re.findall(r"icmp slt i32 %ridx\d+, (\d+)\n  br i1 %t\d+, label %loop\d+\.body", program_source(get_program(items[-1].ast, r)))
           for r in (new, old)]
  assert "18" in heads[0] and "19" not in heads[0] and "19" in heads[1], heads
  if not arch_flags("haswell") <= host_flags(): pytest.skip("values need AVX2 (the structure is checked)")
  for it in items[:-1]: run_item(it, new)
  got, want = (run_item(items[-1], r)[0][0].numpy().copy() for r in (new, old))
  np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
  win = sliding_window_view(np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1))), (3, 3), axis=(2, 3))
  ref = np.einsum("nchwij,ocij->nohw", win, w.astype(np.float64))
  np.testing.assert_allclose(got.reshape(ref.shape), ref, rtol=1e-4, atol=1e-4)

def test_loops_no_node_compares_with_a_constant_are_not_searched(monkeypatch):
  # a tail gate is `ridx < n - 1`: a loop that no node compares with a constant has none, and its body (with its nested loops'
  # bodies) is not searched for one; the loops of softmax's padded row still are, and peel as before
  import plugin_cpu.peel as peel
  tested = []
  orig = peel._tail_gate
  monkeypatch.setattr(peel, "_tail_gate", lambda u, r, last: tested.append(r) or orig(u, r, last))
  ren = _renderers(AVX512)[0]
  x = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
  # (48 rows: whole row tiles of 4 and of 6, the 4 x 6 tile a 2 MiB L2 takes, heuristic.MM_TILES_BIG_L2: no padded rows' gates)
  (item,) = [it for it in create_schedule([(Tensor(x[:48]) @ Tensor(x)).uop])[0] if it.ast.op is Ops.SINK]
  uops = program_uops(get_program(item.ast, ren))
  assert not any(u.op is Ops.CMPLT for u in uops) and peel_tail_iterations(uops) == list(uops) and not tested
  (item,) = [it for it in create_schedule([Tensor(_rows(1000)).softmax(-1).uop])[0] if it.ast.op is Ops.SINK]
  uops = program_uops(get_program(item.ast, ren))
  assert len(peel_tail_iterations(uops)) > len(uops) and tested
