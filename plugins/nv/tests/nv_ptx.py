"""Small PTX modules the cubin and prep tests build with ptxas for each arch."""
from __future__ import annotations

ARCHS = ["sm_80", "sm_90", "sm_120"]
HEAD = ".version 8.0\n.target sm_80\n.address_size 64\n"

# out[i] = a[i] + a[i] through 512 bytes of shared memory, a barrier, .maxntid: two buffers then an int32
ADD = HEAD + """
.visible .entry add(.param .u64 out, .param .u64 a, .param .u32 n)
.maxntid 128, 1, 1
{
  .reg .b32 %r<8>; .reg .b64 %rd<8>; .reg .f32 %f<4>; .reg .pred %p<2>;
  .shared .align 4 .b8 smem[512];
  ld.param.u64 %rd1, [out]; ld.param.u64 %rd2, [a]; ld.param.u32 %r1, [n];
  mov.u32 %r2, %tid.x;
  setp.ge.u32 %p1, %r2, %r1;
  @%p1 bra DONE;
  cvta.to.global.u64 %rd3, %rd2; mul.wide.u32 %rd4, %r2, 4; add.s64 %rd5, %rd3, %rd4;
  ld.global.f32 %f1, [%rd5];
  mov.u32 %r3, smem; shl.b32 %r4, %r2, 2; add.u32 %r5, %r3, %r4;
  st.shared.f32 [%r5], %f1;
  bar.sync 0;
  ld.shared.f32 %f2, [%r5];
  add.f32 %f3, %f2, %f1;
  cvta.to.global.u64 %rd6, %rd1; add.s64 %rd7, %rd6, %rd4;
  st.global.f32 [%rd7], %f3;
DONE:
  ret;
}
"""

# two kernels in one module: r_64_8 (a loop over 8 inputs times an int32 n, .reqntid 32x4) and one_arg (no shared memory)
TWO = HEAD + """
.visible .entry r_64_8(.param .u64 out, .param .u64 in, .param .u32 n)
.reqntid 32, 4, 1
{
  .reg .b32 %r<8>; .reg .b64 %rd<8>; .reg .f32 %f<8>; .reg .pred %p<2>;
  ld.param.u64 %rd1, [out]; ld.param.u64 %rd2, [in]; ld.param.u32 %r1, [n];
  mov.u32 %r2, %ctaid.x;
  cvta.to.global.u64 %rd3, %rd2; mul.wide.u32 %rd4, %r2, 32; add.s64 %rd5, %rd3, %rd4;
  mov.f32 %f1, 0f00000000; mov.u32 %r3, 0;
LOOP:
  ld.global.f32 %f2, [%rd5];
  sin.approx.f32 %f3, %f2;
  add.f32 %f1, %f1, %f3;
  add.s64 %rd5, %rd5, 4; add.u32 %r3, %r3, 1;
  setp.lt.u32 %p1, %r3, 8;
  @%p1 bra LOOP;
  cvt.rn.f32.s32 %f4, %r1; mul.f32 %f5, %f1, %f4;
  cvta.to.global.u64 %rd6, %rd1; mul.wide.u32 %rd7, %r2, 4; add.s64 %rd6, %rd6, %rd7;
  st.global.f32 [%rd6], %f5;
  ret;
}

.visible .entry one_arg(.param .u64 out)
{
  .reg .b32 %r<2>; .reg .b64 %rd<3>;
  ld.param.u64 %rd1, [out];
  mov.u32 %r1, %ctaid.z;
  cvta.to.global.u64 %rd2, %rd1;
  st.global.u32 [%rd2], %r1;
  ret;
}
"""

# a module-scope global: its address sits in constant bank 4, relocated (R_CUDA_64); a double literal ptxas pools in bank 2 on sm_8x
GLOBAL = HEAD + """
.global .align 8 .f64 gtab[4] = {1.0, 2.0, 3.0, 4.0};

.visible .entry gk(.param .u64 out, .param .u32 sel)
{
  .reg .b32 %r<4>; .reg .b64 %rd<8>; .reg .f64 %d<4>;
  ld.param.u64 %rd1, [out]; ld.param.u32 %r1, [sel];
  mov.u64 %rd2, gtab; mul.wide.u32 %rd3, %r1, 8; add.s64 %rd4, %rd2, %rd3;
  ld.global.f64 %d1, [%rd4];
  add.f64 %d2, %d1, 0d3FF3C0CA428C59FB;
  cvta.to.global.u64 %rd5, %rd1;
  st.global.f64 [%rd5], %d2;
  ret;
}
"""

# out[0] = in[0] * pi + 1.2345678901234567 in double: no globals; on sm_8x the literals land in .nv.constant2.dk
DOUBLE = HEAD + """
.visible .entry dk(.param .u64 out, .param .u64 in)
{
  .reg .b64 %rd<6>; .reg .f64 %d<4>;
  ld.param.u64 %rd1, [out]; ld.param.u64 %rd2, [in];
  cvta.to.global.u64 %rd3, %rd2;
  ld.global.f64 %d1, [%rd3];
  fma.rn.f64 %d2, %d1, 0d400921FB54442D18, 0d3FF3C0CA428C59FB;
  cvta.to.global.u64 %rd4, %rd1;
  st.global.f64 [%rd4], %d2;
  ret;
}
"""
