"""The CL+QCOM device: any OpenCL driver through libOpenCL (pocl here, Qualcomm's on a phone): cl_mem buffers, kernels
loaded from the compiler's binaries, in-order enqueue, events for timing."""
from __future__ import annotations
import ctypes, re
from typing import Any
from core.device.allocator import BufferSpec, LRUAllocator
from core.helpers import to_function_name
from plugin_qcom import cl
from plugin_qcom.compiler import build
from plugin_qcom.renderer import CLCaps

class CLMem:
  """A cl_mem handle; a sub-buffer keeps its parent alive.

  A whole buffer that kernels read or write as an image keeps that image beside it (`shadow`, made on first use): the driver
  may have no images over buffers (pocl has not), and copying on every launch would cost a copy per kernel argument. Which of
  the two holds the current bytes is tracked here, and a copy on the in-order queue is made only when a user needs the other
  one: a kernel taking the buffer as an image (read_only or write_only), a kernel taking it (or a view of it) as a plain pointer,
  a copy in or out. Weights read as images are thus copied once, and intermediates an IMAGE=2 kernel writes stay images."""
  __slots__ = ("mem", "size", "parent", "offset", "shadow", "buf_ok", "img_ok")
  def __init__(self, mem: int, size: int, parent: CLMem | None = None, offset: int = 0):
    self.mem, self.size, self.parent = mem, size, parent
    self.offset: int = offset + (parent.offset if parent is not None else 0)   # bytes from the start of the root buffer
    self.shadow: CLImage | None = None
    self.buf_ok, self.img_ok = True, False   # the buffer's bytes are current; the shadow's (if any) are

  def __del__(self) -> None:
    # a sub-buffer is released with its handle (the allocator frees only whole buffers), a shadow image with its buffer
    try:
      if self.parent is not None: cl.lib().clReleaseMemObject(self.mem)
      self.drop_shadow()
    except (AttributeError, TypeError): pass   # interpreter shutdown
  @property
  def arg(self) -> ctypes.c_void_p: return ctypes.c_void_p(self.mem)
  @property
  def root(self) -> CLMem: return self if self.parent is None else self.parent.root

  def drop_shadow(self) -> None:
    if (img := self.shadow) is not None:
      self.shadow = None
      cl.lib().clReleaseMemObject(img.mem)

  def need_buffer(self, queue: int) -> None:
    """Makes the (root) buffer's bytes current: the shadow image's pixels copied back when a kernel wrote them last."""
    r = self.root
    if not r.buf_ok and r.shadow is not None:
      org, reg = image_region(r.shadow)
      cl.check("clEnqueueCopyImageToBuffer", cl.lib().clEnqueueCopyImageToBuffer(queue, r.shadow.mem, r.mem, org, reg, 0, 0, None, None))
    r.buf_ok = True

  def wrote_buffer(self) -> None:
    """The buffer (or a view of it) was written: the shadow image is stale."""
    r = self.root
    r.buf_ok, r.img_ok = True, False

  def need_image(self, ctx: cl.CLContext, shape: tuple[int, int, bool]) -> CLImage:
    """This whole buffer as an image of `shape` (height, width, half) holding its current bytes."""
    assert self.parent is None, "a view is staged, not shadowed"
    if self.shadow is not None and (self.shadow.height, self.shadow.width, self.shadow.half) != shape:
      self.need_buffer(ctx.queue)
      self.drop_shadow()
    if self.shadow is None: self.shadow, self.img_ok = create_image(ctx, *shape), False
    if not self.img_ok:
      org, reg = image_region(self.shadow)
      cl.check("clEnqueueCopyBufferToImage", cl.lib().clEnqueueCopyBufferToImage(ctx.queue, self.mem, self.shadow.mem, 0, org, reg, 0, None, None))
      self.img_ok = True
    return self.shadow

  def wrote_image(self) -> None:
    """A kernel wrote the shadow image: the buffer is stale until someone needs it."""
    self.buf_ok, self.img_ok = False, True

