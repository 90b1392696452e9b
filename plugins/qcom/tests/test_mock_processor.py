"""The software command processor: the words lower.py encodes, with their patches resolved, run against host memory; malformed
packets are refused with their byte offset and meaning; waits stop and resume; each CP_EXEC_CS reaches the launcher with the
grid and the arguments read from the packets. Then the MOCK+QCOM device end to end (a subprocess: DEV is read once)."""
from __future__ import annotations
import ctypes, struct
from typing import Any, Callable
import pytest
from core.ir.dtype import dtypes
from core.ir.ops import UOp, Ops
from plugin_qcom import lower, pm4, regs
from plugin_qcom.mock_cp import CommandProcessor, Memory, PacketError
from plugin_qcom.prep import build_image, read_image

KERNEL = b"__kernel __attribute__((reqd_work_group_size(4,1,1))) void k(__global float* restrict data0, __global float* restrict data1, const int n) { }"

class Host:
  """Host arrays registered as device memory, each behind a BUFFER uop (for GETADDR patches)."""
  def __init__(self) -> None:
    self.mem, self.arrays, self.uops = Memory(), {}, {}
  def buf(self, nbytes: int, fill: bytes = b"", align: int = 1) -> UOp:
    raw = (ctypes.c_uint8 * (max(nbytes, 16) + align - 1))()
    a = (ctypes.c_uint8 * max(nbytes, 16)).from_buffer(raw, -ctypes.addressof(raw) % align)   # (keeps raw alive)
    ctypes.memmove(a, fill, len(fill))
    u = UOp.new_buffer("QCOM", nbytes, dtypes.uint8)
    self.mem.register(ctypes.addressof(a), len(a), a)
    self.arrays[u] = a
    return u
  def addr(self, u: UOp) -> int: return ctypes.addressof(self.arrays[u])
  def words(self, ins: UOp, var_vals: dict[Any, int] | None = None) -> list[int]:
    data = bytearray(ins.arg[0])
    for v, off in zip(ins.src, ins.arg[1]): data[off:off + v.dtype.itemsize] = evaluate(v, self.addr, var_vals or {}).to_bytes(v.dtype.itemsize, "little")
    return list(struct.unpack(f"<{len(data) // 4}I", data))

def evaluate(v: UOp, addr_of: Callable[[UOp], int], var_vals: dict[Any, int]) -> int:
  """A patch's value (what core's resolve stage computes): constants, addresses, timeline variables, + >> and casts."""
  if v.op is Ops.CONST: return int(v.arg)
  if v.op is Ops.GETADDR: return addr_of(v.src[0])
  if v.op is Ops.DEFINE_VAR: return var_vals[v.arg]
  a = [evaluate(s, addr_of, var_vals) for s in v.src]
  mask = (1 << 8 * v.dtype.itemsize) - 1
  return {Ops.CAST: lambda: a[0], Ops.ADD: lambda: a[0] + a[1], Ops.SHR: lambda: a[0] >> a[1]}[v.op]() & mask

def launched(host: Host) -> tuple[CommandProcessor, list[tuple]]:
  calls: list[tuple] = []
  return CommandProcessor(host.mem, lambda code, bufs, vals, groups, local: calls.append((code, bufs, vals, groups, local))), calls

def launch_words(host: Host, gs: tuple, ls: tuple) -> tuple[list[int], UOp, UOp, UOp]:
  image = build_image("k", KERNEL, 2, 1)
  data = read_image(image)
  img, a, b = host.buf(len(image), image), host.buf(64), host.buf(64)
  kernargs = host.buf(data.kernarg_size, struct.pack("<QQi", host.addr(a), host.addr(b), 7))
  prog = UOp(Ops.PROGRAM, src=(UOp(Ops.DEVICE, arg="QCOM"), img), arg=data)
  cmd = UOp(Ops.LAUNCH, src=(prog, kernargs), arg=(gs, ls))
  return host.words(lower.lower_command(cmd)), img, a, b

def test_launch_reaches_the_launcher_with_grid_code_and_arguments() -> None:
  host = Host()
  words, img, a, b = launch_words(host, (3, 2, 1), (4, 1, 1))
  cp, calls = launched(host)
  assert cp.run(words) == len(words)
  code, bufs, vals, groups, local = calls[0]
  assert code.rstrip(b"\0") == KERNEL and bufs == [host.addr(a), host.addr(b)] and vals == [7] and groups == (3, 2, 1) and local == (4, 1, 1)
  assert cp.executed[-3:] == ["CP_LOAD_STATE6_FRAG", "CP_LOAD_STATE6_FRAG", "CP_EXEC_CS"]
  code_addr = host.addr(img) + read_image(build_image("k", KERNEL, 2, 1)).code_offset
  assert cp.regs[regs.HLSQ_CS_NDRANGE_0 + 1] == 12 and cp.shader is not None and cp.shader.addr == code_addr
  assert cp.regs[regs.SP_CS_OBJ_START] | cp.regs[regs.SP_CS_OBJ_START + 1] << 32 == code_addr

