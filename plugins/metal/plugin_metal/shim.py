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
static thread_local uint3 core_gid, core_tg;
void metal::threadgroup_barrier(metal::mem_flags) {
  if (core_fiber_mode) { core_yielded = 1; swapcontext(&core_fibers[core_cur], &core_sched); }
}
static void core_thread(int i) {
  uint3 gid = core_gid, lid = {(uint)i % core_tg.x, (uint)i / core_tg.x % core_tg.y, (uint)i / (core_tg.x * core_tg.y)};
  void** args = core_args;
  KERNEL_CALL;
}
static void core_fiber_main() { core_thread(core_cur); }
extern "C" int core_metal_dispatch(void** args, const uint* grid, const uint* tg, int fibers) {
  const ulong stack = 256 * 1024;
  uint n = tg[0] * tg[1] * tg[2];
  char* stacks = 0;
  int* done = 0;
  core_args = args;
  core_tg = uint3{tg[0], tg[1], tg[2]};
  core_fiber_mode = fibers;
  if (fibers) {
    stacks = (char*)malloc(stack * n);
    core_fibers = (ucontext_t*)malloc(sizeof(ucontext_t) * n);
    done = (int*)malloc(sizeof(int) * n);
    if (!stacks || !core_fibers || !done) { free(stacks); free(core_fibers); free(done); return -1; }
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
  if (fibers) { free(stacks); free(core_fibers); free(done); }
  return 0;
}
"""

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