class CLImage(CLMem):
  """A 2-D RGBA image of `height` x `width` pixels, float or half channels (what IMAGE buffers will live in): read in kernels
  with read_imagef and a nearest, unnormalized, clamp sampler, written with write_imagef."""
  __slots__ = ("height", "width", "half")
  def __init__(self, mem: int, height: int, width: int, half: bool):
    super().__init__(mem, height * width * (8 if half else 16))
    self.height, self.width, self.half = height, width, half

def image_region(img: CLImage) -> tuple[ctypes.Array, ctypes.Array]:
  return (ctypes.c_size_t * 3)(0, 0, 0), (ctypes.c_size_t * 3)(img.width, img.height, 1)

def create_image(ctx: cl.CLContext, height: int, width: int, half: bool, host_ptr: int | None = None) -> CLImage:
  """A `height` x `width` RGBA image of float (or half) channels; with `host_ptr`, its pixels start as the row-major bytes
  there (CL_MEM_COPY_HOST_PTR). Refused beyond the device's 2-D image limits."""
  wmax, hmax = ctx.info.image2d_max
  if not ctx.info.image_support: raise NotImplementedError("the OpenCL device has no image support")
  if not (1 <= width <= wmax and 1 <= height <= hmax):
    raise ValueError(f"a {height}x{width} image exceeds the device's 2-D image limit of {hmax}x{wmax} (height x width)")
  fmt = cl.cl_image_format(cl.CL_RGBA, cl.CL_HALF_FLOAT if half else cl.CL_FLOAT)
  desc = cl.cl_image_desc(image_type=cl.CL_MEM_OBJECT_IMAGE2D, image_width=width, image_height=height)
  flags = cl.CL_MEM_READ_WRITE | (cl.CL_MEM_COPY_HOST_PTR if host_ptr is not None else 0)
  mem = cl.call_handle("clCreateImage", ctx.context, flags, ctypes.byref(fmt), ctypes.byref(desc), host_ptr)
  return CLImage(mem, height, width, half)