def test_malformed_packets_are_refused_with_offset_and_meaning() -> None:
  host = Host()
  cp, _ = launched(host)
  with pytest.raises(PacketError, match="byte 0: type-7 header .* opcode 0x26 has a bad parity bit"): cp.run([pm4.wait_for_idle()[0] ^ 1 << 23])
  with pytest.raises(PacketError, match="byte 4: unknown type-7 opcode 0x7f"): cp.run(pm4.nop() + pm4.pkt7(0x7F, []))
  with pytest.raises(PacketError, match="byte 0: CP_MEM_WRITE says 3 dwords follow, only 1 were submitted"): cp.run(pm4.mem_write(0x1000, [1])[:2])
  with pytest.raises(PacketError, match="CP_EXEC_CS before a shader was loaded"): cp.run(pm4.exec_cs((1, 1, 1)))
  with pytest.raises(PacketError, match="address 0x10 .* is not in memory this device allocated"): cp.run(pm4.mem_write(0x10, [1]))

def test_ndrange_must_match_the_groups() -> None:
  host = Host()
  words, *_ = launch_words(host, (3, 1, 1), (4, 1, 1))
  words[-3] = 5   # NGROUPS_X 3 -> 5: 20 items, but HLSQ_CS_NDRANGE_1 says 12
  with pytest.raises(PacketError, match=r"CP_EXEC_CS of \(5, 1, 1\) groups of \(4, 1, 1\) items, but HLSQ_CS_NDRANGE says \(12, 1, 1\)"):
    launched(host)[0].run(words)

def test_signal_wait_timestamp_and_copy() -> None:
  host = Host()
  sig, src, dst, ts = host.buf(8), host.buf(8, b"abcdefgh"), host.buf(8), host.buf(8)
  tl = UOp(Ops.DEFINE_VAR, dtypes.uint64, arg=("timeline", "COMPUTE:0", "QCOM"))
  cp, _ = launched(host)
  stream = [host.words(lower.lower_command(UOp(Ops.WAIT, src=(sig, tl + UOp.const(dtypes.uint64, 1)))), {("timeline", "COMPUTE:0", "QCOM"): 4}),
            host.words(lower.lower_command(UOp(Ops.COPY, src=(dst, src), arg=7))),
            host.words(lower.lower_command(UOp(Ops.TIMESTAMP, src=(ts,))))]
  words = [w for s in stream for w in s]
  assert cp.run(words) == 0   # the signal is 0 < 5: the processor stops before the wait
  sig_val = host.words(lower.lower_command(UOp(Ops.SIGNAL, src=(sig, UOp.const(dtypes.uint64, (3 << 32) | 5)))))
  assert cp.run(sig_val) == len(sig_val) and struct.unpack("<Q", bytes(host.arrays[sig])[:8])[0] == (3 << 32) | 5
  assert cp.run(words) == len(words)
  assert bytes(host.arrays[dst])[:8] == b"abcdefgh"   # 7 bytes rounded up to 2 dwords (allocations are padded)
  assert struct.unpack("<Q", bytes(host.arrays[ts])[:8])[0] > 0

MOCK_SCRIPT = r'''
import numpy as np
from core import Tensor
from core.device.registry import Device
from plugin_qcom import pm4
from plugin_qcom.iface_mock import ring_words
x = np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32)
got = (Tensor(x) * 2 + 1).sum(axis=1).numpy()
np.testing.assert_allclose(got, (x * 2 + 1).sum(1), rtol=1e-5)
h = np.random.default_rng(1).uniform(-4, 4, 20).astype(np.float16)
np.testing.assert_array_equal((Tensor(h) * Tensor(h) - 1).numpy(), h * h - np.float16(1))
words = ring_words(Device["QCOM"].hcq)
heads = [w for w in words if w >> 28 == 7]
print(sum(1 for w in heads if (w >> 16) & 0x7f == pm4.CP_EXEC_CS and w & 0x3fff == 4))
'''

def test_mock_device_runs_tensors_through_the_packet_stream(clctx: Any) -> None:
  from test_cl import run_dev
  assert int(run_dev("MOCK+QCOM", MOCK_SCRIPT).strip()) >= 2   # each kernel went through a CP_EXEC_CS

