"""pm_bufferize (ctx: the device's MetalHCQ): placeholders -> shared-storage buffers of the device."""
from __future__ import annotations
from core.hcq.queue_ir import ring_bufferize

# (kind, queue): a queue's ring, wptr, doorbell or timeline signal, the same buffer for every schedule (MetalHCQ.queue);
# program (pipeline handles), kernargs, cmdbuf, scratch, staging: a fresh buffer of the placeholder's size
pm_bufferize = ring_bufferize("metal bufferize")
