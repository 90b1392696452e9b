/* The CPU plugin's persistent thread pool: cpu_launch runs a kernel's blocks on all cores (see pool.h for the API).

   Design. One job at a time (launch_lock); the launching thread works too. Each thread has a home share of the job's
   blocks, claimed first: of n blocks on T threads (the launcher is thread 0, worker i thread i + 1), thread t's are
   [ceil(n*t/T), ceil(n*(t+1)/T)), the same ones at every launch of n blocks and proportional to n, so a kernel's block
   mostly runs on the core that wrote its part of the previous kernel's output, and reads it from that core's cache (2 cores,
   a chain x*2 -> +1 -> sum of 0.25-1.5 MiB: a free-for-all claim read half of it from the other core). A thread whose share is
   done claims the blocks left in the others' (from the next thread on): a late or slow thread holds up no block, and the
   launcher runs them all if no worker wakes. A job is published by writing its fields, then each share's word (job id << 32 |
   blocks left), then `gen` = job id. Workers spin briefly on `gen`, then sleep on it (futex), so an idle pool costs no CPU
   while back-to-back launches don't pay a wake-up. A block is claimed by a CAS that decrements a share's count only while
   its job id still matches: a worker that woke late can never take a block of a newer job with the fields of an older one
   (the CAS succeeds only while its job is unfinished, and a job's fields are rewritten only after it finished). The launcher
   returns when `done` reaches the block count (spinning, then sleeping on `done`). One-block launches and a one-thread pool
   never touch the shared state, so they need no lock.

   Calling a kernel. Every argument is one 64-bit slot. Rather than a switch over all arities, a block is called through
   a function type with 8, 16, 32 or CPU_MAX_ARGS+1 uint64 parameters (the smallest that fits nargs + the block index),
   with the unused trailing slots zero. This is ABI-safe on x86-64 SysV and AArch64 AAPCS64 (Linux): integer arguments
   take the integer registers and then 8-byte stack slots in order regardless of how many there are, the caller
   allocates and frees the stack area, and a callee that declares fewer parameters never looks at the extra ones; an
   `int` parameter reads the low 32 bits of its slot, where a sign-extended int32 keeps its value. (Apple arm64 packs
   stack arguments to their natural size, so this would not hold there beyond 8 slots; the plugin is Linux-only.) */
#define _GNU_SOURCE
#include "pool.h"
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#endif

typedef uint64_t u64;
__thread sigjmp_buf *cpu_pool_guard __attribute__((tls_model("initial-exec")));
__thread int cpu_pool_signo __attribute__((tls_model("initial-exec")));
__thread void *cpu_pool_addr __attribute__((tls_model("initial-exec")));
__thread uint32_t cpu_pool_job __attribute__((tls_model("initial-exec")));
__thread uint32_t cpu_pool_launching __attribute__((tls_model("initial-exec")));
/* the first fault of a guarded launch (set: 0 none, 1 being written, 2 written): F for pool jobs (under launch_lock), a local
   one for launches that run on the calling thread alone */
typedef struct { int set, signo; void *addr; int64_t block; } fault_rec;
static fault_rec F;
/* the guarded pool job being cancelled (an interrupt: SIGINT, or the host giving up on it), or 0 */
static _Atomic uint32_t g_cancel;
#define LOAD(p, mo) __atomic_load_n(p, __ATOMIC_##mo)
#define STORE(p, v, mo) __atomic_store_n(p, v, __ATOMIC_##mo)
#define MAX_THREADS 1024

/* *** waiting: spin for a little while, then sleep on a 32-bit word *** */

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ volatile("yield");
#endif
}

/* sleeps while *addr == expected, at most timeout_ns (0: no limit) */
static void word_wait_for(uint32_t *addr, uint32_t expected, long timeout_ns) {
#ifdef __linux__
  /* the kernel re-checks *addr == expected atomically, so a wake between our check and the sleep is never lost */
  struct timespec ts = {timeout_ns / 1000000000L, timeout_ns % 1000000000L};
  syscall(SYS_futex, addr, FUTEX_WAIT_PRIVATE, expected, timeout_ns ? &ts : NULL, NULL, 0);
#else
  (void)timeout_ns;
  if (LOAD(addr, ACQUIRE) == expected) usleep(50);
#endif
}
static void word_wait(uint32_t *addr, uint32_t expected) { word_wait_for(addr, expected, 0); }

