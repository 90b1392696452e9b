"""pm_bufferize for NV: each placeholder BUFFER (by tag) becomes a real buffer of the device's HCQ object (runtime.NVHCQ).

Per-queue tags map to the channel's own buffers: ("ring", q) the pushbuffer ring core's submit program writes methods into,
("wptr", q) and ("doorbell", q) its dword write pointer and the copy the interface publishes GPFIFO entries up to, and
("timeline_signal", q) the channel's semaphore. "program" (kernel images), "kernargs" (constant bank 0 of each launch with its
QMD behind it), "cmdbuf", "scratch", "staging" and "timestamps" (16 bytes per TIMESTAMP) get a fresh allocation of the
placeholder's size. The GPFIFO ring, the USERD page with GP_PUT and the work-submit token are the channel's and never reach
core (runtime.NVHCQ says who writes them)."""
from core.hcq.queue_ir import ring_bufferize

# the HCQ contract's pm_bufferize (ctx: the device's NVHCQ)
pm_bufferize = ring_bufferize("nv bufferize")