UNWAITED_SCRIPT = "from core.testing.helpers import unwaited_resubmits_land\nprint(*unwaited_resubmits_land())"

def test_a_submission_nobody_waits_for_runs(clctx: Any) -> None:
  # the processor runs on the thread that steps it: core's submitted_without_wait() (a run with wait=False) runs what the
  # doorbell announced, which would otherwise wait for the next wait or synchronize
  from test_cl import run_dev
  n, done = map(int, run_dev("MOCK+QCOM", UNWAITED_SCRIPT).split())
  assert n >= 1 and done == n

IMG_KERNEL = (b"__kernel __attribute__((reqd_work_group_size(1,1,1))) void k(write_only image2d_t data0_2x4f, "
              b"read_only image2d_t data1_1x8h, const int n) { }")

def image_launch(host: Host, shape_in_descriptor: tuple[int, int]) -> tuple[list[int], UOp, UOp, list[tuple], CommandProcessor]:
  """A launch of IMG_KERNEL through lower.py whose kernarg buffer is filled the way core's patches fill it (each image's address
  at its argument offset); the read image's descriptor says `shape_in_descriptor` (the kernel declares 1x8)."""
  from plugin_qcom.prep import image_args
  images = tuple(image_args(IMG_KERNEL.decode()))
  image = build_image("k", IMG_KERNEL, 2, 1, images)
  data = read_image(image)
  out, inp = host.buf(2 * 4 * 16, align=32), host.buf(8 * 8, align=32)   # TEX_CONST's BASE is 32-byte aligned
  args = bytearray(data.kernarg_size)
  for k, a in enumerate((out, inp)): struct.pack_into("<Q", args, data.arg_offsets[k], host.addr(a))
  struct.pack_into("<i", args, data.arg_offsets[2], 3)
  kernargs = host.buf(data.kernarg_size, bytes(args))
  data = data if shape_in_descriptor == (1, 8) else data.__class__(**{**data.__dict__, "images": (images[0], images[1]._replace(
    height=shape_in_descriptor[0], width=shape_in_descriptor[1]))})
  prog = UOp(Ops.PROGRAM, src=(UOp(Ops.DEVICE, arg="QCOM"), host.buf(len(image), image)), arg=data)
  calls: list[tuple] = []
  cp = CommandProcessor(host.mem, lambda *a: calls.append(a))
  return host.words(lower.lower_command(UOp(Ops.LAUNCH, src=(prog, kernargs), arg=((1, 1, 1), (1, 1, 1))))), out, inp, calls, cp

def test_images_are_bound_from_the_descriptors() -> None:
  host = Host()
  words, out, inp, calls, cp = image_launch(host, (1, 8))
  assert cp.run(words) == len(words)
  (code, bufs, vals, groups, local, images), = calls
  assert vals == [3] and images[0].base == host.addr(out) and (images[0].height, images[0].width, images[0].half) == (2, 4, False)
  assert images[1].base == host.addr(inp) and (images[1].height, images[1].width, images[1].half, images[1].pitch) == (1, 8, True, 64)

def test_a_descriptor_that_disagrees_with_the_kernel_is_refused() -> None:
  host = Host()
  words, *_, cp = image_launch(host, (2, 4))
  with pytest.raises(PacketError, match=r"texture 0 is a 2x4 half image; kernel k's argument 1 is 1x8 half"): cp.run(words)

def test_launcher_keeps_the_most_recent_programs(clctx: Any, monkeypatch: pytest.MonkeyPatch) -> None:
  # every kernel ever dispatched used to stay built; now the launcher keeps a bounded LRU of them, as the CL interface does
  from plugin_qcom.compiler import CLCompiler
  from plugin_qcom.iface_mock import CLLauncher, MockAllocator
  monkeypatch.setenv("CORE_CACHE_QCOM_MOCK_PROGRAMS_T", "2")
  launcher, alloc = CLLauncher(clctx, CLCompiler(clctx), "T"), MockAllocator()
  buf = alloc.alloc(16)
  addr = ctypes.addressof(buf)
  for c in (1, 2, 3, 1):
    code = (f"__kernel __attribute__((reqd_work_group_size(4,1,1))) void k{c}(__global float* restrict data0) "
            f"{{ data0[get_local_id(0)] = {c}.0f; }}").encode()
    launcher(code, [addr], [], (1, 1, 1), (4, 1, 1))
    assert list(struct.unpack("<4f", bytes(buf))) == [c] * 4
  assert len(launcher._programs) == 2 and launcher._programs.evictions == 2 and launcher._programs.misses == 4
