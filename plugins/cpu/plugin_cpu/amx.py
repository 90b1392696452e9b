"""bfloat16 matmuls on Intel AMX, for the host LLVM renderer: a kernel the renderer writes whole (Renderer.own_kernel).

TDPBF16PS adds to a 16x16 float32 tile the product of a 16x32 bf16 tile (A's rows) and a 32x16 one stored in pairs of K rows
(row r of the tile holds B[2r][j], B[2r+1][j] for j = 0..15: "VNNI" layout), 16384 FLOPs an instruction, the products exact and
summed in float32 (bf16 denormals read as zero), as bf16dot's vdpbf16ps. The vector path cannot reach a float32 matmul's speed
where vdpbf16ps has no more throughput than two float32 FMAs (Intel's cores); a tile loop does many times that.

The kernel: C[M, N] = A[M, K] . B[K, N], all row-major and dense, M, N and K multiples of 32 (anything else takes the usual
path). A thread block computes MB x NB outputs, K in chunks of KC: it copies the chunk's B panel (KC x NB) into a stack array in
VNNI layout, one 16-column tile after another, then for each 32x32 sub-block keeps four accumulator tiles (2x2) over the chunk,
reading A's tiles in place (a tile load takes a row stride) and B's from the copy. The accumulators start at zero in the first
chunk and from C in the later ones. The copy is at most COPY_BYTES (256 KiB) of the calling thread's stack (the pool's and
the command processor's threads have 8 MiB). Linux gives a process the tile registers only when asked (request_tile_data), which
runtime.make_device does for every LLVM device before any of its kernels runs (with CPU_AMX=0 too: a compiled file's may)."""
from __future__ import annotations
import ctypes, functools, os, sys
from core.helpers import frozen_record, host_machine, to_function_name
from core.ir.dtype import dtypes
from core.ir.ops import UOp, Ops, AxisType
from plugin_cpu.compiler import host_flags

TILE = 16                       # rows of a tile; 16 float32 or 32 bf16 a row (64 bytes)
SUB = 2 * TILE                  # a sub-block's rows and columns (2x2 accumulator tiles), and K per tile product
BLOCKS = (256, 128, 64, 32)     # thread-block rows and columns tried, largest first (MB, NB)
CHUNKS = (1024, 512, 256, 128, 64, 32)   # K chunks tried, largest first (KC)
COPY_BYTES = 256 << 10          # the most a block's copy of B takes (KC x NB bf16)
DECLARES = ("declare x86_amx @llvm.x86.tileloadd64.internal(i16, i16, ptr, i64)",
            "declare x86_amx @llvm.x86.tdpbf16ps.internal(i16, i16, i16, x86_amx, x86_amx, x86_amx)",
            "declare void @llvm.x86.tilestored64.internal(i16, i16, ptr, i64, x86_amx)",
            "declare x86_amx @llvm.x86.tilezero.internal(i16, i16)")
# arch_prctl(2) on x86-64: the request for a dynamically enabled state component, and the query of what was granted
SYS_ARCH_PRCTL, ARCH_GET_XCOMP_PERM, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA = 158, 0x1022, 0x1023, 18

def amx_bf16(flags: frozenset[str]) -> bool:
  """A CPU with these features (compiler.arch_flags) has AMX tiles with bf16 products, and CPU_AMX is not 0 (0: the vector path,
  as on a CPU without them)."""
  return os.getenv("CPU_AMX", "").strip() != "0" and {"amx_tile", "amx_bf16"} <= flags

