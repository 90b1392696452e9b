"""Pushbuffer methods and GPFIFO entries, as NVIDIA's public class headers define them (open-gpu-doc classes/host/clc56f.h,
the open kernel modules' clc86f.h; classes/compute/clc7c0.h, clcbc0.h, clcdc0.h; classes/dma-copy/clc7b5.h ... clcab5.h).

A pushbuffer is a run of dwords: a method header (opcode, subchannel, first method address >> 2, count) followed by `count` data
dwords. Host methods (address < 0x100: semaphores, WFI) go to the channel itself on any subchannel; higher addresses go to
the engine object bound to the subchannel by SET_OBJECT. A GPFIFO entry (8 bytes) points the channel at one segment."""
from __future__ import annotations

# *** method headers (NVC56F_DMA_*) ***
SEC_OP_INC_METHOD = 1         # data dwords go to method, method + 4, ...
SEC_OP_NON_INC_METHOD = 3     # every data dword goes to the same method
SEC_OP_IMMD_DATA_METHOD = 4   # a 13-bit value in the header itself, no data dwords
SEC_OP_ONE_INC = 5            # the first data dword to method, the rest to method + 4
SEC_OP_END_PB_SEGMENT = 7
DMA_NOP = 0x00000000          # NVC56F_DMA_NOP: an empty header (also what fills a ring's tail)
MAX_COUNT = (1 << 13) - 1     # NVC56F_DMA_METHOD_COUNT 28:16

def header(op: int, subch: int, method: int, count: int) -> int:
  """DMA_METHOD_ADDRESS 11:0 (method >> 2), SUBCHANNEL 15:13, COUNT 28:16, SEC_OP 31:29."""
  if method % 4 or not 0 <= method < 0x4000: raise ValueError(f"method {method:#x} is not a dword address below 0x4000")
  if not 0 <= subch < 8: raise ValueError(f"subchannel {subch} (a channel has 8)")
  if not 0 <= count <= MAX_COUNT: raise ValueError(f"method count {count} exceeds {MAX_COUNT}")
  return op << 29 | count << 16 | subch << 13 | method >> 2

def incr(subch: int, method: int, *data: int) -> list[int]: return [header(SEC_OP_INC_METHOD, subch, method, len(data)), *data]
def nonincr(subch: int, method: int, *data: int) -> list[int]: return [header(SEC_OP_NON_INC_METHOD, subch, method, len(data)), *data]

# *** GPFIFO entries (NVC56F_GP_ENTRY0/1) ***
GP_LENGTH_MAX = (1 << 21) - 1   # GP_ENTRY1_LENGTH 30:10, in dwords

def gp_entry(addr: int, ndwords: int, sync: bool = False) -> tuple[int, int]:
  """ENTRY0: FETCH 0:0 (unconditional), GET 31:2 (address bits 31:2); ENTRY1: GET_HI 7:0 (address bits 39:32), LEVEL 9:9
  (main), LENGTH 30:10 (dwords), SYNC 31:31."""
  if addr % 4 or not 0 <= addr < 1 << 40: raise ValueError(f"pushbuffer address {addr:#x} is not a dword address below 2**40")
  if not 0 < ndwords <= GP_LENGTH_MAX: raise ValueError(f"pushbuffer segment of {ndwords} dwords (1..{GP_LENGTH_MAX})")
  return addr & 0xFFFFFFFC, (addr >> 32) & 0xFF | ndwords << 10 | int(sync) << 31

def gp_decode(e0: int, e1: int) -> tuple[int, int, int, int]:
  """(address, dwords, level, sync) of an entry (length 0 is a control entry: opcode in ENTRY1 7:0)."""
  return (e0 & 0xFFFFFFFC) | (e1 & 0xFF) << 32, (e1 >> 10) & GP_LENGTH_MAX, (e1 >> 9) & 1, e1 >> 31

# USERD (Nvc56fControl / Nvc86fControl): the channel's GPFIFO put index, written by the host
USERD_GP_GET = 0x88
USERD_GP_PUT = 0x8c
USERD_SIZE = 0x200
# the usermode object's doorbell (NVC361_NOTIFY_CHANNEL_PENDING): writing a channel's work-submit token there makes the GPU look at it
NOTIFY_CHANNEL_PENDING = 0x90

