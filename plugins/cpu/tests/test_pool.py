"""The thread pool (native/pool.c) through CPUProgram and cpu_launch: every block once, argument passing, threads, fork, idle cost."""
import ctypes, os, subprocess, sys, threading, time
import numpy as np
import pytest
from plugin_cpu import native
from plugin_cpu.compiler import CCompiler
from plugin_cpu.runtime import CPUAllocator, CPUProgram, CPU_MAX_ARGS

al = CPUAllocator("CPU")

@pytest.fixture(scope="module")
def cc(): return CCompiler()

def to_dev(a: np.ndarray):
  h = al.alloc(max(a.nbytes, 1))
  al._copyin(h, memoryview(np.ascontiguousarray(a)).cast("B"))
  return h

def from_dev(h, like: np.ndarray) -> np.ndarray:
  o = np.empty_like(like)
  al._copyout(memoryview(o).cast("B"), h)
  return o

# counts how often each block ran and records which index it saw
COUNT_SRC = "void count(int* restrict data0, int* restrict data1, int gidx0) { data0[gidx0] += 1; data1[gidx0] = gidx0; }\n"

def test_every_block_runs_exactly_once(cc):
  prg = CPUProgram("count", cc.compile(COUNT_SRC))
  for n in range(1, 1001):
    cnt, idx = to_dev(np.zeros(1001, np.int32)), to_dev(np.full(1001, -1, np.int32))
    prg(cnt, idx, global_size=(n, 1, 1))
    c, i = from_dev(cnt, np.zeros(1001, np.int32)), from_dev(idx, np.zeros(1001, np.int32))
    np.testing.assert_array_equal(c[:n], np.ones(n, np.int32), err_msg=f"{n} blocks")
    np.testing.assert_array_equal(i[:n], np.arange(n, dtype=np.int32), err_msg=f"{n} blocks")
    assert not c[n:].any() and (i[n:] == -1).all(), f"{n} blocks: a block past the end ran"

def test_zero_blocks_run_nothing(cc):
  prg = CPUProgram("count", cc.compile(COUNT_SRC))
  cnt, idx = to_dev(np.zeros(4, np.int32)), to_dev(np.zeros(4, np.int32))
  prg(cnt, idx, global_size=(0, 1, 1))
  assert not from_dev(cnt, np.zeros(4, np.int32)).any()

def args_src(nargs: int) -> str:
  """A kernel of one buffer and nargs-1 ints (nargs arguments before gidx0): block b stores the ints at out[b*w + j], then b."""
  w = max(nargs - 1, 1)
  params = ", ".join(["long long* restrict data0"] + [f"int v{j}" for j in range(nargs - 1)] + ["int gidx0"])
  body = "".join(f"  data0[gidx0*{w} + {j}] = v{j};\n" for j in range(nargs - 1))
  return f"void args({params}) {{\n{body}  data0[{3 * w} + gidx0] = gidx0;\n}}\n"

@pytest.mark.parametrize("nargs", [1, 2, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64])
def test_arguments_up_to_the_maximum(cc, nargs):
  # the arities around each trampoline width (8, 16, 32, 65 slots with the block index) and int32 extremes, negatives included
  prg = CPUProgram("args", cc.compile(args_src(nargs)))
  rng = np.random.default_rng(nargs)
  vals = tuple(int(v) for v in rng.integers(-2**31, 2**31, nargs - 1))
  if nargs > 3: vals = (-1, -2**31, 2**31 - 1) + vals[3:]
  w = max(nargs - 1, 1)
  out = to_dev(np.zeros(3 * w + 3, np.int64))
  prg(out, vals=vals, global_size=(3, 1, 1))
  res = from_dev(out, np.zeros(3 * w + 3, np.int64))
  for b in range(3): assert tuple(res[b * w:b * w + nargs - 1]) == vals, f"block {b}"
  assert tuple(res[3 * w:3 * w + 3]) == (0, 1, 2)

