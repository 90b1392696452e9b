"""pm_bufferize for AMD: each placeholder BUFFER (by tag) becomes a real buffer the device's HCQ object (runtime.AMDHCQ) owns."""
from core.hcq.queue_ir import ring_bufferize

# per-queue tags ("ring" | "wptr" | "doorbell" | "timeline_signal", queue) map to the queue's one buffer each (the ring's
# placeholder has size 0: the real one is ring_size bytes); "program", "kernargs", "cmdbuf", "scratch", "staging" and "timestamps" get a
# fresh allocation of the placeholder's size (core packs program/kernarg/cmdbuf placeholders first and uploads their contents)

# the HCQ contract's pm_bufferize (ctx: the device's AMDHCQ)
pm_bufferize = ring_bufferize("amd bufferize")
