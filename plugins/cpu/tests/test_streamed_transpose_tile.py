"""A streamed transposing copy's AVX2 tile (16 input rows x 16 floats, whole output lines by streaming stores): each row is loaded
a register at a time, so each 8x8 square has loads of its own and the output rows of one half read none of the other half's;
the linearizer emits those groups one by one, each square by square (its rows, its shuffles, then the group's stores), and the LLVM
kernel tests its buffers' alignment once (a second function, stores plain, where they are not aligned) where a branch per store
split the tile's block. Spills of the haswell/znver3 code, the order, values at aligned and misaligned addresses and for odd
shapes, and kernels without a transposing tile ordered as before."""
from __future__ import annotations
import platform, re
import numpy as np
import pytest
from cpu_kernels import device, host_like_renderer, run_on_renderer
from core import Tensor
from core.ir.ops import Ops, AxisType
from core.codegen import linearize as lin
from core.codegen.opt import Kernel
from core.codegen.opt.heuristic import hand_coded, STRIP_TILES, STRIP_ALONE_TILES
from core.schedule.kernelize import create_schedule
from core.codegen.program import get_program, launch_vals, program_source

def _renderer(simd_bytes: int = 32, bound: int = 1):
  rnd = host_like_renderer("LLVM", simd_bytes, threads=0)
  rnd.stream_min_bytes = bound
  return rnd

def _kernel(fn, shape, simd_bytes: int = 32, bound: int = 1):
  (item,) = create_schedule([fn(Tensor(np.zeros(shape, np.float32))).uop])[0]
  rnd = _renderer(simd_bytes, bound)
  return item, hand_coded(Kernel(item.ast, rnd)), rnd

def _linear(k: Kernel, rnd) -> list:
  """The kernel's linearized uops (the program's LINEAR), built anew."""
  from core.codegen.program import _get_program
  return list(_get_program(k.ast, rnd, False, "k").src[2].src)

def _t(a): return a.T.contiguous()
def _nhwc_nchw(a): return a.permute(0, 3, 1, 2).contiguous()

def _spills(asm: str) -> int:
  return len(re.findall(r"%[xy]mm\d+,\s*-?(?:0x[0-9a-f]+)?\(%rsp\)", asm)) + len(re.findall(r"\(%rsp\),\s*%[xy]mm\d+", asm))

@pytest.mark.parametrize("cpu", ["haswell", "znver3"])
@pytest.mark.parametrize("fn, shape", [(_t, (4096, 4096)), (_nhwc_nchw, (32, 56, 56, 64))], ids=["4096^2", "nhwc_nchw"])
def test_streamed_avx2_tile_spills_at_most_14_registers(cpu, fn, shape):
  if platform.machine() != "x86_64": pytest.skip("x86-64 code")
  from plugin_cpu.compiler import LLVMCompiler
  _, k, rnd = _kernel(fn, shape)
  comp = LLVMCompiler(cpu=cpu)
  asm = comp.disassemble(comp.compile(program_source(get_program(k.ast, rnd, optimize=False))))
  main = re.split(r"\n[0-9a-f]+ <\w+_unaligned>:", asm)
  assert len(main) == 2, "no copy of the kernel for misaligned buffers"
  # 32 streaming stores a tile, one tile per iteration, or the 4096^2 strip's STRIP_ALONE_TILES unrolled (heuristic.SPLIT_PART_TILES:
  # 8 spill references for 2); depth-first one tile spilled 72-80 ymm references, with a branch per store 34
  assert main[0].count("vmovntps") == 32 * (STRIP_ALONE_TILES if fn is _t else 1) and _spills(main[0]) <= 14, main[0]

def test_streamed_tile_loads_each_group_before_its_stores():
  _, k, rnd = _kernel(_t, (4096, 4096))
  uops = _linear(k, rnd)
  mem = [(u.op, u.dtype.count if u.op is Ops.LOAD else u.src[1].dtype.count) for u in uops if u.op in (Ops.LOAD, Ops.STORE)]
  # rows loaded a register (8 floats) at a time: 16 loads (the left halves), the 8 output rows they make, then the other 16 and 8;
  # tile by tile where the strip's STRIP_ALONE_TILES are unrolled (heuristic.SPLIT_PART_TILES)
  assert mem == ([(Ops.LOAD, 8)] * 16 + [(Ops.STORE, 16)] * 8 + [(Ops.LOAD, 8)] * 16 + [(Ops.STORE, 16)] * 8) * STRIP_ALONE_TILES, mem

