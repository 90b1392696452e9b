"""A host <metal_stdlib>: the part of Metal Shading Language core's kernels use, as C++ (clang++ with _Float16), so the generated MSL
compiles unchanged on Linux (the check compiler) and runs there (the MOCK's host builds, with RUNNER appended)."""
from __future__ import annotations
import hashlib, os, pathlib, tempfile
from core.helpers import cache_dir

# As C++ (the check's first pass and the MOCK's builds) `constant` is const and the other address spaces vanish; `threadgroup`
# arrays are made `static` by the MOCK build (compiler.host_source), so the threads of a threadgroup, run in turn on one host
# thread, share them. As C++ for OpenCL (the check's second pass) the address spaces are OpenCL's.
METAL_STDLIB = r"""#pragma once
#ifdef __OPENCL_CPP_VERSION__
/* the check's second pass, as C++ for OpenCL: Metal's address spaces are OpenCL's, so a pointer cast between two of them fails */
#pragma OPENCL EXTENSION cl_khr_fp16 : enable
#define device __global
#define thread __private
#define threadgroup __local
#define constant __constant
#undef INFINITY
#undef NAN
#else
#define kernel
#define device
#define thread
#define threadgroup
#define constant const
typedef _Float16 half;
#endif
#define INFINITY __builtin_inff()
#define NAN __builtin_nanf("")
typedef unsigned char uchar;
typedef unsigned short ushort;
typedef unsigned int uint;
typedef unsigned long ulong;
typedef uint uint3 __attribute__((ext_vector_type(3)));
/* bfloat: the top 16 bits of a float; float -> bfloat rounds to nearest even, NaN stays a quiet NaN */
struct bfloat {
  ushort bits;
  bfloat() = default;
  static ushort round(float f) {
    uint u = __builtin_bit_cast(uint, f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (ushort)((u >> 16) | 0x40u);
    return (ushort)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
  bfloat(float f) : bits(round(f)) {}
  operator float() const { return __builtin_bit_cast(float, (uint)bits << 16); }
};
namespace metal {
  enum class mem_flags { mem_none = 0, mem_device = 1, mem_threadgroup = 2, mem_texture = 4 };
  void threadgroup_barrier(mem_flags flags);
  template <class T, class F> inline T as_type(F x) { static_assert(sizeof(T) == sizeof(F), "as_type: sizes differ"); return __builtin_bit_cast(T, x); }
  /* simdgroup_matrix 8x8: each thread holds two elements (thread_elements()); which ones is the layout in core.device.tensor_core.
     The multiply runs in the MOCK's dispatcher (core_simdgroup_mma), where the threads of a simdgroup can see each other's */
  template <class T, int R, int C> struct simdgroup_matrix {
    T e[2];
    T (&thread_elements())[2] { return e; }
  };
  typedef simdgroup_matrix<float, 8, 8> simdgroup_float8x8;
  typedef simdgroup_matrix<half, 8, 8> simdgroup_half8x8;
  void core_simdgroup_mma(float* d, const float* a, const float* b, const float* c);
  template <class TD, class TA, class TB, class TC>
  inline void simdgroup_multiply_accumulate(simdgroup_matrix<TD, 8, 8>& d, simdgroup_matrix<TA, 8, 8> a, simdgroup_matrix<TB, 8, 8> b,
                                            simdgroup_matrix<TC, 8, 8> c) {
    float fa[2] = {(float)a.e[0], (float)a.e[1]}, fb[2] = {(float)b.e[0], (float)b.e[1]}, fc[2] = {(float)c.e[0], (float)c.e[1]}, fd[2];
    core_simdgroup_mma(fd, fa, fb, fc);
    d.e[0] = (TD)fd[0];
    d.e[1] = (TD)fd[1];
  }
  inline float trunc(float x) { return __builtin_truncf(x); }
  inline half trunc(half x) { return (half)__builtin_truncf((float)x); }
  namespace precise {
    inline float sqrt(float x) { return __builtin_sqrtf(x); }
    inline float exp2(float x) { return __builtin_exp2f(x); }
    inline float log2(float x) { return __builtin_log2f(x); }
    inline float sin(float x) { return __builtin_sinf(x); }
    inline float pow(float x, float y) { return __builtin_powf(x, y); }
  }
}
"""

