"""IMAGE=1/2 on QCOM: kernels read (and write) buffers as 2-D RGBA images. A conv net on CL+QCOM gives numpy's result with
and without images and its kernels read the weights with read_imagef; half images; gated reads through the border; the
texture/sampler descriptors golden from freedreno's register database, and the MOCK processor binding them from the packets."""
from __future__ import annotations
import os, re, subprocess, sys, textwrap
from typing import Any
import numpy as np
import pytest
from plugin_qcom import descriptors
from plugin_qcom.pm4 import PacketError

# a small conv net (conv 3->8 pad 1, relu, conv 8->16 stride 2, relu, mean, linear 16->10) with fixed weights, in a fresh
# process per IMAGE value (IMAGE is read when kernels are scheduled); DEBUG=4 prints every kernel's OpenCL C
NET = textwrap.dedent("""
  import sys, numpy as np
  from core import Tensor
  r = np.random.default_rng(0)
  x, w1, w2 = r.standard_normal((2, 3, 12, 12)), r.standard_normal((8, 3, 3, 3)), r.standard_normal((16, 8, 3, 3))
  wl, bl = r.standard_normal((10, 16)), r.standard_normal(10)
  T = lambda a: Tensor(a.astype(np.float32)).realize()
  h = T(x).conv2d(T(w1), padding=1).relu().conv2d(T(w2), stride=2).relu().mean(axis=(2, 3))
  np.save(sys.argv[1], (h @ T(wl).transpose() + T(bl)).numpy())
""")

def _conv_np(x: np.ndarray, w: np.ndarray, stride: int = 1, pad: int = 0) -> np.ndarray:
  x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
  n, _, hh, ww = x.shape
  k = w.shape[2]
  oh, ow = (hh - k) // stride + 1, (ww - k) // stride + 1
  out = np.zeros((n, w.shape[0], oh, ow))
  for i in range(k):
    for j in range(k): out += np.einsum("ncxy,oc->noxy", x[:, :, i:i + stride * oh:stride, j:j + stride * ow:stride], w[:, :, i, j])
  return out

def _net_np() -> np.ndarray:
  r = np.random.default_rng(0)
  x, w1, w2 = r.standard_normal((2, 3, 12, 12)), r.standard_normal((8, 3, 3, 3)), r.standard_normal((16, 8, 3, 3))
  wl, bl = r.standard_normal((10, 16)), r.standard_normal(10)
  h = np.maximum(_conv_np(np.maximum(_conv_np(x, w1, pad=1), 0), w2, stride=2), 0).mean(axis=(2, 3))
  return h @ wl.T + bl

def _run(tmp_path: Any, code: str, dev: str, image: int) -> tuple[np.ndarray, str]:
  """Runs `code` (which saves its result to sys.argv[1]) with DEV, IMAGE and DEBUG=4 in a fresh process; (result, stdout)."""
  out = tmp_path / f"out_{abs(hash(code))}_{dev}_{image}.npy"
  env = {**os.environ, "DEV": dev, "IMAGE": str(image), "DEBUG": "4"}
  p = subprocess.run([sys.executable, "-c", code, str(out)], env=env, capture_output=True, text=True, timeout=600)
  assert p.returncode == 0, p.stderr[-3000:]
  return np.load(out), p.stdout

def _run_net(tmp_path: Any, dev: str, image: int) -> tuple[np.ndarray, str]: return _run(tmp_path, NET, dev, image)

def _kernels(src: str) -> list[str]:
  """The OpenCL C of each kernel DEBUG=4 printed."""
  return [k for k in re.split(r"(?=#pragma OPENCL FP_CONTRACT OFF)", src) if "__kernel" in k]

