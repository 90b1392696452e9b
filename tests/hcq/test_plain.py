"""core.hcq.plain: the packet format EXAMPLE's SIM and WEBGPU run, and the program a LAUNCH names by its handle."""
import struct, types
from core.ir.ops import UOp, Ops
from core.hcq.plain import PLAIN, HandleProgramData, PlainOp, handle_program

def test_plain_packets_are_the_words_example_and_webgpu_run():
  words = PLAIN.packet(PlainOp.LAUNCH, 0xA0, 0xB0, 2 | 1 << 32) + PLAIN.packet(PlainOp.COPY, 1, 2, 64) + PLAIN.packet(PlainOp.WAIT, 3, 4)
  words += PLAIN.packet(PlainOp.SIGNAL, 5, 6) + PLAIN.packet(PlainOp.TIMESTAMP, 7) + PLAIN.packet(PlainOp.BARRIER)
  assert struct.unpack("<17Q", words) == (0x401, 0xA0, 0xB0, 0x1_0000_0002, 0x402, 1, 2, 64, 0x303, 3, 4, 0x304, 5, 6, 0x205, 7, 0x106)

def test_handle_program_is_the_handle_and_one_kernarg_slot_per_argument():
  loaded = types.SimpleNamespace(handle=0x1234)
  p = handle_program(UOp(Ops.DEVICE, arg="X"), "k", loaded, nbufs=2, nvars=1)
  assert p.op is Ops.PROGRAM and p.src[0].arg == "X" and p.src[1].op is Ops.BINARY and p.src[1].arg == struct.pack("<Q", 0x1234)
  assert p.arg == HandleProgramData("k", 24, 8, (0, 8, 16), handle=0x1234, nbufs=2, nvars=1) and p.arg.program is loaded