def test_too_many_arguments(cc):
  prg = CPUProgram("args", cc.compile(args_src(2)))
  with pytest.raises(ValueError, match="more than the 64"): prg(al.alloc(64), vals=(0,) * CPU_MAX_ARGS)
  # the C side refuses too, and a block count past int32 (the kernel's `int gidx0`)
  launch = native.lib().cpu_launch
  assert launch(prg.fn, CPU_MAX_ARGS + 1, (ctypes.c_uint64 * 65)(), 1) == -1
  assert launch(prg.fn, 1, (ctypes.c_uint64 * 1)(), 2**31) == -1

def test_int32_negative_values_reach_the_kernel(cc):
  src = "void neg(long long* restrict data0, int a, int b, int gidx0) { data0[2*gidx0] = a; data0[2*gidx0+1] = (long long)b * 3; }\n"
  prg = CPUProgram("neg", cc.compile(src))
  out = to_dev(np.zeros(8, np.int64))
  prg(out, vals=(-7, -2**31), global_size=(4, 1, 1))
  np.testing.assert_array_equal(from_dev(out, np.zeros(8, np.int64)), [-7, -3 * 2**31] * 4)

def test_buffers_as_addresses_and_one_dim_only(cc):
  prg = CPUProgram("count", cc.compile(COUNT_SRC))
  cnt, idx = to_dev(np.zeros(4, np.int32)), to_dev(np.zeros(4, np.int32))
  prg(ctypes.addressof(cnt), idx, global_size=(4, 1, 1))
  np.testing.assert_array_equal(from_dev(cnt, np.zeros(4, np.int32)), [1, 1, 1, 1])
  with pytest.raises(ValueError, match="one-dimensional"): prg(cnt, idx, global_size=(2, 2, 1))

SCALE_SRC = "void scale(int* restrict data0, const int* restrict data1, int k, int gidx0) {\n" \
            "  for (int i = 0; i < 256; i++) data0[gidx0*256 + i] = data1[gidx0*256 + i] * k;\n}\n"

def test_concurrent_launches_from_two_threads(cc):
  # the same program from two Python threads (its argument arrays must not be shared) plus a second program
  p1, p2 = CPUProgram("scale", cc.compile(SCALE_SRC)), CPUProgram("scale", cc.compile(SCALE_SRC))
  errors: list[str] = []
  def worker(tid: int, prgs: list[CPUProgram]):
    rng = np.random.default_rng(tid)
    inp = rng.integers(-1000, 1000, 64 * 256).astype(np.int32)
    src, dst = to_dev(inp), to_dev(np.zeros_like(inp))
    for it in range(150):
      k = tid * 1000 + it
      nblocks = 1 + (it * 7) % 64
      prgs[it % len(prgs)](dst, src, vals=(k,), global_size=(nblocks, 1, 1))
      got = from_dev(dst, inp)[:nblocks * 256]
      if not np.array_equal(got, inp[:nblocks * 256] * k): errors.append(f"thread {tid} iteration {it}")
  ts = [threading.Thread(target=worker, args=(0, [p1])), threading.Thread(target=worker, args=(1, [p1, p2])),
        threading.Thread(target=worker, args=(2, [p2]))]
  for t in ts: t.start()
  for t in ts: t.join()
  assert not errors, errors[:5]

def test_pool_size_follows_affinity():
  if os.getenv("CPU_THREADS"): pytest.fail("run this module without CPU_THREADS set")  # the default is what this checks
  assert native.pool_threads() == len(os.sched_getaffinity(0))

def test_shutdown_then_launch_starts_a_fresh_pool(cc):
  prg = CPUProgram("count", cc.compile(COUNT_SRC))
  native.lib().cpu_pool_shutdown()
  cnt, idx = to_dev(np.zeros(50, np.int32)), to_dev(np.zeros(50, np.int32))
  prg(cnt, idx, global_size=(50, 1, 1))
  np.testing.assert_array_equal(from_dev(cnt, np.zeros(50, np.int32)), np.ones(50, np.int32))
  assert native.pool_threads() >= 1

def test_idle_pool_costs_no_cpu(cc):
  prg = CPUProgram("count", cc.compile(COUNT_SRC))
  cnt, idx = to_dev(np.zeros(64, np.int32)), to_dev(np.zeros(64, np.int32))
  prg(cnt, idx, global_size=(64, 1, 1))
  time.sleep(0.05)   # past the spin window: the workers sleep now
  t0 = time.process_time()
  time.sleep(0.5)
  assert time.process_time() - t0 < 0.1, "pool threads keep spinning while idle"

