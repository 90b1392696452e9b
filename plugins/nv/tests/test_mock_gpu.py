"""The software GPU's channel processor on hand-built pushbuffers: semaphores, inline-to-memory, copies and QMD launches do what
the methods say, and malformed methods and QMDs are refused with the segment, the byte offset and what is wrong."""
from __future__ import annotations
import ctypes, re, struct
import pytest
from plugin_nv import pushbuf as pb
from plugin_nv.mock_gpu import Channel, Launch, MethodError, MockFault, VASpace, decode_qmd
from plugin_nv.prep import NVProgramData
from plugin_nv.qmd import arch_info, build_qmd

class Mem:
  """A VASpace with host buffers mapped at alias VAs."""
  def __init__(self) -> None:
    self.va, self.keep = VASpace(), []
  def alloc(self, n: int) -> tuple[int, ctypes.Array]:
    buf = (ctypes.c_uint8 * n)()
    self.keep.append(buf)
    return self.va.map(ctypes.addressof(buf), n, buf), buf

def channel(arch: str = "sm_90", engine: str = "compute", launches: list | None = None) -> tuple[Channel, Mem]:
  m = Mem()
  ch = Channel("NV COMPUTE:0", arch, engine, m.va, on_launch=(launches.append if launches is not None else None), timeout_s=0.2)
  info = arch_info(arch)
  run(ch, m, pb.incr(pb.SUBCH_COMPUTE if engine == "compute" else pb.SUBCH_COPY, pb.SET_OBJECT,
                     info.compute_class if engine == "compute" else info.copy_class))
  return ch, m

def run(ch: Channel, m: Mem, words: list[int]) -> int:
  """Put `words` in a fresh segment and execute it; returns the segment's VA."""
  va, buf = m.alloc(4 * len(words))
  struct.pack_into(f"<{len(words)}I", buf, 0, *words)
  ch.segment(va, len(words))
  return va

def sem(addr: int, payload: int, execute: int) -> list[int]:
  return pb.incr(pb.SUBCH_HOST, pb.SEM_ADDR_LO, addr & 0xFFFFFFFF, addr >> 32, payload & 0xFFFFFFFF, payload >> 32, execute)

def test_semaphore_release_and_acquire():
  ch, m = channel()
  va, buf = m.alloc(32)
  run(ch, m, sem(va, 0x1_2345_6789, pb.SEM_OP_RELEASE | pb.SEM_PAYLOAD_64BIT | pb.SEM_RELEASE_WFI))
  assert struct.unpack_from("<Q", buf)[0] == 0x1_2345_6789
  run(ch, m, sem(va + 8, 7, pb.SEM_OP_RELEASE))   # 32-bit payload: only 4 bytes written
  assert struct.unpack_from("<II", buf, 8) == (7, 0)
  run(ch, m, sem(va, 0x1_2345_6789, pb.SEM_OP_ACQ_STRICT_GEQ | pb.SEM_PAYLOAD_64BIT))   # satisfied: returns
  with pytest.raises(MethodError, match=r"byte offset 0x14: semaphore acquire timed out .* needs 4886718346"):
    run(ch, m, sem(va, 0x1_2345_678A, pb.SEM_OP_ACQ_STRICT_GEQ | pb.SEM_PAYLOAD_64BIT))
  run(ch, m, sem(va + 16, 0, pb.SEM_OP_RELEASE | pb.SEM_PAYLOAD_64BIT | pb.SEM_RELEASE_TIMESTAMP))
  assert struct.unpack_from("<Q", buf, 16)[0] == 0 and struct.unpack_from("<Q", buf, 24)[0] > 0
  with pytest.raises(MethodError, match="misaligned"): run(ch, m, sem(va + 4, 1, pb.SEM_OP_RELEASE | pb.SEM_PAYLOAD_64BIT))

def test_inline_to_memory_and_nonincrementing_data():
  ch, m = channel("sm_80")
  va, buf = m.alloc(64)
  run(ch, m, pb.incr(1, pb.C_LINE_LENGTH_IN, 12, 1, va >> 32, va & 0xFFFFFFFF) + pb.incr(1, pb.C_LAUNCH_DMA, 1) +
             pb.nonincr(1, pb.C_LOAD_INLINE_DATA, 0xA, 0xB, 0xC))
  assert struct.unpack_from("<4I", buf) == (0xA, 0xB, 0xC, 0)

