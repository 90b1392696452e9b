"""pm_bufferize for QCOM: each placeholder BUFFER (by tag) becomes a real buffer the device's HCQ object (runtime.QCOMHCQ) owns."""
from core.hcq.queue_ir import ring_bufferize

# per-queue tags map to the queue's one buffer; "program", "kernargs", "cmdbuf", "scratch" and "staging" get a fresh
# allocation of the placeholder's size (core packs and uploads program, kernarg and cmdbuf contents)

# the HCQ contract's pm_bufferize (ctx: the device's QCOMHCQ)
pm_bufferize = ring_bufferize("qcom bufferize")
