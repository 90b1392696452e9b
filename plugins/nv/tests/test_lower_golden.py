"""pm_lower golden tests: the pushbuffer words of each command, expected values built here from the documented fields.

Method header (clc56f.h NVC56F_DMA_*): ADDRESS 11:0 = method >> 2, SUBCHANNEL 15:13, COUNT 28:16, SEC_OP 31:29 (1 incrementing,
3 non-incrementing). Host methods (clc56f.h / clc86f.h): SEM_ADDR_LO 0x5c, SEM_ADDR_HI 0x60, SEM_PAYLOAD_LO 0x64, SEM_PAYLOAD_HI 0x68,
SEM_EXECUTE 0x6c (OPERATION 2:0: RELEASE 1, ACQ_STRICT_GEQ 2; RELEASE_WFI 20:20; PAYLOAD_SIZE 24:24 (64BIT 1); RELEASE_TIMESTAMP 25:25).
Compute (clc7c0.h/clcbc0.h/clcdc0.h): LINE_LENGTH_IN 0x180, LINE_COUNT 0x184, OFFSET_OUT_UPPER 0x188, OFFSET_OUT 0x18c, LAUNCH_DMA
0x1b0, LOAD_INLINE_DATA 0x1b4, WAIT_FOR_IDLE 0x110, INVALIDATE_SHADER_CACHES 0x21c, SEND_PCAS_A 0x2b4, SEND_SIGNALING_PCAS_B 0x2bc
(INVALIDATE 0:0, SCHEDULE 1:1), SEND_SIGNALING_PCAS2_B 0x2c0 (PCAS_ACTION 3:0, INVALIDATE_COPY_SCHEDULE 3). Copy (clc7b5.h..clcab5.h):
LAUNCH_DMA 0x300, OFFSET_IN_UPPER 0x400, OFFSET_IN_LOWER 0x404, OFFSET_OUT_UPPER 0x408, OFFSET_OUT_LOWER 0x40c, LINE_LENGTH_IN 0x418,
LINE_COUNT 0x41c, NOP 0x100."""
from __future__ import annotations
import struct
import pytest
from core.ir.dtype import dtypes, truncate
from core.ir.ops import UOp, Ops, exec_uop_tree
from core.hcq import queue_ir as qi
from plugin_nv import lower
from plugin_nv.lower import lower_command
from plugin_nv.prep import NVProgramData, kernarg_layout
from plugin_nv.qmd import QMD, arch_info

def hdr(op: int, subch: int, method: int, count: int) -> int: return op << 29 | count << 16 | subch << 13 | method >> 2

ADDRS: dict[UOp, int] = {}

def buf(kind: str, size: int, addr: int) -> UOp:
  b = qi.placeholder(kind, "NV", size)
  ADDRS[b] = addr
  return b

def resolve(ins: UOp, var_vals: dict[UOp, int] | None = None) -> list[int]:
  """The INS's dwords with every patch evaluated (GETADDR -> the test's addresses, timeline variables -> var_vals)."""
  assert ins.op is Ops.INS
  data = bytearray(ins.arg[0])
  for v, off in zip(ins.src, ins.arg[1]):
    subs = {g: UOp.const(dtypes.uint64, ADDRS[g.src[0]]) for g in v.toposort() if g.op is Ops.GETADDR}
    subs.update({k: UOp.const(k.dtype, x) for k, x in (var_vals or {}).items()})
    val = truncate(v.dtype, exec_uop_tree(v.substitute(subs), {}))
    data[off:off + v.dtype.itemsize] = val.to_bytes(v.dtype.itemsize, "little")
  return list(struct.unpack(f"<{len(data) // 4}I", data))

SIG = buf("timeline_signal", 8, 0x12_3456_7000)

@pytest.mark.parametrize("queue", ["COMPUTE:0", "COPY:0"])
def test_wait_signal_timestamp(queue: str):
  tl = qi.timeline(queue, "NV")
  w = resolve(lower_command(qi.wait(SIG, tl + UOp.const(dtypes.uint64, 3)), queue, "sm_90"), {tl: (5 << 32) + 7})
  assert w == [hdr(1, 0, 0x5c, 5), 0x3456_7000, 0x12, 10, 5, 2 | 1 << 24]
  s = resolve(lower_command(qi.signal(SIG, UOp.const(dtypes.uint64, 0x1_0000_0009)), queue, "sm_80"))
  assert s == [hdr(1, 0, 0x5c, 5), 0x3456_7000, 0x12, 9, 1, 1 | 1 << 20 | 1 << 24]
  ts = resolve(lower_command(qi.timestamp(SIG), queue, "sm_120"))
  assert ts == [hdr(1, 0, 0x5c, 5), 0x3456_7000, 0x12, 0, 0, 1 | 1 << 20 | 1 << 24 | 1 << 25]

def test_barriers():
  assert resolve(lower_command(qi.barrier(), "COMPUTE:0", "sm_90")) == [hdr(1, 1, 0x110, 1), 0, hdr(1, 1, 0x21c, 1), 1 | 1 << 2 | 1 << 4 | 1 << 12]
  assert resolve(lower_command(qi.barrier(), "COPY:0", "sm_90")) == [hdr(1, 4, 0x100, 1), 0]

def copy_words(src: int, dst: int, n: int) -> list[int]:
  launch = 2 | 1 << 2 | 1 << 7 | 1 << 8   # NON_PIPELINED, FLUSH_ENABLE, SRC/DST PITCH, one line
  return [hdr(1, 4, 0x400, 4), src >> 32, src & 0xFFFFFFFF, dst >> 32, dst & 0xFFFFFFFF, hdr(1, 4, 0x418, 2), n, 1, hdr(1, 4, 0x300, 1), launch]