@pytest.mark.parametrize("words,offset,reason", [
  ([pb.header(1, 0, 0x30, 1), 0], 0x4, "host method 0x0030 is not one the MOCK implements"),
  ([pb.header(1, 3, pb.C_SEND_PCAS_A, 1), 0], 0x4, "on subchannel 3, which has no object"),
  (pb.incr(1, 0x1234, 5), 0x4, "compute class method 0x1234 is not one the MOCK implements"),
  ([pb.header(1, 1, pb.C_NO_OPERATION, 3), 0, 0], 0x0, "announces 3 data dwords, the segment has 2 left"),
  ([pb.header(1, 1, pb.C_NO_OPERATION, 0)], 0x0, "count 0"),
  ([pb.header(2, 1, pb.C_NO_OPERATION, 1), 0], 0x0, "SEC_OP 2"),
  (pb.incr(2, pb.SET_OBJECT, 0xC7B5), 0x4, "SET_OBJECT class 0xc7b5 on subchannel 2: this compute channel runs class 0xcbc0"),
  (pb.incr(1, pb.C_LOAD_INLINE_DATA, 1), 0x4, "LOAD_INLINE_DATA without a LAUNCH_DMA"),
  (pb.incr(1, pb.C_LINE_LENGTH_IN, 8, 1, 0, 0) + pb.incr(1, pb.C_LAUNCH_DMA, 1), 0x18, "not mapped"),
  (pb.incr(1, pb.C_SEND_SIGNALING_PCAS2_B, 3), 0x4, "before SEND_PCAS_A named a QMD"),
  (pb.incr(1, pb.C_OFFSET_OUT_UPPER, 1 << 25), 0x4, "OFFSET_OUT_UPPER 0x2000000 has bits above 25"),
])
def test_malformed_methods_are_refused(words: list[int], offset: int, reason: str):
  ch, m = channel()
  with pytest.raises(MethodError) as e: run(ch, m, words)
  assert e.value.offset == offset and reason in e.value.reason and "NV COMPUTE:0 pushbuffer segment at 0x" in str(e.value)

def test_inline_data_must_complete_in_its_segment():
  ch, m = channel()
  va, _ = m.alloc(64)
  words = pb.incr(1, pb.C_LINE_LENGTH_IN, 16, 1, va >> 32, va & 0xFFFFFFFF) + pb.incr(1, pb.C_LAUNCH_DMA, 1) + pb.nonincr(1, pb.C_LOAD_INLINE_DATA, 1, 2)
  with pytest.raises(MethodError, match="ends with 8 bytes of inline data still due"): run(ch, m, words)
  ch, m = channel()
  with pytest.raises(MethodError, match="while 16 bytes of inline data"):
    run(ch, m, pb.incr(1, pb.C_LINE_LENGTH_IN, 16, 1, va >> 32, va & 0xFFFFFFFF) + pb.incr(1, pb.C_LAUNCH_DMA, 1) + pb.incr(1, pb.C_NO_OPERATION, 0))

def copy_words(src: int, dst: int, n: int, launch: int = pb.D_LAUNCH_DMA_COPY_1D) -> list[int]:
  return pb.incr(4, pb.D_OFFSET_IN_UPPER, src >> 32, src & 0xFFFFFFFF, dst >> 32, dst & 0xFFFFFFFF) + pb.incr(4, pb.D_LINE_LENGTH_IN, n, 1) + \
         pb.incr(4, pb.D_LAUNCH_DMA, launch)

def test_copy_engine():
  ch, m = channel("sm_120", "copy")
  (s, sbuf), (d, dbuf) = m.alloc(100), m.alloc(100)
  sbuf[:] = bytes(range(100))
  run(ch, m, copy_words(s + 3, d + 10, 50))
  assert bytes(dbuf[10:60]) == bytes(range(3, 53)) and bytes(dbuf[:10]) == bytes(10) and bytes(dbuf[60:]) == bytes(40)
  with pytest.raises(MethodError, match="multi-line copies are not implemented"): run(ch, m, copy_words(s, d, 4, pb.D_LAUNCH_DMA_COPY_1D | 1 << 9))
  with pytest.raises(MethodError, match="block-linear"): run(ch, m, copy_words(s, d, 4, 2))
  with pytest.raises(MethodError, match=r"\[0x.*\) is not mapped"): run(ch, m, copy_words(s, d, 101))
  with pytest.raises(MethodError, match="compute class|copy class method 0x02b4"): run(ch, m, pb.incr(4, pb.C_SEND_PCAS_A, 0))