class CLAllocator(LRUAllocator):
  """cl_mem buffers of one context. Views are sub-buffers, so their offset must be a multiple of the device's
  CL_DEVICE_MEM_BASE_ADDR_ALIGN; copies are blocking reads and writes on the in-order queue (after the kernels before them)."""
  def __init__(self, device: str, ctx: cl.CLContext):
    super().__init__(device)
    self.ctx = ctx
  def _alloc(self, size: int, options: BufferSpec) -> CLMem:
    if options.external_ptr is not None:
      return CLMem(cl.call_handle("clCreateBuffer", self.ctx.context, cl.CL_MEM_READ_WRITE | cl.CL_MEM_USE_HOST_PTR, size,
                                  options.external_ptr), size)
    try: return CLMem(cl.call_handle("clCreateBuffer", self.ctx.context, cl.CL_MEM_READ_WRITE, size, None), size)
    except cl.CLError as e: raise MemoryError(str(e)) from e
  def _free(self, opaque: CLMem, options: BufferSpec) -> None:
    opaque.drop_shadow()
    cl.lib().clReleaseMemObject(opaque.mem)
  def free(self, opaque: CLMem, size: int, options: BufferSpec | None = None) -> None:
    opaque.drop_shadow()   # a buffer kept for reuse keeps no image memory
    super().free(opaque, size, options)
  def _offset(self, opaque: CLMem, size: int, offset: int) -> CLMem:
    if offset % self.ctx.info.base_align:
      raise NotImplementedError(f"{self.device}: a view at byte offset {offset} is not a multiple of the device's sub-buffer "
                                f"alignment ({self.ctx.info.base_align} bytes, CL_DEVICE_MEM_BASE_ADDR_ALIGN)")
    region = (ctypes.c_size_t * 2)(offset, size)
    mem = cl.call_handle("clCreateSubBuffer", opaque.mem, cl.CL_MEM_READ_WRITE, cl.CL_BUFFER_CREATE_TYPE_REGION, region)
    return CLMem(mem, size, opaque, offset)
  def _copyin(self, dest: CLMem, src: memoryview) -> None:
    if isinstance(dest, CLImage): return self._copyin_image(dest, src)
    data = src.cast("B") if not src.readonly else memoryview(bytes(src))
    if dest.parent is not None or data.nbytes < dest.size: dest.need_buffer(self.ctx.queue)   # the bytes not written stay
    ptr = (ctypes.c_uint8 * data.nbytes).from_buffer(data) if not data.readonly else ctypes.c_char_p(data.tobytes())
    cl.check("clEnqueueWriteBuffer", cl.lib().clEnqueueWriteBuffer(self.ctx.queue, dest.mem, 1, 0, data.nbytes, ptr, 0, None, None))
    dest.wrote_buffer()
  def _copyout(self, dest: memoryview, src: CLMem) -> None:
    ptr = (ctypes.c_uint8 * dest.nbytes).from_buffer(dest.cast("B"))
    if isinstance(src, CLImage):
      org, reg = image_region(src)
      cl.check("clEnqueueReadImage", cl.lib().clEnqueueReadImage(self.ctx.queue, src.mem, 1, org, reg, 0, 0, ptr, 0, None, None))
      return
    src.need_buffer(self.ctx.queue)
    cl.check("clEnqueueReadBuffer", cl.lib().clEnqueueReadBuffer(self.ctx.queue, src.mem, 1, 0, dest.nbytes, ptr, 0, None, None))

  def alloc_image(self, height: int, width: int, half: bool = False) -> CLImage:
    """A `height` x `width` RGBA image of float (or half) channels; refused beyond the device's 2-D image limits."""
    try: return create_image(self.ctx, height, width, half)
    except ValueError as e: raise ValueError(f"{self.device}: {e}") from None

  def _copyin_image(self, dest: CLImage, src: memoryview) -> None:
    data = bytearray(src.cast("B"))
    if len(data) != dest.size: raise ValueError(f"{self.device}: {len(data)} bytes for a {dest.height}x{dest.width} image of {dest.size}")
    org, reg = image_region(dest)
    ptr = (ctypes.c_uint8 * len(data)).from_buffer(data)
    cl.check("clEnqueueWriteImage", cl.lib().clEnqueueWriteImage(self.ctx.queue, dest.mem, 1, org, reg, 0, 0, ptr, 0, None, None))