static void word_wake(uint32_t *addr, int n) {
#ifdef __linux__
  syscall(SYS_futex, addr, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
#else
  (void)addr; (void)n;
#endif
}

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* set by cpu_pool_park, cleared by the next launch to the pool: until then every poll gives up at once, also one a worker enters
   after the park (still finishing its block when it was called) */
static uint32_t g_parked;
static int64_t g_pause_ns = -1;   /* the first part of a spin, in pause instructions; then it yields between polls */

/* spins until *addr != old (returns 1), the spin budget is spent or cpu_pool_park was called (returns 0). The first
   g_pause_ns poll with a pause between reads; the rest calls sched_yield between them, which returns at once on an idle core
   (a few hundred ns more to notice new work) but hands the core to any other runnable thread: another library's OpenMP
   threads in the same process, which spin at their own barriers and lose milliseconds when one of them waits for a core
   our idle worker holds (torch's 2-thread depthwise conv: 1.3 -> 14-16 ms interleaved with our kernels on 2 cores). */
static int spin_while_equal(uint32_t *addr, uint32_t old, int64_t spin_ns) {
  int64_t deadline = 0, pause_until = 0;
  int yielding = 0;
  for (unsigned i = 1;; i++) {
    if (LOAD(addr, ACQUIRE) != old) return 1;
    if (yielding) sched_yield();
    else cpu_relax();
    if (yielding || (i & 63) == 0) {   /* the clock is read now and then: it costs more than a pause */
      if (LOAD(&g_parked, RELAXED)) return 0;
      int64_t t = now_ns();
      if (deadline == 0) { deadline = t + spin_ns; pause_until = t + (g_pause_ns < spin_ns ? g_pause_ns : spin_ns); }
      else if (t >= deadline) return 0;
      yielding = t >= pause_until;
    }
  }
}

void cpu_pool_park(void) { STORE(&g_parked, 1, RELAXED); }

/* *** back-off: a machine busier than it has cores ***
   A pool job whose launcher, done with its own blocks, then waited longer than LATE_NS and longer than its own work took had a
   worker that lost its core: under load another process holds it, and the launcher waits a scheduler slice (milliseconds) for a
   block of microseconds. Until g_serial_until every launch runs its blocks on the launching thread; then the pool is tried
   again, the back-off doubling (up to BACKOFF_MAX) while the tries are late and starting over after a prompt one. Measured on
   2 cores at load 8: resnet's nine 2-block kernels 197 us a call on the pool vs 107 serial (wall, medians). $CPU_BACKOFF_US:
   the first back-off (default 10000), 0 never. */
#define LATE_NS 200000
#define BACKOFF_MAX_NS 160000000
static int64_t g_backoff_ns = -1;   /* the first back-off; set when the pool starts */
static int64_t g_backoff_cur;        /* the next one (under launch_lock) */
static int64_t g_serial_until;       /* CLOCK_MONOTONIC ns until which launches run on their own thread; 0 none */

static int backing_off(void) {
  int64_t until = LOAD(&g_serial_until, RELAXED);
  if (!until) return 0;
  if (now_ns() < until) return 1;
  STORE(&g_serial_until, 0, RELAXED);
  return 0;
}

/* after a pool job (launch_lock held): own_ns the launcher's blocks took, wait_ns its wait for the others' */
static void note_wait(int64_t own_ns, int64_t wait_ns, int64_t end) {
  if (g_backoff_ns <= 0) return;
  if (wait_ns > LATE_NS && wait_ns > own_ns) {
    STORE(&g_serial_until, end + g_backoff_cur, RELAXED);
    g_backoff_cur = g_backoff_cur * 2 < BACKOFF_MAX_NS ? g_backoff_cur * 2 : BACKOFF_MAX_NS;
  } else g_backoff_cur = g_backoff_ns;
}

/* *** calling one block *** */

typedef void (*fn8_t)(u64, u64, u64, u64, u64, u64, u64, u64);
typedef void (*fn16_t)(u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64);
#define A8(o) s[o], s[o+1], s[o+2], s[o+3], s[o+4], s[o+5], s[o+6], s[o+7]
#define T8 u64, u64, u64, u64, u64, u64, u64, u64
typedef void (*fn32_t)(T8, T8, T8, T8);
typedef void (*fnmax_t)(T8, T8, T8, T8, T8, T8, T8, T8, u64);
_Static_assert(CPU_MAX_ARGS + 1 == 65, "fnmax_t has CPU_MAX_ARGS + 1 parameters");

/* the argument slots of one job as one thread calls it: the block index goes right after the arguments */
typedef struct { void *fn; int nargs; u64 s[CPU_MAX_ARGS + 1]; } slots_t;

static void slots_init(slots_t *sl, void *fn, int nargs, const u64 *args) {
  int n = nargs + 1, used = n <= 8 ? 8 : n <= 16 ? 16 : n <= 32 ? 32 : CPU_MAX_ARGS + 1;   /* the slots call_block passes */
  sl->fn = fn;
  sl->nargs = nargs;
  if (nargs > 0) memcpy(sl->s, args, (size_t)nargs * sizeof(u64));
  memset(sl->s + nargs, 0, (size_t)(used - nargs) * sizeof(u64));
}

static void call_block(slots_t *sl, int64_t b) {
  u64 *s = sl->s;
  int n = sl->nargs + 1;
  s[sl->nargs] = (u64)b;
  if (n <= 8) ((fn8_t)sl->fn)(A8(0));
  else if (n <= 16) ((fn16_t)sl->fn)(A8(0), A8(8));
  else if (n <= 32) ((fn32_t)sl->fn)(A8(0), A8(8), A8(16), A8(24));
  else ((fnmax_t)sl->fn)(A8(0), A8(8), A8(16), A8(24), A8(32), A8(40), A8(48), A8(56), s[64]);
}

/* *** the pool *** */

/* the words threads write during a job sit on cache lines of their own, apart from the ones they poll or only read */
#define LINE __attribute__((aligned(64)))
/* a thread's home share of a job: job id << 32 | blocks not yet claimed, claimed from the front (by its thread, then any) */
typedef struct { LINE u64 left; } share_t;
static struct {
  pthread_mutex_t init_lock, launch_lock;
  int started, nthreads;           /* nthreads counts the launching thread */
  pthread_t *workers;
  int64_t spin_ns;
  /* the current job: written by the launcher before it publishes the job id */
  void *fn; int nargs; const u64 *args; int64_t nblocks; int guarded;
  LINE uint32_t gen;               /* id of the latest job; idle workers poll and sleep on it */
  int sleepers, stop;
  share_t *shares;                 /* per thread (0: the launcher, 1 + i: worker i): its home share of the current job */
  LINE uint32_t done;              /* blocks of the current job finished; the launcher polls and sleeps on it */
  int launcher_sleeping;
  uint32_t *running;               /* per worker: the guarded job whose block it is running, or 0 (to interrupt it) */
  int away_from;                   /* the CPU the workers' affinity leaves out (apart_from_launcher), -1: none */
} P = {.init_lock = PTHREAD_MUTEX_INITIALIZER, .launch_lock = PTHREAD_MUTEX_INITIALIZER};

void cpu_unblock_faults(void) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGSEGV);
  sigaddset(&set, SIGBUS);
  sigaddset(&set, SIGFPE);
  sigaddset(&set, SIGILL);
  pthread_sigmask(SIG_UNBLOCK, &set, NULL);
}