def test_copy_and_its_split():
  a, b = buf("staging", 64, 0x2_0000_0100), buf("staging", 64, 0x3_FFFF_FF00)
  assert resolve(lower_command(qi.copy(a, b, 4096), "COPY:0", "sm_86")) == copy_words(0x3_FFFF_FF00, 0x2_0000_0100, 4096)
  n = (1 << 32) + 10   # past LINE_LENGTH_IN's 32 bits: two LAUNCH_DMAs
  first = (1 << 32) - 1
  assert resolve(lower_command(qi.copy(a, b, n), "COPY:0", "sm_86")) == \
    copy_words(0x3_FFFF_FF00, 0x2_0000_0100, first) + copy_words(0x3_FFFF_FF00 + first, 0x2_0000_0100 + first, 11)

def program(arch: str, banks: tuple[tuple[int, int, int], ...] = ()) -> NVProgramData:
  c0 = {"sm_8": 0x160, "sm_9": 0x210, "sm_1": 0x380}[arch[:4]]
  qoff, ksize = kernarg_layout(c0 + 20, arch)
  return NVProgramData(name="k", kernarg_size=ksize, kernarg_align=8, arg_offsets=(c0, c0 + 8, c0 + 16), arch=arch, regs=16, shared_size=0,
                       cbank0_offset=c0, cbank0_size=c0 + 20, max_threads=(256, 1, 1), code_size=0x100, const_banks=banks, qmd_offset=qoff)

@pytest.mark.parametrize("arch", ["sm_80", "sm_89", "sm_90", "sm_100", "sm_120"])
def test_launch(arch: str):
  data = program(arch, ((2, 0x100, 0x40),))
  image, kargs = buf("program", 0x200, 0x7_0000_1000), buf("kernargs", data.kernarg_size, 0x7_0000_2040)
  cmd = qi.launch(qi.prepared_program("NV", image, data), kargs, (10, 2, 1), (64, 2))
  w = resolve(lower_command(cmd, "COMPUTE:0", arch))
  layout = arch_info(arch).qmd
  nq = layout.size // 4
  qaddr = (0x7_0000_2040 + data.qmd_offset + 255) // 256 * 256
  assert qaddr + layout.size <= 0x7_0000_2040 + data.kernarg_size and qaddr >= 0x7_0000_2040 + data.cbank0_size
  # inline-to-memory: one line of the QMD's bytes to qaddr, pitch layout, then the data
  assert w[:7] == [hdr(1, 1, 0x180, 4), layout.size, 1, qaddr >> 32, qaddr & 0xFFFFFFFF, hdr(1, 1, 0x1b0, 1), 1]
  assert w[7] == hdr(3, 1, 0x1b4, nq)
  q = QMD(layout, struct.pack(f"<{nq}I", *w[8:8 + nq]))
  pcas2 = layout.major > 3
  assert w[8 + nq:] == [hdr(1, 1, 0x2b4, 1), qaddr >> 8] + ([hdr(1, 1, 0x2c0, 1), 3] if pcas2 else [hdr(1, 1, 0x2bc, 1), 0b11])
  # the QMD's addresses (the rest of its fields: test_qmd.py)
  if layout.major == 5: prog = q.get("PROGRAM_ADDRESS_LOWER_SHIFTED4") | q.get("PROGRAM_ADDRESS_UPPER_SHIFTED4") << 32; prog <<= 4
  else: prog = q.get("PROGRAM_ADDRESS_LOWER") | q.get("PROGRAM_ADDRESS_UPPER") << 32
  assert prog == 0x7_0000_1000
  sfx, sh = ("", 0) if layout.major == 3 else ("_SHIFTED6", 6)
  for bank, addr, size in ((0, 0x7_0000_2040, data.cbank0_size), (2, 0x7_0000_1100, 0x40)):
    assert (q.get(f"CONSTANT_BUFFER_ADDR_LOWER{sfx}", bank) | q.get(f"CONSTANT_BUFFER_ADDR_UPPER{sfx}", bank) << 32) << sh == addr
    assert q.get("CONSTANT_BUFFER_SIZE_SHIFTED4", bank) == (size + 15) // 16 and q.get("CONSTANT_BUFFER_VALID", bank) == 1
  assert [q.get(g) for g in layout.grid] == [10, 2, 1] and [q.get(f"CTA_THREAD_DIMENSION{k}") for k in range(3)] == [64, 2, 1]

def test_refusals():
  data = program("sm_90")
  image, kargs = buf("program", 0x200, 0x1000), buf("kernargs", data.kernarg_size, 0x2000)
  cmd = qi.launch(qi.prepared_program("NV", image, data), kargs, (1,), (512,))
  with pytest.raises(ValueError, match="exceeds the kernel's thread limit"): lower_command(cmd, "COMPUTE:0", "sm_90")
  ok = qi.launch(qi.prepared_program("NV", image, data), kargs, (1,), (32,))
  with pytest.raises(ValueError, match="built for sm_90, launched on an sm_120"): lower_command(ok, "COMPUTE:0", "sm_120")
  with pytest.raises(ValueError, match="launches go to a COMPUTE channel"): lower_command(ok, "COPY:0", "sm_90")
  with pytest.raises(ValueError, match="copies go to a COPY channel"): lower_command(qi.copy(image, kargs, 8), "COMPUTE:0", "sm_90")
  assert lower.copy_chunks(10, 4) == [(0, 4), (4, 4), (8, 2)]