@functools.cache
def request_tile_data() -> bool:
  """Asks Linux for the AMX tile registers (XTILEDATA) for this process: without it the first tile instruction raises SIGILL.
  The permission is the process's, so the thread pool's threads have it too. True when it is granted (or was already); False
  without asking on a CPU without tiles or another OS (its syscall 158 is another call)."""
  if host_machine() != "x86_64" or sys.platform != "linux" or "amx_tile" not in host_flags(): return False
  try: libc = ctypes.CDLL(None, use_errno=True)
  except OSError: return False
  if libc.syscall(SYS_ARCH_PRCTL, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0: return False
  granted = ctypes.c_uint64(0)
  return libc.syscall(SYS_ARCH_PRCTL, ARCH_GET_XCOMP_PERM, ctypes.byref(granted)) == 0 and bool(granted.value >> XFEATURE_XTILEDATA & 1)

@frozen_record
class Matmul:
  """A kernel C = A . B of bf16 inputs summed in float32: sizes and the PARAM slots of C, A and B."""
  m: int
  n: int
  k: int
  c: int
  a: int
  b: int

def _affine(x: UOp, ranges: tuple[UOp, ...]) -> tuple[int, ...] | None:
  """x as (constant, coefficient of each range) when it is a sum of products of constants and those ranges, else None."""
  if x.op is Ops.CONST and isinstance(x.arg, int): return (x.arg,) + (0,) * len(ranges)
  if x.op is Ops.RANGE: return (0,) + tuple(int(r is x) for r in ranges) if x in ranges else None
  if x.op not in (Ops.ADD, Ops.MUL) or len(x.src) != 2: return None
  if (l := _affine(x.src[0], ranges)) is None or (r := _affine(x.src[1], ranges)) is None: return None
  if x.op is Ops.ADD: return tuple(a + b for a, b in zip(l, r))
  if any(l[1:]) and any(r[1:]): return None   # a product of two ranges
  return tuple(a * r[0] for a in l) if not any(r[1:]) else tuple(b * l[0] for b in r)

def _operand(x: UOp, ranges: tuple[UOp, ...]) -> tuple[int, tuple[int, ...]] | None:
  """(PARAM slot, affine index) of a bf16 load from a kernel argument."""
  if x.op is not Ops.LOAD or x.dtype is not dtypes.bfloat16 or len(x.src) != 1 or (idx := x.src[0]).op is not Ops.INDEX: return None
  if len(idx.src) != 2 or idx.src[0].op is not Ops.PARAM or (aff := _affine(idx.src[1], ranges)) is None: return None
  return idx.src[0].arg, aff

def match_matmul(ast: UOp) -> Matmul | None:
  """The Matmul that kernel `ast` (before the optimizer) computes: out[m*N + n] = sum over k of f32(a[m*K + k] * b[k*N + n]), with
  m, n and k its only ranges and each a multiple of SUB; else None."""
  if ast.op is not Ops.SINK or len(ast.src) != 1: return None
  topo = ast.toposort()
  ranges = tuple(u for u in topo if u.op is Ops.RANGE)
  stores = [u for u in topo if u.op is Ops.STORE]
  if len(ranges) != 3 or len(stores) != 1 or any(r.src[0].op is not Ops.CONST for r in ranges): return None
  st = stores[0]
  loops = [r for r in ranges if r.arg[1] is AxisType.LOOP]
  reds = [r for r in ranges if r.arg[1] is AxisType.REDUCE]
  if len(loops) != 2 or len(reds) != 1 or st.src[0].op is not Ops.INDEX or st.src[0].src[0].op is not Ops.PARAM: return None
  red = st.src[1]
  if red.op is not Ops.REDUCE or red.arg is not Ops.ADD or red.dtype is not dtypes.float32 or red.src[1:] != (reds[0],): return None
  cast = red.src[0]
  if cast.op is not Ops.CAST or cast.dtype is not dtypes.float32 or (mul := cast.src[0]).op is not Ops.MUL or mul.dtype is not dtypes.bfloat16:
    return None
  o0, o1 = (_operand(s, ranges) for s in mul.src)
  out = _affine(st.src[0].src[1], ranges)
  if o0 is None or o1 is None or out is None or st.src[0].src[0].dtype.base is not dtypes.float32: return None
  sizes = {r: r.src[0].arg for r in ranges}
  # the store's index is m * N + n: the range with coefficient 1 is n
  coef = dict(zip(ranges, out[1:]))
  nr = next((r for r in loops if coef[r] == 1), None)
  if nr is None or out[0] != 0: return None
  mr, kr = next(r for r in loops if r is not nr), reds[0]
  M, N, K = sizes[mr], sizes[nr], sizes[kr]
  def at(aff: tuple[int, ...], want: dict[UOp, int]) -> bool: return aff[0] == 0 and all(c == want.get(r, 0) for r, c in zip(ranges, aff[1:]))
  if coef[mr] != N: return None
  a, b = sorted((o0, o1), key=lambda o: not at(o[1], {mr: K, kr: 1}))   # A first, when one of them is A
  if not at(a[1], {mr: K, kr: 1}) or not at(b[1], {kr: N, nr: 1}): return None
  if M % SUB or N % SUB or K % SUB or len({st.src[0].src[0].arg, a[0], b[0]}) != 3: return None
  return Matmul(M, N, K, st.src[0].src[0].arg, a[0], b[0])

def blocks(mm: Matmul, threads: int) -> tuple[int, int, int]:
  """(MB, NB, KC): the largest CHUNKS dividing K, the largest BLOCKS dividing M, and N with a copy of B within COPY_BYTES, halved
  (rows first) while there are fewer blocks than twice the threads (the pool's blocks are taken one at a time: more blocks than
  threads evens out their finish). A long chunk reloads the accumulators from C less often: one thread, CPU time, 15 runs
  interleaved in one process (load 10), 1024^3 (MB, NB, KC) = (256, 256, 256) 446 GFLOP/s, (256, 128, 1024) 521; 2048^3 399, 482."""
  kc = next(s for s in CHUNKS if mm.k % s == 0)
  mb = next(s for s in BLOCKS if mm.m % s == 0)
  nb = next(s for s in BLOCKS if mm.n % s == 0 and 2 * kc * s <= COPY_BYTES)
  while (mm.m // mb) * (mm.n // nb) < 2 * max(threads, 1) and max(mb, nb) > SUB:
    if mb >= nb: mb //= 2
    else: nb //= 2
  return mb, nb, kc

def _interleave_mask() -> str: return ", ".join(f"i32 {i // 2 + (i % 2) * TILE}" for i in range(2 * TILE))

def render_matmul(name: str, mm: Matmul, threads: int) -> tuple[str, int]:
  """The LLVM IR of kernel `name` computing `mm` with AMX tiles, and its number of thread blocks."""
  MB, NB, KC = blocks(mm, threads)
  N, K = mm.n, mm.k
  tile = "i16 16, i16 64"
  args = sorted([(mm.c, "float"), (mm.a, "bfloat"), (mm.b, "bfloat")])
  sig = ", ".join(f"ptr noalias %data{slot}" for slot, _ in args)
  C, A, B = f"%data{mm.c}", f"%data{mm.a}", f"%data{mm.b}"
  L = [*DECLARES, f"define void @{to_function_name(name)}({sig}, i32 %gidx0) #0 {{", "entry:",
       f"  %pk = alloca bfloat, i64 {KC * NB}, align 64",   # the chunk's B panel in VNNI layout: NB/16 tiles of KC/2 x 32
       "  %g = zext i32 %gidx0 to i64",
       f"  %bi = udiv i64 %g, {N // NB}", f"  %bj = urem i64 %g, {N // NB}",
       f"  %r0 = mul i64 %bi, {MB}", f"  %c0 = mul i64 %bj, {NB}",
       "  br label %chunk",
       "chunk:", "  %kc = phi i64 [0, %entry], [%kcn, %chunk.end]", "  br label %pack",
       # the copy: rows kc + 2p and kc + 2p + 1 of the block's columns, interleaved, into row p of each column tile; as i16 lanes
       # (a bfloat shuffle took 1.6 of 4.6 ms of a 1024^3 product on one thread, the same as i16 0.9 of 3.9)
       "pack:", "  %p = phi i64 [0, %chunk], [%pn, %pack]",
       "  %p2 = shl i64 %p, 1", "  %prow = add i64 %kc, %p2", f"  %poff = mul i64 %prow, {N}", "  %psrc = add i64 %poff, %c0",
       "  %pdst = shl i64 %p, 5"]
  for j in range(NB // TILE):
    L += [f"  %s0.{j} = getelementptr bfloat, ptr {B}, i64 %psrc", f"  %s0o.{j} = getelementptr bfloat, ptr %s0.{j}, i64 {TILE * j}",
          f"  %x0.{j} = load <16 x i16>, ptr %s0o.{j}, align 2",
          f"  %s1o.{j} = getelementptr bfloat, ptr %s0o.{j}, i64 {N}", f"  %x1.{j} = load <16 x i16>, ptr %s1o.{j}, align 2",
          f"  %iv.{j} = shufflevector <16 x i16> %x0.{j}, <16 x i16> %x1.{j}, <32 x i32> <{_interleave_mask()}>",
          f"  %d.{j} = getelementptr bfloat, ptr %pk, i64 %pdst", f"  %do.{j} = getelementptr bfloat, ptr %d.{j}, i64 {j * KC * TILE}",
          f"  store <32 x i16> %iv.{j}, ptr %do.{j}, align 64"]
  L += ["  %pn = add i64 %p, 1", f"  %pdone = icmp eq i64 %pn, {KC // 2}", "  br i1 %pdone, label %sub, label %pack",
        # a 32x32 sub-block: its four accumulators from zero (first chunk) or from C, over the chunk's K
        "sub:", "  %s = phi i64 [0, %pack], [%sn, %sub.end]",
        f"  %si = udiv i64 %s, {NB // SUB}", f"  %sj = urem i64 %s, {NB // SUB}",
        f"  %sr = mul i64 %si, {SUB}", "  %row = add i64 %r0, %sr", f"  %sc = mul i64 %sj, {SUB}", "  %col = add i64 %c0, %sc"]
  for i in range(2):
    for j in range(2):
      L += [f"  %cr{i}{j} = add i64 %row, {TILE * i}", f"  %crn{i}{j} = mul i64 %cr{i}{j}, {N}", f"  %cc{i}{j} = add i64 %crn{i}{j}, %col",
            f"  %cp{i}{j} = getelementptr float, ptr {C}, i64 %cc{i}{j}", f"  %cpo{i}{j} = getelementptr float, ptr %cp{i}{j}, i64 {TILE * j}"]
  L += ["  %first = icmp eq i64 %kc, 0", "  br i1 %first, label %zero, label %reload",
        "zero:", f"  %z = call x86_amx @llvm.x86.tilezero.internal({tile})", "  br label %kloop", "reload:"]
  L += [f"  %l{i}{j} = call x86_amx @llvm.x86.tileloadd64.internal({tile}, ptr %cpo{i}{j}, i64 {4 * N})" for i in range(2) for j in range(2)]
  L += ["  br label %kloop", "kloop:", "  %k = phi i64 [0, %zero], [0, %reload], [%kn, %kloop]"]
  L += [f"  %acc{i}{j} = phi x86_amx [%z, %zero], [%l{i}{j}, %reload], [%n{i}{j}, %kloop]" for i in range(2) for j in range(2)]
  L += ["  %kk = shl i64 %k, 5", "  %ka = add i64 %kc, %kk"]
  for i in range(2):
    L += [f"  %ar{i} = add i64 %row, {TILE * i}", f"  %arn{i} = mul i64 %ar{i}, {K}", f"  %ao{i} = add i64 %arn{i}, %ka",
          f"  %ap{i} = getelementptr bfloat, ptr {A}, i64 %ao{i}",
          f"  %ta{i} = call x86_amx @llvm.x86.tileloadd64.internal({tile}, ptr %ap{i}, i64 {2 * K})"]
  for j in range(2):   # column tile 2*sj + j of the copy, its rows 16k..16k+15
    L += [f"  %bt{j} = mul i64 %sj, {2 * KC * TILE}", f"  %bo{j} = add i64 %bt{j}, {j * KC * TILE}", f"  %bk{j} = shl i64 %k, 9",
          f"  %boo{j} = add i64 %bo{j}, %bk{j}", f"  %bp{j} = getelementptr bfloat, ptr %pk, i64 %boo{j}",
          f"  %tb{j} = call x86_amx @llvm.x86.tileloadd64.internal({tile}, ptr %bp{j}, i64 64)"]
  L += [f"  %n{i}{j} = call x86_amx @llvm.x86.tdpbf16ps.internal(i16 16, i16 64, i16 64, x86_amx %acc{i}{j}, x86_amx %ta{i}, x86_amx %tb{j})"
        for i in range(2) for j in range(2)]
  L += ["  %kn = add i64 %k, 1", f"  %kdone = icmp eq i64 %kn, {KC // SUB}", "  br i1 %kdone, label %sub.end, label %kloop", "sub.end:"]
  L += [f"  call void @llvm.x86.tilestored64.internal({tile}, ptr %cpo{i}{j}, i64 {4 * N}, x86_amx %n{i}{j})" for i in range(2) for j in range(2)]
  L += ["  %sn = add i64 %s, 1", f"  %sdone = icmp eq i64 %sn, {(MB // SUB) * (NB // SUB)}", "  br i1 %sdone, label %chunk.end, label %sub",
        "chunk.end:", f"  %kcn = add i64 %kc, {KC}", f"  %kcdone = icmp eq i64 %kcn, {K}", "  br i1 %kcdone, label %exit, label %chunk",
        "exit:", "  ret void", "}",
        'attributes #0 = { nounwind "target-features"="+amx-tile,+amx-bf16" }', ""]
  return "\n".join(L), (mm.m // MB) * (N // NB)