def test_long_block_wait_sleeps(cc):
  # block 0 runs long, block 1 not at all: whichever thread is left waiting (the launcher for `done`, or a worker for the next
  # job) must sleep, not spin, so the CPU time stays far below the wall time
  src = "#include <time.h>\nvoid nap(int* restrict data0, int gidx0) {\n" \
        "  if (gidx0 == 0) { struct timespec t = {0, 300000000}; nanosleep(&t, 0); }\n  data0[gidx0] = 1;\n}\n"
  prg = CPUProgram("nap", cc.compile(src))
  out = to_dev(np.zeros(2, np.int32))
  t0, w0 = time.process_time(), time.perf_counter()
  prg(out, global_size=(2, 1, 1))
  cpu, wall = time.process_time() - t0, time.perf_counter() - w0
  assert from_dev(out, np.zeros(2, np.int32)).tolist() == [1, 1]
  assert wall >= 0.3 and cpu < 0.1, (cpu, wall)

def run_py(code: str, cpus: set[int] | None = None, **env: str) -> str:
  # the child imports conftest from its working folder (this one): PYTHONSAFEPATH (CI) would keep that off sys.path
  e = {k: v for k, v in os.environ.items() if k not in ("CPU_THREADS", "PYTHONSAFEPATH")} | env
  # `cpus`: the child runs pinned to these CPUs, as under `taskset -c`
  pin = None if cpus is None else (lambda: os.sched_setaffinity(0, cpus))
  res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=e, timeout=300,
                       cwd=os.path.dirname(os.path.abspath(__file__)), preexec_fn=pin)
  assert res.returncode == 0, res.stderr
  return res.stdout

CHILD = """
import conftest, numpy as np
from plugin_cpu import native
from plugin_cpu.c_renderer import CPUCRenderer
from plugin_cpu.renderer import CPULLVMRenderer
from test_pool import COUNT_SRC, CPUProgram, CCompiler, to_dev, from_dev
prg = CPUProgram("count", CCompiler().compile(COUNT_SRC))
cnt, idx = to_dev(np.zeros(100, np.int32)), to_dev(np.zeros(100, np.int32))
prg(cnt, idx, global_size=(100, 1, 1))
assert (from_dev(cnt, np.zeros(100, np.int32)) == 1).all() and (from_dev(idx, np.zeros(100, np.int32)) == np.arange(100)).all()
print(native.pool_threads(), CPUCRenderer.threads, CPULLVMRenderer.threads)
"""

@pytest.mark.parametrize("threads, renderer_threads", [("1", 0), ("3", 3)])
def test_cpu_threads_setting(threads, renderer_threads):
  # CPU_THREADS=1 turns threading off (one pool thread, no block split); 3 oversubscribes this machine and still works
  assert run_py(CHILD, CPU_THREADS=threads).split() == [threads, str(renderer_threads), str(renderer_threads)]

def test_threads_follow_affinity():
  # pinned to one CPU (`taskset -c 0`): one pool thread and no block split; pinned to all it may use: one thread per CPU
  mine = sorted(os.sched_getaffinity(0))
  assert run_py(CHILD, cpus={mine[0]}).split() == ["1", "0", "0"]
  if len(mine) > 1: assert run_py(CHILD, cpus=set(mine)).split() == [str(len(mine))] * 3

APART_CHILD = """
import os, conftest, numpy as np
from test_pool import CPUProgram, CCompiler, to_dev, from_dev
# blocks long enough that a direct launch takes the pool (its first launches of a size are timed on one thread)
src = "void busy(int* restrict data0, int gidx0) { volatile int s = 0; for (int i = 0; i < 100000; i++) s += i; data0[gidx0] += 1; }"
prg = CPUProgram("busy", CCompiler().compile(src))
cpus, out = sorted(os.sched_getaffinity(0)), to_dev(np.zeros(8, np.int32))
def launch(times): [prg(out, global_size=(8, 1, 1)) for _ in range(times)]
launch(4)   # the pool starts on every CPU the process may use
for cpu in (cpus[0], cpus[-1]):
  os.sched_setaffinity(0, {cpu})   # the launching thread runs on `cpu`
  launch(2)
  workers = [t for t in os.listdir("/proc/self/task") if open(f"/proc/self/task/{t}/comm").read().strip() == "cpu-pool"]
  print(cpu, ";".join(",".join(map(str, sorted(os.sched_getaffinity(int(t))))) for t in workers))
assert (from_dev(out, np.zeros(8, np.int32)) == 8).all()
"""