class CLProgram:
  """One kernel of a driver binary: created from the binary, built, and enqueued with the launch's grid. `global_size` counts
  work-groups (as every backend's launch does); OpenCL's global size is that times the local size."""
  def __init__(self, ctx: cl.CLContext, name: str, lib: bytes):
    self.ctx, self.name = ctx, to_function_name(name)
    c = cl.lib()
    if (prog := ctx.built(lib)) is None:
      status = ctypes.c_int32()
      size, data = ctypes.c_size_t(len(lib)), ctypes.c_char_p(lib)
      handle = cl.call_handle("clCreateProgramWithBinary", ctx.context, 1, ctypes.byref(ctypes.c_void_p(ctx.device)), ctypes.byref(size),
                              ctypes.byref(data), ctypes.byref(status))
      cl.check("clCreateProgramWithBinary (binary status)", status.value)
      build(ctx, handle, f"the binary of kernel {self.name}")
      ctx.keep(lib, prog := cl.Program(handle))
    self.prog = prog   # kept while the kernel lives: a kernel must not outlive its program
    self.kernel = cl.call_handle("clCreateKernel", prog.handle, self.name.encode())
    self._c = c
    self.slots, self.images, self.readonly = kernel_args(self.kernel)
    self._staged: dict[int, CLImage] = {}   # argument position -> the image its buffer is staged through (reused per call)

  def __del__(self) -> None:
    try:
      if (k := self.__dict__.pop("kernel", None)) is not None: self._c.clReleaseKernel(k)
      for img in self.__dict__.pop("_staged", {}).values(): self._c.clReleaseMemObject(img.mem)
    except (AttributeError, TypeError): pass   # interpreter shutdown

  def set_args(self, bufs: tuple[Any, ...], vals: tuple[int, ...], extra: tuple[int, ...] = ()) -> list[tuple[CLImage, int, int]]:
    """Sets the arguments (`extra`: cl_mem handles of parameters after the buffers, such as MOCK+QCOM's fault guard table); returns the (image, buffer, byte offset) of staged views whose image the kernel writes, to copy back after
    it runs. Whole buffers taken as images use their shadow image (CLMem); their copies are made only when the bytes changed."""
    c = self._c
    q = self.ctx.queue
    # the schedule passes every buffer of the call in slot order, also one the kernel never uses (it has no parameter then)
    if self.slots is not None and len(bufs) != len(self.slots): bufs = tuple(bufs[s] for s in self.slots)
    back: list[tuple[CLImage, int, int]] = []
    for i, b in enumerate(bufs):
      if i in self.images and not isinstance(b, CLImage):
        (h, w, half), written = self.images[i]
        if isinstance(b, CLMem) and b.parent is None:
          shadow = b.need_image(self.ctx, (h, w, half))
          if written: b.wrote_image()
          b = shadow
        else:
          # a view (or a raw handle): its bytes are copied into an image for this launch and, when the kernel writes it, back;
          # from the root buffer at the view's offset (pocl crashes copying a sub-buffer to an image)
          if isinstance(b, CLMem): b.need_buffer(q)
          if (img := self._staged.get(i)) is None: img = self._staged[i] = create_image(self.ctx, h, w, half)
          org, reg = image_region(img)
          mem_b, off = (b.root.mem, b.offset) if isinstance(b, CLMem) else (b, 0)
          cl.check("clEnqueueCopyBufferToImage", c.clEnqueueCopyBufferToImage(q, mem_b, img.mem, off, org, reg, 0, None, None))
          if written:
            back.append((img, mem_b, off))
            if isinstance(b, CLMem): b.wrote_buffer()
          b = img
      elif isinstance(b, CLMem) and not isinstance(b, CLImage):
        b.need_buffer(q)
        if self.slots is None or i not in self.readonly: b.wrote_buffer()
      mem = ctypes.c_void_p(b.mem if isinstance(b, CLMem) else b)
      cl.check(f"clSetKernelArg({self.name}, {i})", c.clSetKernelArg(self.kernel, i, ctypes.sizeof(mem), ctypes.byref(mem)))
    for i, m in enumerate(extra, len(bufs)):
      mem = ctypes.c_void_p(m)
      cl.check(f"clSetKernelArg({self.name}, {i})", c.clSetKernelArg(self.kernel, i, ctypes.sizeof(mem), ctypes.byref(mem)))
    for i, v in enumerate(vals, len(bufs) + len(extra)):
      iv = ctypes.c_int32(v)
      cl.check(f"clSetKernelArg({self.name}, {i})", c.clSetKernelArg(self.kernel, i, 4, ctypes.byref(iv)))
    return back

  def __call__(self, *bufs: Any, global_size: tuple[int, ...] = (1, 1, 1), local_size: tuple[int, ...] = (1, 1, 1),
               vals: tuple[int, ...] = (), wait: bool = False, extra: tuple[int, ...] = ()) -> float | None:
    with self.ctx.lock:
      back = self.set_args(bufs, vals, extra)
      gs, ls = (tuple(x) + (1,) * (3 - len(x)) for x in (global_size, local_size))
      gws = (ctypes.c_size_t * 3)(*(g * l for g, l in zip(gs, ls)))
      lws = (ctypes.c_size_t * 3)(*ls)
      ev = ctypes.c_void_p()
      err = self._c.clEnqueueNDRangeKernel(self.ctx.queue, self.kernel, 3, None, gws, lws, 0, None, ctypes.byref(ev) if wait else None)
      cl.check(f"clEnqueueNDRangeKernel({self.name}, groups {gs}, local {ls})", err)
      for img, mem, off in back:
        org, reg = image_region(img)
        cl.check("clEnqueueCopyImageToBuffer", self._c.clEnqueueCopyImageToBuffer(self.ctx.queue, img.mem, mem, org, reg, off, 0, None, None))
    if not wait: return None
    try:
      cl.check("clWaitForEvents", self._c.clWaitForEvents(1, ctypes.byref(ev)))
      return event_seconds(ev)
    finally: self._c.clReleaseEvent(ev)