def test_conv_net_reads_weights_as_images_with_the_same_result(clctx: Any, tmp_path: Any) -> None:
  plain, src0 = _run_net(tmp_path, "CL+QCOM", 0)
  img, src1 = _run_net(tmp_path, "CL+QCOM", 1)
  np.testing.assert_allclose(plain, _net_np(), rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(img, plain, rtol=1e-5, atol=1e-5)
  assert src0.count("read_imagef(") == 0 and "image2d_t" not in src0
  reads = src1.count("read_imagef(")
  convs = [k for k in _kernels(src1) if re.search(r"void r_\w+", k) and "image2d_t" in k]
  # every reduction kernel that reads a weight reads it as an image, and IMAGE=1 writes no image
  assert reads > 0 and len(convs) >= 3 and "write_imagef" not in src1, (reads, len(convs))
  print(f"IMAGE=1 conv net: {reads} read_imagef calls in {len(_kernels(src1))} kernels")

def test_image2_writes_intermediates_as_images(clctx: Any, tmp_path: Any) -> None:
  img, src = _run_net(tmp_path, "CL+QCOM", 2)
  np.testing.assert_allclose(img, _net_np(), rtol=1e-4, atol=1e-4)
  assert "write_only image2d_t" in src and "write_imagef(" in src

def test_mock_binds_images_from_the_packet_stream(clctx: Any, tmp_path: Any) -> None:
  out, _ = _run_net(tmp_path, "MOCK+QCOM", 2)
  np.testing.assert_allclose(out, _net_np(), rtol=1e-4, atol=1e-4)

# IMAGE switched within one process: the same conv (new tensors, same structure, so the schedule cache is asked each time);
# every launch records whether its kernel takes an image, and DEBUG=4 prints the source of each newly compiled kernel
SWITCH = textwrap.dedent("""
  import sys, numpy as np
  from core import Tensor
  from core.helpers import Context
  from plugin_qcom import iface_cl
  launches = []
  call = iface_cl.CLProgram.__call__
  def record(self, *a, **k):
    launches[-1].append(bool(self.images))
    return call(self, *a, **k)
  iface_cl.CLProgram.__call__ = record
  r = np.random.default_rng(0)
  x, w = r.standard_normal((2, 3, 10, 10)).astype(np.float32), r.standard_normal((8, 3, 3, 3)).astype(np.float32)
  outs = []
  for image in (0, 1, 0, 1):
    print(f"=== IMAGE={image}", flush=True)
    launches.append([])
    with Context(IMAGE=image, DEBUG=4): outs.append(Tensor(x).conv2d(Tensor(w), padding=1).relu().numpy())
  print("=== launches", [sum(l) for l in launches], [len(l) for l in launches])
  np.save(sys.argv[1], np.stack(outs))
""")

def test_switching_image_in_one_process_reschedules(clctx: Any, tmp_path: Any) -> None:
  """IMAGE is part of the schedule cache's key: IMAGE=0, 1, 0, 1 in one process reads images only under IMAGE=1."""
  outs, src = _run(tmp_path, SWITCH, "CL+QCOM", 0)
  parts = src.split("=== IMAGE=")[1:]
  assert [p[0] for p in parts] == ["0", "1", "0", "1"]
  # the first IMAGE=0 and IMAGE=1 rounds compile their kernels (the later rounds reuse them): only IMAGE=1's read images
  assert parts[0].count("read_imagef(") == 0 and parts[1].count("read_imagef(") > 0
  m = re.search(r"=== launches \[(.*?)\] \[(.*?)\]", src)
  assert m is not None
  with_images, total = [int(v) for v in m.group(1).split(",")], [int(v) for v in m.group(2).split(",")]
  assert with_images[0] == with_images[2] == 0 and with_images[1] > 0 and with_images[3] > 0 and all(t > 0 for t in total), (with_images, total)
  x, w = (lambda r: (r.standard_normal((2, 3, 10, 10)), r.standard_normal((8, 3, 3, 3))))(np.random.default_rng(0))
  want = np.maximum(_conv_np(x, w, pad=1), 0)
  for o in outs: np.testing.assert_allclose(o, want, rtol=1e-4, atol=1e-4)

HALF = textwrap.dedent("""
  import sys, numpy as np
  from core import Tensor
  r = np.random.default_rng(1)
  a, b = r.standard_normal((16, 8)).astype(np.float16), r.standard_normal((8, 12)).astype(np.float16)
  np.save(sys.argv[1], (Tensor(a).realize() @ Tensor(b).realize()).numpy())
""")

def test_half_images(clctx: Any, tmp_path: Any) -> None:
  out, src = _run(tmp_path, HALF, "CL+QCOM", 1)
  assert re.search(r"read_only image2d_t data1_\d+x\d+h", src) and re.search(r"read_only image2d_t data2_\d+x\d+h", src), src
  # read_imageh only where the device has cl_khr_fp16; pocl on x86 has not
  assert ("read_imageh(" if clctx.info.fp16 else "read_imagef(") in src
  r = np.random.default_rng(1)
  a, b = r.standard_normal((16, 8)).astype(np.float16), r.standard_normal((8, 12)).astype(np.float16)
  np.testing.assert_allclose(out.astype(np.float32), a.astype(np.float32) @ b.astype(np.float32), rtol=2e-2, atol=2e-2)

PAD = textwrap.dedent("""
  import sys, numpy as np
  from core import Tensor
  np.save(sys.argv[1], Tensor(np.arange(32, dtype=np.float32).reshape(4, 8)).realize().pad(((1, 1), (4, 4))).numpy())
""")

def test_gated_read_uses_the_border_not_a_branch(clctx: Any, tmp_path: Any) -> None:
  out, src = _run(tmp_path, PAD, "CL+QCOM", 1)
  # the pad's gate became an x coordinate of -1 (outside the image: the sampler reads the border, 0), not `gate?read:0`
  assert "read_imagef(" in src and not re.search(r"\?\s*read_imagef", src) and "(-1)" in src, src
  np.testing.assert_array_equal(out, np.pad(np.arange(32, dtype=np.float32).reshape(4, 8), ((1, 1), (4, 4))))

# *** descriptors: words worked out by hand from a6xx_descriptors.xml / a6xx_enums.xml ***

def test_tex_const_words() -> None:
  # FMT6_32_32_32_32_FLOAT (0x82) << 22, swizzle X,Y,Z,W = 0,1,2,3 at bits 4,7,10,13: 0x20000000 | 0x0 | 1<<7 | 2<<10 | 3<<13
  d = descriptors.tex_const(3, 5, half=False)
  assert d[0] == 0x82 << 22 | 1 << 7 | 2 << 10 | 3 << 13 == 0x20806880
  assert d[1] == 5 | 3 << 15 == 0x18005                  # WIDTH 5, HEIGHT 3
  assert d[2] == (5 * 16) << 7 | 1 << 29 == 0x20002800   # PITCH 80 bytes, TYPE A6XX_TEX_2D
  assert d[3:] == [0] * 13 and len(d) == 16
  h = descriptors.tex_const(2, 7, half=True)
  assert h[0] >> 22 == 0x62 and h[2] == (7 * 8) << 7 | 1 << 29

def test_sampler_words() -> None:
  # XY_MAG/XY_MIN nearest (0); WRAP_S/T/R clamp to border (3) at bits 5, 8, 11; UNNORM_COORDS bit 5; FASTBORDERCOLOREN bit 4
  assert descriptors.sampler() == [3 << 5 | 3 << 8 | 3 << 11, 0x20, 0x10, 0] == [0x1B60, 0x20, 0x10, 0]

def test_descriptor_decode_round_trip_and_refusals() -> None:
  d = descriptors.tex_const(4, 6, half=True)
  d[4], d[5] = 0x12345600, 0x7
  assert descriptors.decode_tex_const(d, "t") == descriptors.Image(0x712345600, 4, 6, True, 48)
  bad = list(d)
  bad[0] = (bad[0] & ~(0xFF << 22)) | 0x30 << 22   # FMT6_8_8_8_8_UNORM
  with pytest.raises(PacketError, match="FMT 0x30"): descriptors.decode_tex_const(bad, "t")
  bad = list(d)
  bad[2] = (9 * 8) << 7 | 1 << 29
  with pytest.raises(PacketError, match="PITCH 72"): descriptors.decode_tex_const(bad, "t")
  bad = list(d)
  bad[4] = 0x12345610
  with pytest.raises(PacketError, match="32-byte aligned"): descriptors.decode_tex_const(bad, "t")
  with pytest.raises(PacketError, match="not nearest"): descriptors.check_sampler([0, 0x20, 0x10, 0], "s")

def test_launch_binds_images_with_load_state6_packets() -> None:
  from core.hcq.queue_ir import Words
  from core.ir.dtype import dtypes
  from core.ir.ops import UOp
  from plugin_qcom import lower, pm4
  from plugin_qcom.prep import ImageArg, build_image, read_image
  # kernel(out image written, in buffer, in image read, int): two images, one read, one written
  images = (ImageArg(0, 2, 8, False, True), ImageArg(2, 3, 4, True, False))
  data = read_image(build_image("k", b"x" * 8, 3, 1, images))
  assert data.images == images and data.const_bytes == 32 and data.tex_offset == 64 and data.sampler_offset == 64 + 128
  # each image's argument offset is its descriptor's BASE (dword 4): the read image's descriptor first
  assert data.arg_offsets == (64 + 64 + 16, 8, 64 + 16, 24) and data.kernarg_size == 64 + 128 + 16
  w = Words()
  lower.bind_images(w, data, UOp.new_buffer("QCOM", 256, dtypes.uint8))
  heads, i = [], 0
  while i < len(w.words):
    h = pm4.decode_header(w.words[i], 4 * i)
    heads.append((h.code, w.words[i + 1:i + 1 + h.count]))
    i += 1 + h.count
  writes = [b for c, b in heads if c == pm4.CP_MEM_WRITE]
  # descriptor dwords 0-3 and 6-15 of each image (BASE is the patched address), then the sampler
  assert [len(b) - 2 for b in writes] == [4, 10, 4, 10, 4]
  assert writes[0][2:] == descriptors.tex_const(3, 4, True)[:4] and writes[2][2:] == descriptors.tex_const(2, 8, False)[:4]
  assert writes[4][2:] == descriptors.sampler()
  loads = [b[0] for c, b in heads if c == pm4.CP_LOAD_STATE6_FRAG]
  fields = [(d >> 14 & 3, d >> 16 & 3, d >> 18 & 0xF, d >> 22) for d in loads]
  assert fields == [(pm4.ST6_CONSTANTS, pm4.SS6_INDIRECT, pm4.SB6_CS_TEX, 1), (pm4.ST6_SHADER, pm4.SS6_INDIRECT, pm4.SB6_CS_TEX, 1),
                    (pm4.ST6_IBO, pm4.SS6_INDIRECT, pm4.SB6_CS_SHADER, 1)]
  assert [c for c, _ in heads].index(pm4.CP_WAIT_FOR_ME) < [c for c, _ in heads].index(pm4.CP_LOAD_STATE6_FRAG)

def test_launch_points_the_shader_at_the_descriptors() -> None:
  """SP_CS_TEX_CONST / SP_CS_TEX_SAMP / SP_CS_IBO hold where each kind of descriptor was loaded from (freedreno's a6xx.xml:
  0xa9e6, 0xa9e2, 0xa9f2, 64-bit), SP_CS_TEX_COUNT (0xa9ba) and SP_CS_IBO_COUNT (0xaa00) the counts, and SP_CS_CONFIG the
  counts in NTEX (16:9), NSAMP (21:17), NIBO (28:22)."""
  from core.hcq.queue_ir import Words, getaddr
  from core.ir.dtype import dtypes
  from core.ir.ops import UOp
  from plugin_qcom import lower, pm4, regs
  from plugin_qcom.prep import ImageArg, build_image, read_image
  # two read images and one written: the textures at 64, the sampler after the three descriptors, the IBO after the textures
  images = (ImageArg(0, 2, 8, False, True), ImageArg(1, 3, 4, False, False), ImageArg(2, 1, 4, False, False))
  data = read_image(build_image("k", b"x" * 8, 3, 0, images))
  assert data.kernarg_align == 64 and data.tex_offset == 64   # SP_CS_TEX_CONST needs a 64-byte aligned address
  kb = UOp.new_buffer("QCOM", 512, dtypes.uint8)
  w = Words()
  lower.bind_images(w, data, kb)
  patch_at = dict(w.patches)
  writes, i = {}, 0
  while i < len(w.words):
    h = pm4.decode_header(w.words[i], 4 * i)
    if h.kind == 4: writes[h.code] = (i + 1, w.words[i + 1:i + 1 + h.count])
    i += 1 + h.count
  for reg, off in ((regs.SP_CS_TEX_CONST, 64), (regs.SP_CS_TEX_SAMP, 64 + 3 * 64), (regs.SP_CS_IBO, 64 + 2 * 64)):
    at, body = writes[reg]
    assert len(body) == 2 and patch_at[4 * at] is getaddr(kb, off).cast(dtypes.uint64), hex(reg)
  assert writes[regs.SP_CS_TEX_COUNT][1] == [2] and writes[regs.SP_CS_IBO_COUNT][1] == [1]
  assert (regs.SP_CS_TEX_CONST, regs.SP_CS_TEX_SAMP, regs.SP_CS_IBO, regs.SP_CS_TEX_COUNT, regs.SP_CS_IBO_COUNT) == (0xA9E6, 0xA9E2, 0xA9F2, 0xA9BA, 0xAA00)
  assert regs.cs_config(2, 1, 1) == 1 << 8 | 2 << 9 | 1 << 17 | 1 << 22

def test_processor_refuses_descriptor_registers_that_point_elsewhere() -> None:
  from plugin_qcom import regs
  from plugin_qcom.mock_cp import CommandProcessor, Memory
  cp = CommandProcessor(Memory(), lambda *a: None)
  cp.loaded_from = {"texture": 0x1000, "sampler": 0x1100, "IBO": 0x1040}
  good = {regs.SP_CS_TEX_CONST: 0x1000, regs.SP_CS_TEX_CONST + 1: 0, regs.SP_CS_TEX_SAMP: 0x1100, regs.SP_CS_TEX_SAMP + 1: 0,
          regs.SP_CS_IBO: 0x1040, regs.SP_CS_IBO + 1: 0, regs.SP_CS_CONFIG: regs.cs_config(1, 1, 1), regs.SP_CS_TEX_COUNT: 1, regs.SP_CS_IBO_COUNT: 1}
  cp.regs = dict(good)
  cp.check_bases(1, 1, "k", 0)   # consistent: no error
  cp.regs[regs.SP_CS_TEX_CONST] = 0x2000
  with pytest.raises(PacketError, match="SP_CS_TEX_CONST is 0x2000, but its texture descriptors were loaded from 0x1000"): cp.check_bases(1, 1, "k", 0)
  cp.regs = {**good, regs.SP_CS_CONFIG: regs.cs_config(1, 1, 0)}
  with pytest.raises(PacketError, match=r"writes 1 images, but SP_CS_CONFIG NTEX/NSAMP/NIBO and SP_CS_TEX_COUNT/IBO_COUNT say \(1, 1, 0, 1, 1\)"):
    cp.check_bases(1, 1, "k", 0)
  cp.regs = {k: v for k, v in good.items() if k != regs.SP_CS_IBO}
  with pytest.raises(PacketError, match="before SP_CS_IBO_LO was written"): cp.check_bases(1, 1, "k", 0)