def data(arch: str, **kw) -> NVProgramData:
  base = dict(name="k", kernarg_size=0, kernarg_align=8, arg_offsets=(), arch=arch, regs=32, shared_size=0, cbank0_offset=0x210, cbank0_size=0x228)
  return NVProgramData(**{**base, **kw})

def launch_words(qaddr: int, raw: bytes, pcas2: bool) -> list[int]:
  qw = list(struct.unpack(f"<{len(raw) // 4}I", raw))
  return pb.incr(1, pb.C_LINE_LENGTH_IN, len(raw), 1, qaddr >> 32, qaddr & 0xFFFFFFFF) + pb.incr(1, pb.C_LAUNCH_DMA, 1) + \
         pb.nonincr(1, pb.C_LOAD_INLINE_DATA, *qw) + pb.incr(1, pb.C_SEND_PCAS_A, qaddr >> 8) + \
         (pb.incr(1, pb.C_SEND_SIGNALING_PCAS2_B, 3) if pcas2 else pb.incr(1, pb.C_SEND_SIGNALING_PCAS_B, 3))

@pytest.mark.parametrize("arch", ["sm_86", "sm_90", "sm_100"])
def test_qmd_launch_is_decoded(arch: str):
  launches: list[Launch] = []
  ch, m = channel(arch, launches=launches)
  L = arch_info(arch).qmd
  q = build_qmd(arch, data(arch, shared_size=3000), (7, 5, 3), (32, 4, 2))
  prog, cb0 = 0x12_3456_7800, 0x23_0000_0040
  for field, idx, a in (("PROGRAM_ADDRESS_LOWER_SHIFTED4" if L.major == 5 else "PROGRAM_ADDRESS_LOWER", None, prog),
                        ("CONSTANT_BUFFER_ADDR_LOWER" + ("" if L.major == 3 else "_SHIFTED6"), 0, cb0)):
    sh = L.shifts.get(field, 0)
    q.set(field, (a >> sh) & 0xFFFFFFFF, idx)
    q.set(field.replace("LOWER", "UPPER"), a >> sh >> 32, idx)
  qva, _ = m.alloc(4096)
  qaddr = (qva + 255) // 256 * 256
  run(ch, m, launch_words(qaddr, q.to_bytes(), L.major > 3))
  (ln,) = launches
  assert (ln.qmd_addr, ln.program, ln.grid, ln.block, ln.regs) == (qaddr, prog, (7, 5, 3), (32, 4, 2), 32)
  assert ln.shared >= 3000 and ln.cbufs == {0: (cb0, 0x230)}

@pytest.mark.parametrize("field,value,reason", [
  ("CTA_THREAD_DIMENSION1", 0, "block (64, 0, 1): 1..1024 threads per CTA"),
  ("CTA_THREAD_DIMENSION1", 32, "block (64, 32, 1): 1..1024 threads per CTA"),
  ("GRID_HEIGHT", 0, "empty grid (1, 0, 1)"),
  ("REGISTER_COUNT", 0, "register count 0"),
  ("REGISTER_COUNT", 255, "255 registers x 1024 threads exceed the SM's 64K registers"),
  ("QMD_MAJOR_VERSION", 3, "QMD_MAJOR_VERSION 3, sm_90 takes 4"),
  ("SHARED_MEMORY_SIZE", 0x10000, "65536 bytes of shared memory exceed the 8 KiB carve-out"),
  ("TARGET_SM_CONFIG_SHARED_MEM_SIZE", 4, "TARGET_SM_CONFIG_SHARED_MEM_SIZE 4 is no sm_90 carve-out"),
  ("CONSTANT_BUFFER_VALID", 0, "constant buffer 0 (the kernel's parameters) is not valid"),
])
def test_impossible_qmds_are_refused(field: str, value: int, reason: str):
  q = build_qmd("sm_90", data("sm_90", shared_size=100), (1, 1, 1), (64, 1, 1))
  q.set(field, value, 0 if field.startswith("CONSTANT") else None)
  if field == "REGISTER_COUNT" and value == 255: q.set("CTA_THREAD_DIMENSION0", 1024)
  with pytest.raises(MockFault, match=re.escape("QMD at 0x1000: " + reason)):
    decode_qmd(arch_info("sm_90"), q.to_bytes(), 0x1000)