/* runs one block; under a guard (f) a fault abandons the block and is recorded (the first one wins) */
static void run_block(slots_t *sl, int64_t b, fault_rec *f) {
  if (!f) { call_block(sl, b); return; }
  sigjmp_buf jb;
  /* the signal mask is not saved (a system call per block); after a fault the signal is unblocked here instead */
  if (sigsetjmp(jb, 0) == 0) {
    cpu_pool_guard = &jb;
    /* an interrupt that came before the guard was armed found nothing to leave: it cancelled the job, seen here */
    if (cpu_pool_job && atomic_load(&g_cancel) == cpu_pool_job) { cpu_pool_guard = NULL; return; }
    call_block(sl, b);
    cpu_pool_guard = NULL;
    return;
  }
  cpu_pool_guard = NULL;
  cpu_unblock_faults();
  int expect = 0;
  if (__atomic_compare_exchange_n(&f->set, &expect, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
    f->signo = cpu_pool_signo; f->addr = cpu_pool_addr; f->block = b;
    STORE(&f->set, 2, RELEASE);
  }
}

void cpu_pool_cancel(uint32_t job) { if (job) atomic_store(&g_cancel, job); }

/* where thread t's home share of n blocks on T threads starts: block b's home is thread floor(b*T/n), so a launch of fewer
   blocks than threads gives the launcher block 0 */
static inline int64_t share_start(int64_t n, int t, int T) { return (n * t + T - 1) / T; }

/* the next block of thread t's share of job `job`, or -1 when none is left (or the share holds another job's blocks) */
static int64_t claim(int t, uint32_t job, int64_t nblocks, int T) {
  u64 *w = &P.shares[t].left, c = LOAD(w, ACQUIRE);
  for (;;) {
    if ((uint32_t)(c >> 32) != job || (uint32_t)c == 0) return -1;
    if (__atomic_compare_exchange_n(w, &c, c - 1, 1, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
      return share_start(nblocks, t + 1, T) - (int64_t)(uint32_t)c;
  }
}

/* claims and runs blocks of job `job` until none is left: its home share first, then the other threads' (see the top of the
   file); the caller has seen gen == job. `self`: this thread's slot in P.running (-1: the launcher). Blocks of a cancelled job
   are claimed and counted but not run. */
static void work(uint32_t job, int self) {
  slots_t sl;
  /* read the fields before claiming: a successful claim proves they belonged to `job` (see the top of the file) */
  void *fn = LOAD(&P.fn, RELAXED);
  int nargs = LOAD(&P.nargs, RELAXED);
  const u64 *args = LOAD(&P.args, RELAXED);
  int64_t nblocks = LOAD(&P.nblocks, RELAXED), b;
  int guarded = LOAD(&P.guarded, RELAXED), T = P.nthreads, ready = 0;
  for (int k = 0; k < T; k++)
    for (int t = (self + 1 + k) % T; (b = claim(t, job, nblocks, T)) >= 0;) {
      if (!ready) { slots_init(&sl, fn, nargs, args); ready = 1; }
      if (!guarded) run_block(&sl, b, NULL);
      else {
        /* published before the cancel is read (the launcher sets the cancel, then reads `running`): a block that starts as
           the job is cancelled is either skipped here or interrupted by the launcher */
        cpu_pool_job = job;
        if (self >= 0) STORE(&P.running[self], job, SEQ_CST);
        if (atomic_load(&g_cancel) != job) run_block(&sl, b, &F);
        if (self >= 0) STORE(&P.running[self], 0, RELEASE);
        cpu_pool_job = 0;
      }
      if (__atomic_add_fetch(&P.done, 1, __ATOMIC_SEQ_CST) == (uint32_t)nblocks && LOAD(&P.launcher_sleeping, SEQ_CST))
        word_wake(&P.done, 1);
    }
}

typedef struct { uint32_t gen; int self; } worker_arg;

static void *worker_main(void *arg) {
  worker_arg wa = *(worker_arg *)arg;
  free(arg);
  uint32_t last = wa.gen;
  cpu_unblock_faults();
  for (;;) {
    if (!spin_while_equal(&P.gen, last, P.spin_ns)) {
      __atomic_add_fetch(&P.sleepers, 1, __ATOMIC_SEQ_CST);
      while (LOAD(&P.gen, SEQ_CST) == last) word_wait(&P.gen, last);
      __atomic_sub_fetch(&P.sleepers, 1, __ATOMIC_SEQ_CST);
    }
    if (LOAD(&P.stop, ACQUIRE)) return NULL;
    last = LOAD(&P.gen, ACQUIRE);
    work(last, wa.self);
  }
}

static int pool_size(void) {
  const char *e = getenv("CPU_THREADS");
  if (e && *e) {
    long v = strtol(e, NULL, 10);
    if (v >= 1) return v > MAX_THREADS ? MAX_THREADS : (int)v;
  }
#ifdef __linux__
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) >= 1) return CPU_COUNT(&set);
#endif
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : n > MAX_THREADS ? MAX_THREADS : (int)n;
}

/* Keeps the workers off the launching thread's CPU. The launcher runs its share of every job, so a worker the scheduler puts on
   the same CPU (a sleeping worker woken there, or the launcher woken onto a worker's CPU) runs only after it: the job takes
   one core's time, and the launcher takes the worker's blocks too. A 2-vCPU Xeon guest, bench/suite.py's NHWC->NCHW permute
   and softmax rows (16-32 MiB, ~1 ms a call, the machine's copy loop run between samples): samples split between ~45 GB/s and
   ~18 GB/s (one core's copy bandwidth), medians 17-25 GB/s; with the launcher and the worker on CPUs of their own, 43-46 GB/s
   [38-47]. The workers' affinity is the process's CPUs less the launcher's, set again only when the launcher's CPU changes
   (a system call a worker; a migration if it ran there). $CPU_APART=0 leaves placement to the scheduler. */
#ifdef __linux__
static cpu_set_t g_cpus;          /* the CPUs the process could run on when the pool started */
#endif
static int g_apart = 1;           /* $CPU_APART: 1 (default) keep the workers apart from the launcher */
static void apart_from_launcher(void) {
#ifdef __linux__
  int cpu = sched_getcpu();
  if (!g_apart || cpu < 0 || cpu == P.away_from || !CPU_ISSET(cpu, &g_cpus) || CPU_COUNT(&g_cpus) < 2) return;
  cpu_set_t set = g_cpus;
  CPU_CLR(cpu, &set);
  for (int i = 0; i < P.nthreads - 1; i++) pthread_setaffinity_np(P.workers[i], sizeof set, &set);
  P.away_from = cpu;
#endif
}

static void at_exit(void);

/* a forked child has none of the parent's threads: forget them (and locks some other thread may have held) */
static void after_fork_child(void) {
  pthread_mutex_init(&P.init_lock, NULL);
  pthread_mutex_init(&P.launch_lock, NULL);
  P.workers = NULL;
  P.running = NULL;
  P.shares = NULL;
  P.nthreads = P.sleepers = P.launcher_sleeping = P.stop = 0;
  STORE(&P.started, 0, RELEASE);
}

/* starts the workers; called with launch_lock held, so no job is in flight and gen is stable */
static void pool_start_locked(void) {
  static int registered = 0;
  pthread_mutex_lock(&P.init_lock);
  if (!LOAD(&P.started, ACQUIRE)) {
    if (!registered) { atexit(at_exit); pthread_atfork(NULL, NULL, after_fork_child); registered = 1; }
    const char *sp = getenv("CPU_SPIN_US");
    P.spin_ns = (sp && *sp ? strtol(sp, NULL, 10) : 300) * 1000;   /* covers the Python gap between eager ops */
    const char *pp = getenv("CPU_SPIN_PAUSE_US");
    g_pause_ns = (pp && *pp ? strtol(pp, NULL, 10) : 20) * 1000;   /* back-to-back launches: no system call between polls */
    const char *bo = getenv("CPU_BACKOFF_US");
    g_backoff_cur = g_backoff_ns = (bo && *bo ? strtol(bo, NULL, 10) : 10000) * 1000;
    STORE(&g_serial_until, 0, RELAXED);
    const char *ap = getenv("CPU_APART");
    g_apart = !(ap && *ap && strtol(ap, NULL, 10) == 0);
#ifdef __linux__
    if (sched_getaffinity(0, sizeof g_cpus, &g_cpus) != 0) CPU_ZERO(&g_cpus);
#endif
    P.away_from = -1;
    int n = pool_size();
    P.stop = 0;
    P.workers = n > 1 ? calloc((size_t)n - 1, sizeof(pthread_t)) : NULL;
    P.running = n > 1 ? calloc((size_t)n - 1, sizeof(uint32_t)) : NULL;
    P.shares = n > 1 ? aligned_alloc(sizeof(share_t), (size_t)n * sizeof(share_t)) : NULL;
    if (P.shares) memset(P.shares, 0, (size_t)n * sizeof(share_t));
    int made = 0;
    if (P.workers && P.running && P.shares) {
      pthread_attr_t attr;
      pthread_attr_init(&attr);
      pthread_attr_setstacksize(&attr, 8 << 20);   /* kernels keep register arrays on the stack */
      for (; made < n - 1; made++) {
        worker_arg *wa = malloc(sizeof(*wa));
        if (!wa) break;
        wa->gen = LOAD(&P.gen, RELAXED); wa->self = made;
        if (pthread_create(&P.workers[made], &attr, worker_main, wa) != 0) { free(wa); break; }
#ifdef __linux__
        pthread_setname_np(P.workers[made], "cpu-pool");   /* what `top -H` and /proc/<pid>/task/<tid>/comm show */
#endif
      }
      pthread_attr_destroy(&attr);
    }
    P.nthreads = made + 1;    /* fewer threads than asked if the system refused some: still correct */
    STORE(&P.started, 1, RELEASE);
  }
  pthread_mutex_unlock(&P.init_lock);
}

void cpu_pool_set_spin(int64_t spin_us, int64_t pause_us) {
  cpu_pool_threads();   /* started first: the start reads the environment's values */
  if (spin_us >= 0) P.spin_ns = spin_us * 1000;
  if (pause_us >= 0) g_pause_ns = pause_us * 1000;
}

void cpu_pool_set_backoff(int64_t backoff_us) {
  pthread_mutex_lock(&P.launch_lock);
  if (!LOAD(&P.started, ACQUIRE)) pool_start_locked();   /* the start reads $CPU_BACKOFF_US */
  g_backoff_cur = g_backoff_ns = backoff_us * 1000;
  STORE(&g_serial_until, 0, RELAXED);
  pthread_mutex_unlock(&P.launch_lock);
}

int cpu_pool_sleepers(void) { return LOAD(&P.sleepers, ACQUIRE); }

int cpu_pool_threads(void) {
  if (!LOAD(&P.started, ACQUIRE)) {
    pthread_mutex_lock(&P.launch_lock);
    pool_start_locked();
    pthread_mutex_unlock(&P.launch_lock);
  }
  return P.nthreads;
}

/* the blocks one after another on this thread; under a guard (f) the first fault stops the launch */
static void run_serial(void *fn, int nargs, const u64 *args, int64_t nblocks, fault_rec *f) {
  slots_t sl;
  slots_init(&sl, fn, nargs, args);
  for (int64_t b = 0; b < nblocks; b++) {
    run_block(&sl, b, f);
    if (f && LOAD(&f->set, ACQUIRE) == 2 && cpu_is_interrupt(f->signo)) break;   /* a fault leaves the other blocks to run */
  }
}

/* the first fault of a guarded launch (for a pool job: read before the launch lock is released, another launch resets it) */
static int take_fault(fault_rec *f, int *signo, void **addr, int64_t *block) {
  if (LOAD(&f->set, ACQUIRE) != 2) return 0;
  *signo = f->signo; *addr = f->addr; *block = f->block;
  return -2;
}

/* a cancelled job: interrupt the workers still running one of its blocks (their handler leaves the block, cmdproc.c) */
static void interrupt_workers(uint32_t job) {
  for (int i = 0; i < P.nthreads - 1; i++)
    if (LOAD(&P.running[i], SEQ_CST) == job) pthread_kill(P.workers[i], CPU_INTERRUPT_SIGNAL);
}

static int launch(void *fn, int nargs, const uint64_t *args, int64_t nblocks, int guarded, int *signo, void **addr, int64_t *block) {
  if (nargs < 0 || nargs > CPU_MAX_ARGS || nblocks > INT32_MAX || nblocks < -(int64_t)INT32_MAX) return -1;
  if (nblocks == 0) return 0;
  /* a negative count asks for its blocks one after another on this thread: a kernel too small to pay for waking the pool */
  int serial = nblocks < 0;
  if (serial) nblocks = -nblocks;
  if (guarded) cpu_guard_install();
  if (serial || nblocks == 1 || (LOAD(&P.started, ACQUIRE) && P.nthreads == 1) || backing_off()) {
    /* on this thread alone, holding no lock (one thread per launch may run here at once) */
    fault_rec local = {0, 0, NULL, 0};
    run_serial(fn, nargs, args, nblocks, guarded ? &local : NULL);
    return guarded ? take_fault(&local, signo, addr, block) : 0;
  }
  pthread_mutex_lock(&P.launch_lock);
  if (!LOAD(&P.started, ACQUIRE)) pool_start_locked();
  if (guarded) STORE(&F.set, 0, RELAXED);
  if (P.nthreads == 1) {
    run_serial(fn, nargs, args, nblocks, guarded ? &F : NULL);
    int r = guarded ? take_fault(&F, signo, addr, block) : 0;
    pthread_mutex_unlock(&P.launch_lock);
    return r;
  }
  apart_from_launcher();
  STORE(&P.guarded, guarded, RELAXED);
  STORE(&g_parked, 0, RELAXED);   /* published with the job (gen's store below): its threads poll again afterwards */
  uint32_t job = P.gen + 1;
  STORE(&P.fn, fn, RELAXED);
  STORE(&P.nargs, nargs, RELAXED);
  STORE(&P.args, args, RELAXED);
  STORE(&P.nblocks, nblocks, RELAXED);
  STORE(&P.done, 0, RELAXED);
  for (int t = 0, T = P.nthreads; t < T; t++)
    STORE(&P.shares[t].left, (u64)job << 32 | (u64)(share_start(nblocks, t + 1, T) - share_start(nblocks, t, T)), RELAXED);
  STORE(&P.gen, job, SEQ_CST);
  if (LOAD(&P.sleepers, SEQ_CST) > 0) word_wake(&P.gen, INT_MAX);
  if (guarded) cpu_pool_launching = job;
  int64_t t0 = now_ns();
  work(job, -1);
  int64_t t1 = now_ns();
  /* wait for blocks other threads are still running; a guarded job cancelled meanwhile (an interrupt) has them left */
  uint32_t d;
  int kicked = 0;
  while ((d = LOAD(&P.done, ACQUIRE)) != (uint32_t)nblocks) {
    if (guarded && !kicked && atomic_load(&g_cancel) == job) { interrupt_workers(job); kicked = 1; }
    if (spin_while_equal(&P.done, d, P.spin_ns)) continue;
    STORE(&P.launcher_sleeping, 1, SEQ_CST);
    /* a guarded launch sleeps in slices, so a cancel that arrives meanwhile is seen */
    if ((d = LOAD(&P.done, SEQ_CST)) != (uint32_t)nblocks) word_wait_for(&P.done, d, guarded ? 20000000 : 0);
    STORE(&P.launcher_sleeping, 0, RELAXED);
  }
  cpu_pool_launching = 0;
  int64_t t2 = now_ns();
  note_wait(t1 - t0, t2 - t1, t2);
  if (guarded && atomic_load(&g_cancel) == job) {
    atomic_store(&g_cancel, 0);
    /* cancelled before any block saw the interrupt (the rest were skipped): still a failed launch */
    if (LOAD(&F.set, ACQUIRE) != 2) { F.signo = CPU_INTERRUPT_SIGNAL; F.addr = NULL; F.block = -1; STORE(&F.set, 2, RELEASE); }
  }
  int r = guarded ? take_fault(&F, signo, addr, block) : 0;
  pthread_mutex_unlock(&P.launch_lock);
  return r;
}

int cpu_launch(void *fn, int nargs, const uint64_t *args, int64_t nblocks) { return launch(fn, nargs, args, nblocks, 0, NULL, NULL, NULL); }

int cpu_launch_guarded(void *fn, int nargs, const uint64_t *args, int64_t nblocks, int *signo, void **addr, int64_t *block) {
  return launch(fn, nargs, args, nblocks, 1, signo, addr, block);
}

static void stop_locked(void) {
  if (!LOAD(&P.started, ACQUIRE)) return;
  STORE(&P.stop, 1, RELEASE);
  __atomic_add_fetch(&P.gen, 1, __ATOMIC_SEQ_CST);
  word_wake(&P.gen, INT_MAX);
  for (int i = 0; i < P.nthreads - 1; i++) pthread_join(P.workers[i], NULL);
  free(P.workers);
  free(P.running);
  free(P.shares);
  P.workers = NULL;
  P.running = NULL;
  P.shares = NULL;
  P.nthreads = 0;
  STORE(&P.stop, 0, RELAXED);
  STORE(&P.started, 0, RELEASE);
}

void cpu_pool_shutdown(void) {
  pthread_mutex_lock(&P.launch_lock);
  stop_locked();
  pthread_mutex_unlock(&P.launch_lock);
}

static void at_exit(void) {
  /* a launch still running on another thread at exit: leave its threads to the process's end rather than hang */
  if (pthread_mutex_trylock(&P.launch_lock) != 0) return;
  stop_locked();
  pthread_mutex_unlock(&P.launch_lock);
}

#ifdef CPU_NATIVE_SOURCE_HASH
/* set by setup.py when the library is built at install time: the runtime compares it with the installed sources' hash */
const char *cpu_native_source_hash(void) { return CPU_NATIVE_SOURCE_HASH; }
#endif