# a parameter's name: dataN for buffer slot N; an image names its shape and channel type too (data1_64x16f: 64 rows of 16
# RGBA pixels of float; h: half), see OpenCLRenderer.param_name
ARG_NAME = re.compile(rb"data(\d+)(?:_(\d+)x(\d+)([fh]))?")
CL_KERNEL_ARG_ACCESS_QUALIFIER, CL_KERNEL_ARG_ACCESS_WRITE_ONLY = 0x1197, 0x11A1
CL_KERNEL_ARG_TYPE_QUALIFIER, CL_KERNEL_ARG_TYPE_CONST = 0x1199, 1 << 0

def kernel_args(kernel: int) -> tuple[tuple[int, ...] | None, dict[int, tuple[tuple[int, int, bool], bool]], frozenset[int]]:
  """(the buffer slot of each `dataN` parameter, or None when the driver keeps no names; {argument position: ((height, width,
  half), written)} of the image parameters; the positions of `const` pointers, which the kernel only reads), from the argument
  info (built with -cl-kernel-arg-info)."""
  c = cl.lib()
  n = ctypes.c_uint32()
  cl.check("clGetKernelInfo", c.clGetKernelInfo(kernel, cl.CL_KERNEL_NUM_ARGS, 4, ctypes.byref(n), None))
  slots, images, readonly = [], {}, set()
  for i in range(n.value):
    name = ctypes.create_string_buffer(64)
    if c.clGetKernelArgInfo(kernel, i, cl.CL_KERNEL_ARG_NAME, 64, name, None) != cl.CL_SUCCESS: return None, {}, frozenset()
    if (m := ARG_NAME.fullmatch(name.value)) is None: continue
    slots.append(int(m.group(1)))
    q = ctypes.c_uint64()
    if m.group(2):
      cl.check("clGetKernelArgInfo", c.clGetKernelArgInfo(kernel, i, CL_KERNEL_ARG_ACCESS_QUALIFIER, 4, ctypes.byref(q), None))
      images[i] = ((int(m.group(2)), int(m.group(3)), m.group(4) == b"h"), q.value == CL_KERNEL_ARG_ACCESS_WRITE_ONLY)
    else:
      cl.check("clGetKernelArgInfo", c.clGetKernelArgInfo(kernel, i, CL_KERNEL_ARG_TYPE_QUALIFIER, 8, ctypes.byref(q), None))
      if q.value & CL_KERNEL_ARG_TYPE_CONST: readonly.add(i)
  return (tuple(slots) if slots else None), images, frozenset(readonly)   # no dataN names: not one of core's kernels, arguments as given

def event_seconds(ev: ctypes.c_void_p) -> float:
  """The time between a finished command's start and end (profiling is on in every CLContext queue)."""
  st, en = ctypes.c_uint64(), ctypes.c_uint64()
  c = cl.lib()
  cl.check("clGetEventProfilingInfo", c.clGetEventProfilingInfo(ev, cl.CL_PROFILING_COMMAND_START, 8, ctypes.byref(st), None))
  cl.check("clGetEventProfilingInfo", c.clGetEventProfilingInfo(ev, cl.CL_PROFILING_COMMAND_END, 8, ctypes.byref(en), None))
  return (en.value - st.value) * 1e-9

def caps_of(ctx: cl.CLContext) -> CLCaps:
  """The renderer's view of an OpenCL device."""
  i = ctx.info
  return CLCaps(fp16=i.fp16, fp64=i.fp64, max_work_group=i.max_work_group, max_work_items=(tuple(i.max_work_items) + (1, 1, 1))[:3],  # type: ignore[arg-type]
                local_mem=i.local_mem, name=i.name, images=i.image_support, image_max=i.image2d_max)
