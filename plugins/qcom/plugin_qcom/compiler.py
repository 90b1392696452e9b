"""The OpenCL compiler: OpenCL C -> the driver's program binary (clBuildProgram, clGetProgramInfo), cached on disk by core."""
from __future__ import annotations
import ctypes, re
from core.device.compiler import Compiler, CompileError
from plugin_qcom import cl

def source_context(src: str, log: str, around: int = 1) -> str:
  """The source lines a build log points at (`<file>:LINE:COL: error`), each with its neighbours and a marker."""
  lines, out = src.splitlines(), []
  # clang writes `<file>:LINE:COL: error: ...`, pocl `error: <file>:LINE:COL <...>: ...`
  hits = (re.search(r":(\d+):\d+", ln) for ln in log.splitlines() if "error" in ln)
  for m in dict.fromkeys(int(h.group(1)) for h in hits if h):
    for i in range(max(1, m - around), min(len(lines), m + around) + 1):
      out.append(f"{'>' if i == m else ' '}{i:5d} | {lines[i - 1]}")
  return "\n".join(out)

def build_log(ctx: cl.CLContext, prog: int) -> str:
  n = ctypes.c_size_t()
  c = cl.lib()
  cl.check("clGetProgramBuildInfo", c.clGetProgramBuildInfo(prog, ctx.device, cl.CL_PROGRAM_BUILD_LOG, 0, None, ctypes.byref(n)))
  buf = ctypes.create_string_buffer(n.value)
  cl.check("clGetProgramBuildInfo", c.clGetProgramBuildInfo(prog, ctx.device, cl.CL_PROGRAM_BUILD_LOG, n.value, buf, None))
  return buf.value.decode(errors="replace")

def build(ctx: cl.CLContext, prog: int, what: str, src: str | None = None) -> None:
  """clBuildProgram; a failure raises CompileError with the driver's build log and, given the source, the failing lines."""
  err = cl.lib().clBuildProgram(prog, 1, ctypes.byref(ctypes.c_void_p(ctx.device)), cl.BUILD_OPTIONS, None, None)
  if err == cl.CL_SUCCESS: return
  log = build_log(ctx, prog)
  cl.lib().clReleaseProgram(prog)
  where = f"\n--- failing source lines ---\n{lines}" if src is not None and (lines := source_context(src, log)) else ""
  raise CompileError(f"OpenCL ({ctx.info.platform}, {ctx.info.name}) could not build {what}: {cl.ERRORS.get(err, err)}\n"
                     f"--- build log ---\n{log.strip()}{where}")

def program_binary(prog: int) -> bytes:
  c = cl.lib()
  size = ctypes.c_size_t()
  cl.check("clGetProgramInfo", c.clGetProgramInfo(prog, cl.CL_PROGRAM_BINARY_SIZES, ctypes.sizeof(size), ctypes.byref(size), None))
  buf = ctypes.create_string_buffer(size.value)
  ptr = ctypes.c_char_p(ctypes.addressof(buf))
  cl.check("clGetProgramInfo", c.clGetProgramInfo(prog, cl.CL_PROGRAM_BINARIES, ctypes.sizeof(ptr), ctypes.byref(ptr), None))
  return buf.raw

class CLCompiler(Compiler):
  """OpenCL C -> the driver's binary for one device. The cache key names the platform, device and driver version, since a
  binary only loads on the driver that made it."""
  def __init__(self, ctx: cl.CLContext):
    self.ctx = ctx
    i = ctx.info
    super().__init__(f"qcom_cl_arginfo_{i.platform}_{i.name}_{i.driver}")

  def compile(self, src: str) -> bytes:
    c = cl.lib()
    s = ctypes.c_char_p(src.encode())
    prog = cl.call_handle("clCreateProgramWithSource", self.ctx.context, 1, ctypes.byref(s), None)
    build(self.ctx, prog, "the kernel", src)
    try: binary = program_binary(prog)
    except BaseException:
      c.clReleaseProgram(prog)
      raise
    self.ctx.keep(binary, cl.Program(prog))   # the CLProgram loading this binary next takes the built program, not a rebuild
    return binary

  def disassemble(self, lib: bytes) -> str: return f"<{self.ctx.info.platform} binary of {len(lib)} bytes>"