def test_streamed_tile_shuffles_each_square_before_the_next_squares_loads():
  # an 8x8 square's shuffles as soon as its 8 rows are loaded, not each stage across both squares of the group (16 rows and
  # their first stages live at once: 12 ymm spill references per tile where 4 now, and 29.6 -> 33.4 GB/s on a Zen 5 thread)
  from core.codegen.linearize import is_shuffle
  _, k, rnd = _kernel(_t, (4096, 4096))
  uops = _linear(k, rnd)
  reads: dict = {}
  for u in uops: reads[u] = frozenset({u}) if u.op is Ops.LOAD else frozenset().union(*(reads.get(s, frozenset()) for s in u.src))
  loads = [i for i, u in enumerate(uops) if u.op is Ops.LOAD]
  first = frozenset(uops[i] for i in loads[:8])
  square = [i for i, u in enumerate(uops) if is_shuffle(u) and reads[u] and reads[u] <= first]
  # an 8x8 square is 3 stages of 8 shuffles (some rendered as lane picks of the stage before: at least the last stage's 8)
  assert len(square) >= 8 and max(square) < loads[8], (square, loads[:9])

@pytest.mark.parametrize("simd_bytes, flag", [(32, "avx2"), (64, "avx512f")])
def test_streamed_transpose_gives_numpys_values_at_misaligned_addresses(simd_bytes, flag, monkeypatch):
  if platform.machine() != "x86_64": pytest.skip("streaming stores are x86-64's")
  import plugin_cpu.renderer as PR
  if flag not in PR.host_flags(): pytest.skip(f"runs {simd_bytes}-byte vector code: a host with {flag}")
  monkeypatch.setattr(PR, "NT_MIN_BYTES", 1)   # stream this small copy's stores too
  _, k, rnd = _kernel(_t, (64, 256), simd_bytes)
  rnd.extra_matcher = PR.llvm_rules(PR.host_flags(), simd_bytes)
  spec = get_program(k.ast, rnd, optimize=False)
  src = program_source(spec)
  assert "_unaligned(" in src and "!nontemporal" in src
  dev = device("LLVM")   # LLVM IR: the LLVM device's compiler for this host, whatever the DEV names
  prg = dev.runtime(spec.arg.name, dev.compiler.compile(src))
  x = np.random.default_rng(3).standard_normal((64, 256)).astype(np.float32)
  for off in (0, 1, 4):   # floats past a 64-byte boundary: 1 and 4 are not 32-byte aligned
    raw = np.zeros(64 * 256 + 64, np.float32)
    start = (-raw.ctypes.data // 4) % 16 + off
    out = raw[start:start + 64 * 256]
    prg(out.ctypes.data, x.ctypes.data, global_size=spec.arg.global_size, local_size=spec.arg.local_size, vals=launch_vals(spec.arg, {}),
        wait=True)
    np.testing.assert_array_equal(out.reshape(256, 64), x.T)

def test_streamed_odd_shapes_give_numpys_values():
  run_on_renderer("LLVM", (
    "r = np.random.default_rng(5)\n"
    "for shape, perm in [((528, 1040), (1, 0)), ((33, 4100), (1, 0)), ((4100, 40), (1, 0)), ((3, 40, 24, 72), (0, 3, 1, 2)),\n"
    "                    ((2, 72, 24, 40), (0, 2, 3, 1)), ((256, 256), (1, 0))]:\n"
    "  a = (r.standard_normal(shape) * 100).astype(np.float32)\n"
    "  np.testing.assert_array_equal(Tensor(a).permute(*perm).contiguous().numpy(), a.transpose(perm))\n"
    "print('ok')\n"), CPU_STREAM_MIN_BYTES="1")

@pytest.mark.parametrize("fn, shape", [
  (lambda a: a @ a, (256, 256)), (lambda a: (a * 2 + 1).relu(), (512, 512)), (lambda a: a.softmax(-1), (256, 1000)),
  (lambda a: a.sum(0), (512, 512)), (lambda a: a.layernorm(), (256, 1024))], ids=["matmul", "elementwise", "softmax", "sum", "layernorm"])
@pytest.mark.parametrize("simd_bytes", [32, 64])
def test_kernels_without_a_transposing_tile_keep_the_graph_order(fn, shape, simd_bytes, monkeypatch):
  item, k, rnd = _kernel(fn, shape, simd_bytes, bound=1)
  new = _linear(k, rnd)
  monkeypatch.setattr(lin, "tile_keys", lambda *a: None, raising=False)
  assert _linear(k, rnd) == new

@pytest.mark.parametrize("shape", [(4096, 4096), (8192, 1024)])
@pytest.mark.parametrize("threads", [0, 2])
def test_avx512_streamed_tile_tests_its_alignment_once(shape, threads):
  # one zmm per 16-float row: one group of stores in the graph's order, all 16 unconditional streaming stores, the buffers'
  # alignment tested once at entry (a test per store cost time: one Zen 4 thread, 4096^2 33.1 -> 35.4 GB/s)
  (item,) = create_schedule([_t(Tensor(np.zeros(shape, np.float32))).uop])[0]
  rnd = host_like_renderer("LLVM", 64, threads=threads)
  rnd.stream_min_bytes = 1
  spec = get_program(hand_coded(Kernel(item.ast, rnd)).ast, rnd, optimize=False)
  src, name = program_source(spec), spec.arg.name
  main = src[src.index(f"define void @{name}("):src.index(f"define void @{name}_unaligned(")]
  # a conditional branch per loop and one for the alignment test, none per store; 16 stores a tile of the block's part of its
  # strip (unrolled: heuristic.STRIP_PART_UNROLLED; one thread's strip STRIP_ALONE_TILES)
  assert ".plain" not in main and main.count("!nontemporal") == 16 * (STRIP_TILES // threads if threads else STRIP_ALONE_TILES) and \
    main.count("br i1") == 1 + len(re.findall(r"^loop\d+\.head:", main, re.M)), main

@pytest.mark.parametrize("threads", [0, 2])
def test_unaligned_copy_is_a_second_function_of_one_module(threads):
  # the module is assembled from two rendered functions (LLVMRenderer.function/module), not spliced from two renders' text:
  # it parses and verifies, defines exactly the kernel and its copy, declares each intrinsic once, and the kernel's entry block
  # holds its allocas, then the alignment test, then a tail call passing its own parameters on
  import llvmlite.binding as llvm
  from plugin_cpu.renderer import unchecked_streams
  (item,) = create_schedule([_t(Tensor(np.zeros((4096, 4096), np.float32))).uop])[0]
  rnd = host_like_renderer("LLVM", 32, threads=threads)
  k = hand_coded(Kernel(item.ast, rnd))
  spec = get_program(k.ast, rnd, optimize=False)
  src, name = program_source(spec), spec.arg.name
  mod = llvm.parse_assembly(src)
  mod.verify()
  assert sorted(f.name for f in mod.functions if not f.is_declaration) == [name, f"{name}_unaligned"]
  decls = [ln for ln in src.split("\n") if ln.startswith("declare ")]
  assert len(decls) == len(set(decls)) and "declare void @llvm.x86.sse.sfence()" in decls
  meta = re.findall(r"^(!\d+) = ", src, re.M)
  assert len(meta) == len(set(meta))
  main = src[src.index(f"define void @{name}("):src.index(f"define void @{name}_unaligned(")]
  sig = main[main.index("(") + 1:main.index(") #0")]
  args = ", ".join(f"{p.split()[0]} {p.split()[-1]}" for p in sig.split(", "))
  entry = main.split("\n")[2:]
  n_alloca = next(i for i, ln in enumerate(entry) if " = alloca " not in ln)
  # one alloca per loop (two on 2 threads: a block's part of a strip, test_transpose_strips)
  assert n_alloca == len(k.of_type(AxisType.LOOP)) and entry[n_alloca].startswith("  %nt.data0.a = ptrtoint ptr %data0"), entry[:8]
  assert f"  tail call void @{name}_unaligned({args})" in entry[:n_alloca + 8] and ("i32 %gidx0" in args) == (threads > 0)
  # the copy: the same kernel, its streamed stores plain and untested (the kernel's own stores all stream, unconditionally)
  copy = src[src.index(f"define void @{name}_unaligned("):]
  n_streamed = len(unchecked_streams(_linear(k, rnd), 32))
  assert main.count("!nontemporal") == n_streamed and "!nontemporal" not in copy and "ptrtoint" not in copy and \
         f"@{name}" not in copy.split("\n", 1)[1]

def test_only_the_streaming_kernel_ends_with_sfence_not_its_unaligned_copy():
  # the copy's stores are plain (cached, ordered): it returns without the SFENCE that the kernel's streaming stores need
  (item,) = create_schedule([_t(Tensor(np.zeros((4096, 4096), np.float32))).uop])[0]
  rnd = host_like_renderer("LLVM", 32, threads=0)
  spec = get_program(hand_coded(Kernel(item.ast, rnd)).ast, rnd, optimize=False)
  src, name = program_source(spec), spec.arg.name
  main = src[src.index(f"define void @{name}("):src.index(f"define void @{name}_unaligned(")]
  copy = src[src.index(f"define void @{name}_unaligned("):]
  copy = copy[:copy.index("\n}\n")]
  assert main.count("call void @llvm.x86.sse.sfence()") == 1 and main.rstrip().endswith("call void @llvm.x86.sse.sfence()\n  ret void\n}")
  assert "sfence" not in copy and copy.endswith("\n  ret void")
  assert src.count("declare void @llvm.x86.sse.sfence()") == 1