# The MOCK's dispatcher, appended after the kernel (KERNEL_CALL is filled in per kernel): each thread is one call of the kernel
# with its positions. A kernel with barriers runs its threadgroup's threads as ucontext fibers: threadgroup_barrier switches back
# to the scheduler, which resumes every thread in turn, so all of them reach a barrier before any passes it.
RUNNER = r"""
#include <ucontext.h>
#include <stdlib.h>
struct core_ptr { void* p; template <class T> operator T*() const { return (T*)p; } };
static thread_local ucontext_t core_sched;
static thread_local ucontext_t* core_fibers;
static thread_local int core_cur, core_fiber_mode, core_yielded;
static thread_local void** core_args;
static thread_local void* core_guard_table;   /* the fault guard's table of this dispatch (core/codegen/access_guard.py) */
static thread_local uint3 core_gid, core_tg;
void metal::threadgroup_barrier(metal::mem_flags) {
  if (core_fiber_mode) { core_yielded = 1; swapcontext(&core_fibers[core_cur], &core_sched); }
}
/* simdgroup_multiply_accumulate across the 32 threads of a simdgroup (consecutive thread indices): each publishes its two
   elements of A, B and C in the threadgroup's scratch, all meet at a barrier, each computes its two elements of D from the
   others' (the layout tables below), and a second barrier keeps the scratch until every thread has read it */
static thread_local float* core_sg_buf;
void metal::core_simdgroup_mma(float* d, const float* a, const float* b, const float* c) {
  if (!core_fiber_mode) abort();   /* the dispatcher runs kernels with simdgroup matrices as fibers */
  int i = core_cur, base = i - i % 32, lane = i % 32;
  float* mine = core_sg_buf + 6 * i;
  mine[0] = a[0]; mine[1] = a[1]; mine[2] = b[0]; mine[3] = b[1]; mine[4] = c[0]; mine[5] = c[1];
  metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
  float out[2];
  for (int e = 0; e < 2; e++) {
    int pos = core_sg_c_pos[lane * 2 + e], r = pos / 8, col = pos % 8;
    float acc = mine[4 + e];
    for (int k = 0; k < 8; k++) {
      int oa = core_sg_a_owner[r * 8 + k], ob = core_sg_b_owner[k * 8 + col];
      acc += core_sg_buf[6 * (base + oa / 2) + oa % 2] * core_sg_buf[6 * (base + ob / 2) + 2 + ob % 2];
    }
    out[e] = acc;
  }
  metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
  d[0] = out[0]; d[1] = out[1];
}
static void core_thread(int i) {
  uint3 gid = core_gid, lid = {(uint)i % core_tg.x, (uint)i / core_tg.x % core_tg.y, (uint)i / (core_tg.x * core_tg.y)};
  void** args = core_args;
  KERNEL_CALL;
}
static void core_fiber_main() { core_thread(core_cur); }
extern "C" int core_metal_dispatch(void** args, const uint* grid, const uint* tg, int fibers, void* guard) {
  const ulong stack = 256 * 1024;
  uint n = tg[0] * tg[1] * tg[2];
  char* stacks = 0;
  int* done = 0;
  core_args = args;
  core_guard_table = guard;
  core_tg = uint3{tg[0], tg[1], tg[2]};
  core_fiber_mode = fibers;
  if (fibers) {
    stacks = (char*)malloc(stack * n);
    core_fibers = (ucontext_t*)malloc(sizeof(ucontext_t) * n);
    done = (int*)malloc(sizeof(int) * n);
    core_sg_buf = (float*)malloc(sizeof(float) * 6 * n);
    if (!stacks || !core_fibers || !done || !core_sg_buf) { free(stacks); free(core_fibers); free(done); free(core_sg_buf); return -1; }
  }
  for (uint z = 0; z < grid[2]; z++) for (uint y = 0; y < grid[1]; y++) for (uint x = 0; x < grid[0]; x++) {
    core_gid = uint3{x, y, z};
    if (!fibers) { for (uint i = 0; i < n; i++) core_thread((int)i); continue; }
    for (uint i = 0; i < n; i++) {
      getcontext(&core_fibers[i]);
      core_fibers[i].uc_stack.ss_sp = stacks + stack * i;
      core_fibers[i].uc_stack.ss_size = stack;
      core_fibers[i].uc_link = &core_sched;
      makecontext(&core_fibers[i], core_fiber_main, 0);
      done[i] = 0;
    }
    /* a fiber that returns lands back here through uc_link with core_cur still naming it */
    for (uint left = n; left;) for (uint i = 0; i < n; i++) {
      if (done[i]) continue;
      core_cur = (int)i;
      core_yielded = 0;
      swapcontext(&core_sched, &core_fibers[i]);
      if (!core_yielded) { done[i] = 1; left--; }
    }
  }
  if (fibers) { free(stacks); free(core_fibers); free(done); free(core_sg_buf); }
  return 0;
}
"""

def _simdgroup_tables() -> str:
  """C tables of the simdgroup 8x8 layout (core.device.tensor_core), for core_simdgroup_mma: for each matrix element (row-major)
  the slot lane*2 + element that holds it in A and B, and for each slot of C the element it is."""
  from core.device.tensor_core import TENSOR_CORES
  tc = TENSOR_CORES["METAL"][0]
  def owner(lay: object) -> list[int]:
    return [(lambda le: le[0] * 2 + le[1])(lay.owner(r, c)) for r in range(8) for c in range(8)]  # type: ignore[attr-defined]
  pos = [(lambda rc: rc[0] * 8 + rc[1])(tc.c.coords(ln, e)) for ln in range(32) for e in range(2)]
  row = lambda name, xs: f"static const unsigned char {name}[64] = {{{', '.join(map(str, xs))}}};"  # noqa: E731
  return "\n".join(["#include <stdlib.h>", row("core_sg_a_owner", owner(tc.a)), row("core_sg_b_owner", owner(tc.b)),
                    row("core_sg_c_pos", pos)]) + "\n"

RUNNER = _simdgroup_tables() + RUNNER

def shim_dir() -> str:
  """A folder holding the host `metal_stdlib` (written once per shim version into core's cache folder), for `-I`."""
  tag = hashlib.sha256(METAL_STDLIB.encode()).hexdigest()[:12]
  d = cache_dir() / "metal_shim" / tag
  if not (d / "metal_stdlib").is_file():
    d.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=d)
    with os.fdopen(fd, "w") as f: f.write(METAL_STDLIB)
    os.replace(tmp, d / "metal_stdlib")
  return str(pathlib.Path(d))
