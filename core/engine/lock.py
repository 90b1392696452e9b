"""The engine lock: one thread at a time schedules and runs work, so Tensors may be used from several threads at once.

What it guards, and why one lock: realize() reads and writes state shared by every thread and every device: the schedule
cache (schedules and their eager plans), the node facts (core/engine/state.py: buffers, the memo of realized nodes), the
compiled-runner cache, and on HCQ devices the cached submissions, whose command and kernel-argument buffers are patched with
each run's buffer addresses before they are submitted, and the host timeline values of every queue. Two threads running one
cached submission at once would patch each other's addresses (the wrong results the thread stress test,
tests/stress/test_thread_safety.py, counted before this lock); two threads writing one ring would corrupt it. A realize
holds the lock from its graph walk to the end of its kernels, so kernels of different threads do not overlap (each one
already runs on every core).

Taken by: core.engine.realize (realize, to_host, realized_buffer), a Jit's replay (core.tensor.jit). Reentrant: a realize
inside a realize (a Jit capture, an optimizer step) is fine.

What is thread-safe without it: building graphs (UOp hash-consing and buffer numbering are atomic, core.ir.ops), Tensor
construction from host data, autograd (backward() reads the tensors that need gradients from snapshots), the allocators
(core.device.allocator has its own lock: buffers are freed on whatever thread drops the last reference).

What is not thread-safe (not guarded; don't share these between threads): one Tensor object mutated from two threads at
once (assign, realize on the same tensor: the result is one of the two), the process-wide modes Tensor.training and
Tensor.no_grad and Context/env flags (set them before starting threads), the random seed (Tensor.manual_seed: draws are
numbered process-wide, so threads drawing at once get different but valid numbers in an order that varies between runs)."""
from __future__ import annotations
import threading

engine_lock = threading.RLock()