def test_workers_run_apart_from_the_launcher():
  # each launch leaves the launching thread's CPU out of the workers' affinity (a worker woken onto it would run after it);
  # CPU_APART=0 leaves them on every CPU the process may use
  cpus = sorted(os.sched_getaffinity(0))
  if len(cpus) < 2: pytest.skip("one CPU: no other CPU to keep the workers on")
  for apart in ("1", "0"):
    # no back-off: on a loaded machine a late worker would send the next launches to the launching thread alone, past the pool
    lines = [ln.split() for ln in run_py(APART_CHILD, CPU_APART=apart, CPU_BACKOFF_US="0").splitlines()]
    assert [int(c) for c, _ in lines] == [cpus[0], cpus[-1]]
    for cpu, masks in lines:
      want = [c for c in cpus if apart == "0" or c != int(cpu)]
      assert masks.split(";") == [",".join(map(str, want))] * (len(cpus) - 1), (apart, cpu, masks)

def test_forked_child_gets_a_working_pool(cc):
  prg = CPUProgram("count", cc.compile(COUNT_SRC))
  cnt, idx = to_dev(np.zeros(40, np.int32)), to_dev(np.zeros(40, np.int32))
  prg(cnt, idx, global_size=(40, 1, 1))   # the parent's pool is running
  pid = os.fork()
  if pid == 0:
    try:
      prg(cnt, idx, global_size=(40, 1, 1))
      ok = (from_dev(cnt, np.zeros(40, np.int32)) == 2).all()
    except BaseException: ok = False
    os._exit(0 if ok else 1)
  _, status = os.waitpid(pid, 0)
  assert os.waitstatus_to_exitcode(status) == 0

PARK_CHILD = """
import time, numpy as np
from plugin_cpu import native
from test_pool import COUNT_SRC, CPUProgram, CCompiler, to_dev, from_dev
prg = CPUProgram("count", CCompiler().compile(COUNT_SRC))
def launch(n):
  cnt, idx = to_dev(np.zeros(n, np.int32)), to_dev(np.zeros(n, np.int32))
  prg(cnt, idx, global_size=(n, 1, 1))
  assert (from_dev(cnt, np.zeros(n, np.int32)) == 1).all() and (from_dev(idx, np.zeros(n, np.int32)) == np.arange(n)).all()
def sleepers_within(want, seconds):
  until = time.monotonic() + seconds
  while native.pool_sleepers() != want and time.monotonic() < until: time.sleep(0.001)
  return native.pool_sleepers()
native.set_pool_spin(60_000_000, PAUSE)   # a minute of polling after each launch: only a park puts the workers to sleep now
launch(300)
polling = sleepers_within(0, 30)   # the launch woke them (on a busy machine they may take a while to run): now they poll
native.park_pool()
parked = sleepers_within(native.pool_threads() - 1, 30)
launch(300)   # a parked pool wakes for the next launch as from any sleep
print(native.pool_threads(), polling, parked)
"""

@pytest.mark.parametrize("pause_us", [0, 60_000_000])
def test_park_puts_polling_workers_to_sleep(pause_us):
  # both phases of the poll stop on a park: yielding (pause 0) and pausing (the whole minute in pause instructions)
  # CPU_SERIAL_US=0: every launch goes to the pool (a short one would run on the calling thread and wake no worker)
  threads, polling, parked = map(int, run_py(PARK_CHILD.replace("PAUSE", str(pause_us)), CPU_THREADS="3", CPU_SERIAL_US="0").split())
  assert (threads, polling, parked) == (3, 0, 2)

# records which thread ran each block; the launching thread's blocks sleep `own` ms, a worker's `other` ms (as if it lost its core)
LATE_SRC = """#define _GNU_SOURCE
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>
void late(long* restrict data0, int launcher, int own, int other, int gidx0) {
  long me = syscall(SYS_gettid);
  data0[gidx0] = me;
  struct timespec t = {0, (me == launcher ? own : other) * 1000000L};
  nanosleep(&t, 0);
}
"""

