"""Metal command-buffer programs: the encoder calls pm_lower writes into a queue's ring, one packet per call, which an interface
replays (MOCK: on the host; MTL: as the same calls on MTLComputeCommandEncoder / MTLBlitCommandEncoder / MTLCommandBuffer).

Packets are little-endian uint64 words: a header `opcode | nwords << 8` (nwords counts the header), then one word per field.
Addresses are host addresses of shared-storage memory (MTL: an MTLBuffer's `contents` plus an offset), which the replay turns
back into (buffer, offset).
  SET_PIPELINE   (1, 2 words): image address        the 8-byte handle of a pipeline state (prep.py) -> setComputePipelineState:
  SET_BUFFER     (2, 3 words): index, address        setBuffer:offset:atIndex: (a `constant int&` variable is bound this way too)
  SET_BUFFER_AT  (3, 3 words): index, slot address   the same, with the address read from the uint64 at `slot` at replay time
                                                     (a kernel's buffer addresses live in its kernargs, patched per run)
  DISPATCH       (4, 7 words): grid x, y, z (threadgroups), threadgroup x, y, z (threads) -> dispatchThreadgroups:threadsPerThreadgroup:
  MEMORY_BARRIER (5, 1 word)                         memoryBarrierWithScope:MTLBarrierScopeBuffers
  SIGNAL         (6, 3 words): signal address, value encodeSignalEvent:value: on the signal's MTLSharedEvent; the uint64 in memory
                                                     holds the same value once everything before it completed
  WAIT           (7, 3 words): signal address, value encodeWaitForEvent:value: (the queue stops until the signal >= value)
  BLIT_COPY      (8, 4 words): destination, source, nbytes -> copyFromBuffer:sourceOffset:toBuffer:destinationOffset:size:
  TIMESTAMP      (9, 2 words): address               the uint64 at address = a monotonic clock in ns once what precedes completed
"""
from __future__ import annotations
import enum
from core.device.word_packets import WordPackets

class Call(enum.IntEnum):
  SET_PIPELINE = 1
  SET_BUFFER = 2
  SET_BUFFER_AT = 3
  DISPATCH = 4
  MEMORY_BARRIER = 5
  SIGNAL = 6
  WAIT = 7
  BLIT_COPY = 8
  TIMESTAMP = 9

WORDS = {Call.SET_PIPELINE: 2, Call.SET_BUFFER: 3, Call.SET_BUFFER_AT: 3, Call.DISPATCH: 7, Call.MEMORY_BARRIER: 1, Call.SIGNAL: 3,
         Call.WAIT: 3, Call.BLIT_COPY: 4, Call.TIMESTAMP: 2}

CALLS = WordPackets(WORDS, "encoder call")
packet, field, decode = CALLS.packet, CALLS.field, CALLS.decode