# *** host class methods (NVC56F_* / NVC86F_*: the same addresses on Ampere, Hopper and Blackwell) ***
SET_OBJECT = 0x0000
NOP = 0x0008
SEM_ADDR_LO = 0x005c          # OFFSET 31:2
SEM_ADDR_HI = 0x0060          # OFFSET 7:0 (Ampere), 24:0 (Hopper)
SEM_PAYLOAD_LO = 0x0064
SEM_PAYLOAD_HI = 0x0068
SEM_EXECUTE = 0x006c
WFI = 0x0078
SEM_OP_ACQUIRE, SEM_OP_RELEASE, SEM_OP_ACQ_STRICT_GEQ, SEM_OP_ACQ_CIRC_GEQ = 0, 1, 2, 3   # SEM_EXECUTE_OPERATION 2:0
SEM_RELEASE_WFI = 1 << 20      # SEM_EXECUTE_RELEASE_WFI_EN
SEM_PAYLOAD_64BIT = 1 << 24    # SEM_EXECUTE_PAYLOAD_SIZE_64BIT
SEM_RELEASE_TIMESTAMP = 1 << 25

# *** compute class methods (NVC6C0/NVC7C0/NVC9C0/NVCBC0/NVCDC0/NVCEC0) ***
C_NO_OPERATION = 0x0100
C_WAIT_FOR_IDLE = 0x0110
C_LINE_LENGTH_IN = 0x0180     # inline-to-memory (I2M): bytes per line
C_LINE_COUNT = 0x0184
C_OFFSET_OUT_UPPER = 0x0188   # VALUE 16:0 (Ampere), 24:0 (Hopper, Blackwell)
C_OFFSET_OUT = 0x018c
C_LAUNCH_DMA = 0x01b0         # DST_MEMORY_LAYOUT 0:0 (1: PITCH), COMPLETION_TYPE 5:4, SYSMEMBAR_DISABLE 6:6
C_LOAD_INLINE_DATA = 0x01b4
C_INVALIDATE_SHADER_CACHES = 0x021c   # INSTRUCTION 0:0, LOCKS 1:1, FLUSH_DATA 2:2, DATA 4:4, CONSTANT 12:12
C_SEND_PCAS_A = 0x02b4        # QMD_ADDRESS_SHIFTED8 31:0
C_SEND_SIGNALING_PCAS_B = 0x02bc      # INVALIDATE 0:0, SCHEDULE 1:1
C_SEND_SIGNALING_PCAS2_B = 0x02c0     # PCAS_ACTION 3:0
C_LAUNCH_DMA_PITCH = 1
PCAS_B_INVALIDATE_SCHEDULE = 0b11
PCAS2_ACTION_INVALIDATE_COPY_SCHEDULE = 3
INVALIDATE_ALL_SHADER_CACHES = 1 << 0 | 1 << 2 | 1 << 4 | 1 << 12

# *** copy class methods (NVC6B5 ... NVCAB5) ***
D_NOP = 0x0100
D_LAUNCH_DMA = 0x0300
D_OFFSET_IN_UPPER = 0x0400    # UPPER 16:0 (Ampere), 24:0 (Hopper, Blackwell)
D_OFFSET_IN_LOWER = 0x0404
D_OFFSET_OUT_UPPER = 0x0408
D_OFFSET_OUT_LOWER = 0x040c
D_LINE_LENGTH_IN = 0x0418
D_LINE_COUNT = 0x041c
# LAUNCH_DMA: DATA_TRANSFER_TYPE 1:0 = NON_PIPELINED (2), FLUSH_ENABLE 2:2, SEMAPHORE_TYPE 4:3 = NONE, SRC/DST_MEMORY_LAYOUT 7:7/8:8 =
# PITCH, MULTI_LINE_ENABLE 9:9 = 0 (one line of LINE_LENGTH_IN bytes), SRC/DST_TYPE 12:12/13:13 = VIRTUAL
D_LAUNCH_DMA_COPY_1D = 2 | 1 << 2 | 1 << 7 | 1 << 8
MAX_COPY = (1 << 32) - 1      # LINE_LENGTH_IN is 32 bits

# the subchannels this plugin binds: the engine of the queue (compute or copy); host methods use subchannel 0
SUBCH_HOST, SUBCH_COMPUTE, SUBCH_COPY = 0, 1, 4