def test_late_worker_backs_off_to_the_launching_thread(cc):
  if native.pool_threads() < 2: pytest.skip("needs a pool of 2 or more threads")
  prg = CPUProgram("late", cc.compile(LATE_SRC))
  out = to_dev(np.zeros(4, np.int64))
  me = threading.get_native_id()
  def launch(n: int, own: int, other: int) -> set[int]:
    prg.prepare(out, vals=(me, own, other), global_size=(n, 1, 1), estimates={"ops": 1 << 40, "mem": 1 << 40})()
    return set(from_dev(out, np.zeros(4, np.int64))[:n].tolist())
  try:
    native.set_pool_backoff(10_000_000)   # ten seconds: the next launches surely fall in it, however busy the machine
    # a worker's block outlasts the launcher's by far: it waits for it (until a worker took a block; on a busy machine one may
    # not). The margin is wide because the back-off needs that wait to exceed the launcher's own time, and at load 15 on 2
    # cores the launcher's own 20 ms sleep overran a worker's 80 ms one (CI, session 38)
    assert any(launch(2, 20, 400) != {me} for _ in range(10)), "no worker ever ran a block"
    assert launch(4, 1, 1) == {me}   # backing off: every block on the launching thread
    native.set_pool_backoff(0)   # never: the pool again
    assert any(launch(4, 20, 1) != {me} for _ in range(10))
  finally: native.set_pool_backoff(int(os.getenv("CPU_BACKOFF_US", "") or 10_000))

# records which thread ran each block; every block at position p of its thread's share (the first, the second, ...) waits until
# `threads` blocks at p have started (each on its own thread then), or gives up after 20 s and counts a timeout in data1[per]
HOME_SRC = """#define _GNU_SOURCE
#include <sched.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>
void home(long* restrict data0, int* restrict data1, int per, int threads, int gidx0) {
  int p = gidx0 % per;
  data0[gidx0] = syscall(SYS_gettid);
  __atomic_add_fetch(&data1[p], 1, __ATOMIC_SEQ_CST);
  time_t until = time(0) + 20;
  while (__atomic_load_n(&data1[p], __ATOMIC_SEQ_CST) < threads)
    if (sched_yield(), time(0) > until) { __atomic_add_fetch(&data1[per], 1, __ATOMIC_SEQ_CST); break; }
}
"""

@pytest.mark.parametrize("per", [1, 2, 3])
def test_each_thread_runs_its_home_share(cc, per):
  # `per` blocks a thread: thread t (the launcher first) claims blocks [t*per, (t+1)*per) before any other thread's, so the
  # same thread runs the same blocks at every launch (a kernel then reads the part of the previous one's output its own core
  # wrote). A free-for-all claim hands a thread a later position's block while others wait at an earlier one: timeouts.
  threads = native.pool_threads()
  if threads < 2: pytest.skip("needs a pool of 2 or more threads")
  prg, n, launch = CPUProgram("home", cc.compile(HOME_SRC)), per * threads, native.lib().cpu_launch
  maps = []
  try:
    native.set_pool_backoff(0)   # a back-off left by an earlier test would run every block on this thread
    for _ in range(5):
      tid, sync = to_dev(np.zeros(n, np.int64)), to_dev(np.zeros(per + 1, np.int32))
      assert launch(prg.fn, 4, (ctypes.c_uint64 * 4)(ctypes.addressof(tid), ctypes.addressof(sync), per, threads), n) == 0
      assert from_dev(sync, np.zeros(per + 1, np.int32))[per] == 0, "a block waited in vain for the other threads' blocks"
      maps.append(from_dev(tid, np.zeros(n, np.int64)).reshape(threads, per))
  finally: native.set_pool_backoff(int(os.getenv("CPU_BACKOFF_US", "") or 10_000))
  assert (maps[0] == maps[0][:, :1]).all(), "a thread's share ran on more than one thread"
  assert len(set(maps[0][:, 0])) == threads and maps[0][0, 0] == threading.get_native_id()
  for m in maps[1:]: np.testing.assert_array_equal(m, maps[0])
