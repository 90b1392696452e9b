/* The CPU plugin's command processor: one worker thread per HCQ queue decodes packets from the queue's ring and runs them.

Command format (little endian). Every packet is a whole number of 8-byte words, so its uint64 fields stay 8-byte aligned
inside a packet and inside the ring. Word 0 is the header: opcode in bits 0-15, packet length in dwords in bits 16-31
(header included); an unknown opcode or a length other than the one below is a fault.

  opcode        dwords  fields after the header (byte offset in the packet)
  1 LAUNCH      8       u32 nargs (4), u64 fn (8), u64 kernargs (16), u64 nblocks (24)
                        -> cpu_launch(fn, nargs, (uint64_t *)kernargs, nblocks): one uint64 slot per kernel argument
  2 COPY        8       u32 0 (4), u64 dst (8), u64 src (16), u64 nbytes (24)                    -> memmove
  3 WAIT        6       u32 0 (4), u64 signal (8), u64 value (16)   -> until *(uint64_t *)signal >= value (acquire load)
  4 SIGNAL      6       u32 0 (4), u64 signal (8), u64 value (16)   -> *(uint64_t *)signal = value (release store)
  5 TIMESTAMP   4       u32 0 (4), u64 addr (8)                     -> *(uint64_t *)addr = CLOCK_MONOTONIC in ns
  6 BARRIER     2       u32 0 (4)                                   -> nothing: each packet finishes before the next starts

Ring protocol: the ring is `ring_size` bytes (a power of two). Offsets are byte counts since the queue was created (they never
wrap); a packet at offset o starts at ring[o % ring_size] and may wrap around the end. The host writes packets, then stores the
offset just past the last one into the doorbell (a uint64). The worker runs packets until its read offset (cmdproc_rptr) reaches
the doorbell; the host must not write more than ring_size bytes ahead of cmdproc_rptr.

Faults: SIGSEGV, SIGBUS, SIGFPE and SIGILL raised on the worker thread while it runs a packet are caught (handler on an alternate
stack, siglongjmp back into the worker) and recorded with the queue, packet offset and opcode; so are malformed packets. After a
fault in a well-formed packet the worker drops the LAUNCH, COPY and TIMESTAMP packets that follow until it has run a SIGNAL or
reached the doorbell value it had read (the rest of that submit); WAITs and SIGNALs still run so that timelines keep advancing and
later submits are not stuck. After a malformed packet, packet boundaries are unknown, so it skips to that doorbell value.
A one-block LAUNCH runs on the worker itself and is guarded; a kernel launched over several blocks runs on the thread pool with
cpu_launch_guarded, where each block is guarded on whichever thread runs it (a faulting block is abandoned, the others finish).
A WAIT never gives up by itself; the host may abort it (cmdproc_abort_wait) after its own timeout, which counts as a fault.

Stopping a kernel: a LAUNCH still running can be stopped on whichever thread runs it. cmdproc_interrupt (the host's timeout,
or Ctrl-C while the host waits) and the queue's worker, when a host thread draining the queue runs past its wait's deadline
(HCQ_TIMEOUT: that thread can't watch the clock while it runs the kernel), send CPU_INTERRUPT_SIGNAL to it; SIGINT arriving on
a thread that runs a kernel does the same after Python's handler ran. The guard jumps out of the kernel (a multi-block launch
is cancelled: blocks not started are skipped, running ones are interrupted), and the packet is reported like a fault. Limits:
the kernel is left at an arbitrary point, so its output is incomplete (the error says so); a kernel that blocks signals or
sits in a system call leaves only when that returns; a fault on a thread with no alternate stack (a host thread) is caught
unless it is a stack overflow.

Sleeping: an idle worker spins briefly, then sleeps on a process-wide futex word with a timeout growing to 100 ms (a safety net,
~10 wake-ups a second; at 2 ms it woke ~475 times a second, each taking the core from whatever ran there). The host kicks it
(cmdproc_kick) after a submit it does not wait for (core's HCQDevice.submitted_without_wait), when a wait finds work it cannot
run itself, when its drain leaves packets behind, and at synchronize; a submit the host waits for at once runs on the host
(below) and wakes no worker. While a host runs its queue, a worker sleeps until that host's deadline (at most 100 ms). Threads
waiting on a signal value sleep on another word, which SIGNAL packets and faults bump, with a timeout growing to 2 ms (a WAIT may
read memory that another device writes), so most waits end early and a submit does not wake idle workers.

Host draining: a queue is run by whoever owns it (q->owner): its worker, or a host thread inside cmdproc_wait_signal, which runs
the packets of every queue nobody owns before it waits. The host has usually just rung the doorbell and would otherwise hand the
work to a sleeping worker and sleep itself: two thread wake-ups per submit, hundreds of microseconds on a busy machine. The host
stops before a WAIT that is not satisfied yet (the worker blocks in those) and runs packets under the same fault guard. */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include "pool.h"

enum { OP_LAUNCH = 1, OP_COPY = 2, OP_WAIT = 3, OP_SIGNAL = 4, OP_TIMESTAMP = 5, OP_BARRIER = 6, OP_MAX = 7 };
static const uint32_t op_dwords[OP_MAX] = {0, 8, 8, 6, 6, 4, 2};
static const char *const op_names[OP_MAX] = {"?", "LAUNCH", "COPY", "WAIT", "SIGNAL", "TIMESTAMP", "BARRIER"};
#define MAX_PACKET_DWORDS 8
#define REPORT_LEN 512

typedef struct cmdproc_queue {
  char name[48];
  uint8_t *ring;
  uint64_t ring_size;
  const uint64_t *doorbell;
  _Atomic uint64_t rptr;            /* byte offset of the next packet to run */
  _Atomic int stop;
  _Atomic uint64_t abort_at;        /* 1 + offset of the WAIT packet the host gave up on, or 0 */
  _Atomic int busy;                 /* 0 idle, 1 running a packet, 2 blocked in a WAIT */
  _Atomic uint64_t cur_offset;      /* offset of the packet being run (valid while busy) */
  _Atomic uint32_t cur_opcode;
  _Atomic uint64_t wait_addr, wait_value;
  _Atomic int owner;                /* 1 while a thread (the worker or a draining host) runs this queue's packets */
  int draining;                     /* after a fault: drop LAUNCH/COPY/TIMESTAMP until a SIGNAL or offset drain_end (owner only) */
  uint64_t drain_end;
  pthread_mutex_t lock;             /* guards the report */
  uint64_t faults;                  /* how many faults so far */
  uint64_t fault_offset;            /* offset and opcode of the latest faulting packet */
  uint32_t fault_opcode;
  char report[REPORT_LEN];          /* the latest fault */
  _Atomic int stop_req;             /* why the packet at stop_at - 1 must stop (STOP_TIMEOUT, STOP_INTERRUPT), or 0 */
  _Atomic uint64_t stop_at;
  _Atomic int64_t deadline_ns;      /* while a host runs the queue: when its wait gives up (CLOCK_MONOTONIC), or 0 */
  pthread_t runner;                 /* the thread that owns the queue now (valid while owner is 1) */
  pthread_t thread;
  void *altstack;
} cmdproc_queue;

/* *** sleeping: waiters spin briefly, then sleep on a process-wide futex word with a growing timeout. Everything that can make
   a waiter's condition true (a SIGNAL packet, the host's cmdproc_kick) bumps its word, so waits usually end early; the timeout
   covers memory written without a bump: a signal another device writes (SLEEP_MAX_NS), and a doorbell rung by core's submit
   program that no kick followed (IDLE_SLEEP_MAX_NS: the host kicks after every submit it does not wait for, so this is only a
   safety net). *** */
#define SPIN_ITERS 1000
#define YIELD_ITERS 50
#define SLEEP_MIN_NS 20000L
#define SLEEP_MAX_NS 2000000L
#define IDLE_SLEEP_MAX_NS 100000000L   /* a worker with no packets */
/* how long a worker leaves new packets to the host's wait (host draining); cmdproc_set_handoff changes it */
static _Atomic uint64_t g_handoff_ns = 200000;
/* two futex words: `g_sig` for threads waiting on a signal value (a worker in a WAIT, a host in cmdproc_wait_signal), bumped
   by SIGNAL packets and faults; `g_work` for idle workers, bumped only by the host (kick, destroy). A SIGNAL that woke idle
   workers too would have the scheduler switch to them on every submit, away from the host thread that is running it. */
typedef struct { _Atomic uint32_t epoch; _Atomic int sleepers; } waitq;
static waitq g_sig, g_work;
static _Atomic uint64_t g_faults;   /* faults recorded on any queue, so a host wait can stop early */

/* every live queue, for host draining; cmdproc_destroy removes a queue under the lock, so a host never runs a freed one */
#define MAX_QUEUES 256
static pthread_mutex_t g_reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct cmdproc_queue *g_queues[MAX_QUEUES];
static int g_nqueues;
/* in a forked child the parent's workers are gone and its queues are unusable (the host recreates them): forget them all */
static void reg_after_fork(void) { pthread_mutex_init(&g_reg_lock, NULL); g_nqueues = 0; }

static void wake(waitq *w) {
  atomic_fetch_add(&w->epoch, 1);
  if (atomic_load(&w->sleepers) > 0) syscall(SYS_futex, &w->epoch, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}
static void wake_all(void) {
  wake(&g_sig);
  wake(&g_work);
}

typedef struct { int spins; long sleep_ns; } backoff;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

/* sleeps on `w` for at most `ns` (< 1 s) unless its epoch moved on from `epoch`, which must be read before the condition is
   checked, so a wake between the check and the sleep is not lost */
static void sleep_on(waitq *w, uint32_t epoch, long ns) {
  struct timespec ts = {0, ns};
  atomic_fetch_add(&w->sleepers, 1);
  syscall(SYS_futex, &w->epoch, FUTEX_WAIT_PRIVATE, epoch, &ts, NULL, 0);
  atomic_fetch_sub(&w->sleepers, 1);
}

static void backoff_wait(backoff *b, waitq *w, uint32_t epoch, long max_ns) {
  if (b->spins < SPIN_ITERS) { b->spins++; cpu_relax(); return; }
  /* then yield for a while: on a busy machine the thread we wait for may need this core */
  if (b->spins < SPIN_ITERS + YIELD_ITERS) { b->spins++; sched_yield(); return; }
  sleep_on(w, epoch, b->sleep_ns);
  b->sleep_ns = b->sleep_ns * 2 > max_ns ? max_ns : b->sleep_ns * 2;
}

/* *** faults *** */
static __thread sigjmp_buf *t_guard __attribute__((tls_model("initial-exec")));
static __thread int t_signo __attribute__((tls_model("initial-exec")));
static __thread void *t_addr __attribute__((tls_model("initial-exec")));
static __thread int t_host __attribute__((tls_model("initial-exec")));   /* set while a host thread drains a queue */
static __thread cmdproc_queue *t_queue __attribute__((tls_model("initial-exec")));   /* the queue this thread runs now */
static struct sigaction g_old[NSIG];
static const int g_fault_signals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL};
/* every signal on_signal handles: the faults, SIGINT (Ctrl-C during a kernel) and the interrupt the host sends */
static const int g_guard_signals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGINT, CPU_INTERRUPT_SIGNAL};
enum { STOP_TIMEOUT = 1, STOP_INTERRUPT = 2 };

/* the handler that was there before us, called as the kernel would have called it */
static void chain(int sig, siginfo_t *info, void *uctx) {
  struct sigaction *old = &g_old[sig];
  if (old->sa_flags & SA_SIGINFO) { if (old->sa_sigaction) old->sa_sigaction(sig, info, uctx); }
  else if (old->sa_handler != SIG_DFL && old->sa_handler != SIG_IGN) old->sa_handler(sig);
}

/* Faults and interrupts of a thread running a guarded kernel jump back to its guard: t_guard (a packet of the command
   processor) or cpu_pool_guard (a block of a guarded launch, pool.c). An interrupt also cancels the pool job the thread
   runs or launched, so the blocks on other threads stop too. Everything else goes to the handler that was there before
   (Python's SIGINT handler is always called first: it makes the interpreter raise KeyboardInterrupt when the call returns). */
static void on_signal(int sig, siginfo_t *info, void *uctx) {
  int interrupt = cpu_is_interrupt(sig);
  if (sig == SIGINT) {
    struct sigaction *old = &g_old[sig];
    if (!(old->sa_flags & SA_SIGINFO) && old->sa_handler == SIG_IGN) return;
    if (!(old->sa_flags & SA_SIGINFO) && old->sa_handler == SIG_DFL) { signal(sig, SIG_DFL); raise(sig); return; }
    chain(sig, info, uctx);
  } else if (sig == CPU_INTERRUPT_SIGNAL) {
    /* ours only when something asked this thread to stop: its queue, or the pool job it runs or waits for */
    cmdproc_queue *q = t_queue;
    uint32_t job = cpu_pool_job ? cpu_pool_job : cpu_pool_launching;
    if (q && atomic_load(&q->stop_req)) {
      if (atomic_load(&q->stop_at) != atomic_load(&q->cur_offset) + 1) return;   /* late: that packet is over */
    } else if (!job) { chain(sig, info, uctx); return; }
  }
  if (interrupt && (cpu_pool_job || cpu_pool_launching)) cpu_pool_cancel(cpu_pool_job ? cpu_pool_job : cpu_pool_launching);
  /* a block of a guarded multi-block launch, on any pool thread (cpu_launch_guarded, pool.c) */
  sigjmp_buf *g = cpu_pool_guard;
  if (g != NULL) {
    cpu_pool_guard = NULL;
    cpu_pool_signo = sig;
    cpu_pool_addr = info && !interrupt ? info->si_addr : NULL;
    siglongjmp(*g, 1);
  }
  if ((g = t_guard) != NULL) {
    t_guard = NULL;
    t_signo = sig;
    t_addr = info && !interrupt ? info->si_addr : NULL;
    siglongjmp(*g, 1);
  }
  if (interrupt) return;   /* no kernel on this thread to leave (a launcher waiting for its job sees the cancel) */
  /* a fault outside any kernel: behave as if we were never installed (Python's faulthandler, or the default action) */
  struct sigaction *old = &g_old[sig];
  if ((old->sa_flags & SA_SIGINFO) ? old->sa_sigaction != NULL : (old->sa_handler != SIG_DFL && old->sa_handler != SIG_IGN)) {
    chain(sig, info, uctx);
    return;
  }
  /* returning re-runs the faulting instruction, which now gets the default action */
  signal(sig, SIG_DFL);
}

/* installs on_signal where it is not the handler (first use, or someone such as Python's faulthandler or signal.signal
   replaced it since: then that handler becomes the one we chain to) */
static void install_handlers(void) {
  static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
  struct sigaction sa, cur;
  memset(&sa, 0, sizeof(sa));
  sa.sa_sigaction = on_signal;
  /* the guard unblocks the signal again after jumping out (unblock_faults); SA_RESTART: an interrupted system call elsewhere
     (a host thread's sleep) goes on */
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  pthread_mutex_lock(&lock);
  for (size_t i = 0; i < sizeof(g_guard_signals) / sizeof(g_guard_signals[0]); i++) {
    int sig = g_guard_signals[i];
    if (sigaction(sig, NULL, &cur) == 0 && (cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == on_signal) continue;
    sigaction(sig, &sa, &g_old[sig]);
  }
  pthread_mutex_unlock(&lock);
}

static _Atomic int g_installed;
void cpu_guard_install(void) { if (!atomic_load(&g_installed)) { install_handlers(); atomic_store(&g_installed, 1); } }
void cpu_guard_check(void) { install_handlers(); atomic_store(&g_installed, 1); }

/* why a kernel stopped, for a report: the signal, or the reason the host gave for interrupting it */
static const char *stop_reason(cmdproc_queue *q, int sig) {
  if (sig == SIGINT) return "interrupted by SIGINT (Ctrl-C); the kernel was stopped";
  if (sig == CPU_INTERRUPT_SIGNAL) {
    int req = q ? atomic_load(&q->stop_req) : 0;
    return req == STOP_TIMEOUT ? "stopped: it ran past the host's deadline (HCQ_TIMEOUT)" : "interrupted by the host; the kernel was stopped";
  }
  return NULL;
}

static void record(cmdproc_queue *q, uint64_t off, uint32_t op, const char *what) {
  pthread_mutex_lock(&q->lock);
  q->faults++;
  q->fault_offset = off;
  q->fault_opcode = op;
  snprintf(q->report, REPORT_LEN, "%s: packet at offset %llu (ring byte %llu), opcode %u (%s): %s", q->name, (unsigned long long)off,
           (unsigned long long)(off & (q->ring_size - 1)), op, op < OP_MAX ? op_names[op] : "unknown", what);
  pthread_mutex_unlock(&q->lock);
  atomic_fetch_add(&g_faults, 1);
  wake(&g_sig);   /* a host waiting on a signal may now report the fault */
}

/* *** packets *** */
static inline uint64_t rd64(const uint32_t *p, int dw) { uint64_t v; memcpy(&v, p + dw, 8); return v; }

/* runs one decoded packet; returns 0, 1 (a host's WAIT that is not satisfied: not run), or -1 (with `what` filled) on a fault it
   detected itself. Signals longjmp out instead. */
static int run_packet(cmdproc_queue *q, const uint32_t *p, uint32_t op, char *what) {
  switch (op) {
  case OP_LAUNCH: {
    int nargs = (int)p[1];
    int64_t nblocks = (int64_t)rd64(p, 6);
    void *fn = (void *)(uintptr_t)rd64(p, 2);
    const uint64_t *args = (const uint64_t *)(uintptr_t)rd64(p, 4);
    int r;
    /* one block, or blocks asked to run serially (a negative count), run right here, holding no lock */
    if (nblocks <= 1) r = nblocks == 0 ? 0 : cpu_launch(fn, nargs, args, nblocks);
    else {
      /* every block runs under the pool's own guard (this thread's is lifted: the pool holds its launch lock, so jumping
         out of the launch would deadlock later ones); a faulting block is abandoned, the others finish */
      sigjmp_buf *g = t_guard;
      int signo = 0; void *addr = NULL; int64_t block = -1;
      t_guard = NULL;
      r = cpu_launch_guarded(fn, nargs, args, nblocks, &signo, &addr, &block);
      t_guard = g;
      const char *why = r == -2 ? stop_reason(q, signo) : NULL;
      if (why) { snprintf(what, REPORT_LEN, "%s (kernel at %p, %lld blocks)", why, fn, (long long)nblocks); return -1; }
      if (r == -2) {
        snprintf(what, REPORT_LEN, "signal %d (%s) at address %p in block %lld of %lld of the kernel at %p", signo, strsignal(signo), addr,
                 (long long)block, (long long)nblocks, fn);
        return -1;
      }
    }
    if (r != 0) { snprintf(what, REPORT_LEN, "cpu_launch refused nargs %d, nblocks %lld", nargs, (long long)nblocks); return -1; }
    return 0;
  }
  case OP_COPY: memmove((void *)(uintptr_t)rd64(p, 2), (const void *)(uintptr_t)rd64(p, 4), (size_t)rd64(p, 6)); return 0;
  case OP_WAIT: {
    const uint64_t *sig = (const uint64_t *)(uintptr_t)rd64(p, 2);
    uint64_t want = rd64(p, 4);
    if (t_host && __atomic_load_n(sig, __ATOMIC_ACQUIRE) < want) return 1;   /* not ready: a host never blocks in a WAIT */
    atomic_store(&q->wait_addr, (uint64_t)(uintptr_t)sig);
    atomic_store(&q->wait_value, want);
    atomic_store(&q->busy, 2);
    backoff b = {0, SLEEP_MIN_NS};
    for (;;) {
      uint32_t e = atomic_load(&g_sig.epoch);
      if (__atomic_load_n(sig, __ATOMIC_ACQUIRE) >= want) break;
      if (atomic_load(&q->stop)) return 0;
      if (atomic_load(&q->abort_at) == atomic_load(&q->cur_offset) + 1) {
        atomic_store(&q->abort_at, 0);
        snprintf(what, REPORT_LEN, "aborted by the host: signal 0x%llx is %llu, waited for >= %llu", (unsigned long long)(uintptr_t)sig,
                 (unsigned long long)__atomic_load_n(sig, __ATOMIC_ACQUIRE), (unsigned long long)want);
        return -1;
      }
      backoff_wait(&b, &g_sig, e, SLEEP_MAX_NS);
    }
    atomic_store(&q->busy, 1);
    return 0;
  }
  case OP_SIGNAL:
    __atomic_store_n((uint64_t *)(uintptr_t)rd64(p, 2), rd64(p, 4), __ATOMIC_RELEASE);
    wake(&g_sig);
    return 0;
  case OP_TIMESTAMP: {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    memcpy((void *)(uintptr_t)rd64(p, 2), &ns, 8);
    return 0;
  }
  case OP_BARRIER: return 0;  /* packets already run one after another, each complete before the next */
  }
  return 0;
}

static const char *signal_name(int sig) {
  switch (sig) {
  case SIGSEGV: return "SIGSEGV (invalid memory access)";
  case SIGBUS: return "SIGBUS (bad memory access)";
  case SIGFPE: return "SIGFPE (arithmetic fault, e.g. integer division by zero)";
  case SIGILL: return "SIGILL (illegal instruction: compiled for another CPU?)";
  }
  return "signal";
}

/* runs one packet with the fault guard; 0 ok, 1 not run (see run_packet), -1 faulted (recorded) */
static int guarded(cmdproc_queue *q, const uint32_t *p, uint32_t op, uint64_t off) {
  char what[REPORT_LEN];
  sigjmp_buf jb;
  what[0] = 0;
  /* no signal mask saved (that is a system call per packet): the rare fault path unblocks the signal itself */
  if (sigsetjmp(jb, 0) == 0) {
    t_guard = &jb;
    int r = run_packet(q, p, op, what);
    t_guard = NULL;
    if (r >= 0) return r;
  } else {
    cpu_unblock_faults();
    const char *why = stop_reason(q, t_signo);
    if (why) snprintf(what, REPORT_LEN, "%s", why);
    else snprintf(what, REPORT_LEN, "%s at address %p", signal_name(t_signo), t_addr);
  }
  record(q, off, op, what);
  atomic_store(&q->stop_req, 0);
  return -1;
}

static inline uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int try_own(cmdproc_queue *q) {
  int z = 0;
  if (!atomic_compare_exchange_strong(&q->owner, &z, 1)) return 0;
  q->runner = pthread_self();
  t_queue = q;
  return 1;
}
static void disown(cmdproc_queue *q) {
  t_queue = NULL;
  atomic_store(&q->stop_req, 0);
  atomic_store_explicit(&q->owner, 0, memory_order_release);
}

/* runs the owned queue's packets up to the doorbell; a host (t_host) stops before a WAIT that is not satisfied. Returns the
   number of packets run (skipped ones included). */
static int drain(cmdproc_queue *q) {
  uint64_t mask = q->ring_size - 1;
  uint64_t end = __atomic_load_n(q->doorbell, __ATOMIC_ACQUIRE), rp = atomic_load(&q->rptr);
  if (end == rp) return 0;
  if (end - rp > q->ring_size) {
    char what[128];
    snprintf(what, sizeof(what), "doorbell %llu is more than the ring size (%llu) ahead; skipped to it", (unsigned long long)end,
             (unsigned long long)q->ring_size);
    record(q, rp, 0, what);
    atomic_store(&q->rptr, end);
    return 1;
  }
  int n = 0;
  while (rp != end && !atomic_load(&q->stop)) {
    uint32_t pkt[MAX_PACKET_DWORDS];
    memcpy(pkt, q->ring + (rp & mask), 4);
    uint32_t op = pkt[0] & 0xffff, len = pkt[0] >> 16;
    atomic_store(&q->cur_offset, rp);
    atomic_store(&q->cur_opcode, op);
    char what[160];
    what[0] = 0;
    if (op == 0 || op >= OP_MAX) snprintf(what, sizeof(what), "unknown opcode (header 0x%08x)", pkt[0]);
    else if (len != op_dwords[op]) snprintf(what, sizeof(what), "length %u dwords, a %s packet has %u", len, op_names[op], op_dwords[op]);
    else if (end - rp < (uint64_t)len * 4) snprintf(what, sizeof(what), "the packet runs past the doorbell (%llu)", (unsigned long long)end);
    if (what[0]) {  /* malformed: packet boundaries are lost, skip what the host has submitted */
      record(q, rp, op, what);
      atomic_store(&q->rptr, rp = end);
      return n + 1;
    }
    for (uint32_t i = 1; i < len; i++) memcpy(pkt + i, q->ring + ((rp + 4 * i) & mask), 4);
    if (q->draining && rp >= q->drain_end) q->draining = 0;   /* the faulted submit is over */
    atomic_store(&q->busy, 1);
    int r = 0;
    if (!(q->draining && (op == OP_LAUNCH || op == OP_COPY || op == OP_TIMESTAMP)) && (r = guarded(q, pkt, op, rp)) < 0) {
      q->draining = 1;
      q->drain_end = end;
    }
    atomic_store(&q->busy, 0);
    if (r > 0) break;   /* a host at a WAIT that is not ready: leave it (and the rest) for later or for the worker */
    if (op == OP_SIGNAL) q->draining = 0;
    rp += (uint64_t)len * 4;
    atomic_store_explicit(&q->rptr, rp, memory_order_release);
    n++;
  }
  return n;
}

static void *worker(void *arg) {
  cmdproc_queue *q = arg;
  stack_t ss = {.ss_sp = q->altstack, .ss_size = SIGSTKSZ * 4 > 65536 ? SIGSTKSZ * 4 : 65536, .ss_flags = 0};
  sigaltstack(&ss, NULL);
  sigset_t fault_set;
  sigemptyset(&fault_set);
  for (size_t i = 0; i < sizeof(g_fault_signals) / sizeof(g_fault_signals[0]); i++) sigaddset(&fault_set, g_fault_signals[i]);
  pthread_sigmask(SIG_UNBLOCK, &fault_set, NULL);
  t_guard = NULL;   /* touch the TLS block here, never first inside the signal handler */
  /* b: idle, its sleep grows to IDLE_SLEEP_MAX_NS; h: packets in sight that the host may take, its sleep grows to SLEEP_MAX_NS
     from each new doorbell value on (a kicked worker looks again soon; a host's drain seen on a timeout keeps b's long sleep) */
  backoff b = {0, SLEEP_MIN_NS}, h = b;
  uint64_t seen_end = 0, seen_ns = 0;
  while (!atomic_load(&q->stop)) {
    uint32_t e = atomic_load(&g_work.epoch);
    uint64_t end = __atomic_load_n(q->doorbell, __ATOMIC_ACQUIRE), rp = atomic_load(&q->rptr);
    if (end == rp) { backoff_wait(&b, &g_work, e, IDLE_SLEEP_MAX_NS); continue; }
    /* new work: the host that rang the doorbell is about to wait and run it on its own thread, which costs no thread
       hand-off; the worker takes it only when nobody did within g_handoff_ns (or a host is running it right now) */
    uint64_t now = now_ns();
    if (end != seen_end) { seen_end = end; seen_ns = now; h = (backoff){SPIN_ITERS + YIELD_ITERS, SLEEP_MIN_NS}; }
    if (now - seen_ns < atomic_load(&g_handoff_ns) || !try_own(q)) {
      /* a host running this queue's packets cannot watch the time itself: stop its packet once its wait's deadline passed */
      int owned = atomic_load(&q->owner);
      int64_t dl = atomic_load(&q->deadline_ns);
      if (dl && (int64_t)now >= dl && owned && atomic_load(&q->busy) == 1 && !atomic_load(&q->stop_req)) {
        atomic_store(&q->stop_at, atomic_load(&q->cur_offset) + 1);
        atomic_store(&q->stop_req, STOP_TIMEOUT);
        pthread_kill(q->runner, CPU_INTERRUPT_SIGNAL);
      }
      /* a host runs the packets: nothing to do here before its deadline, and a host that leaves packets behind wakes this
         worker (host_drain_all). Polling instead woke it every 2 ms or less through the host's kernel, each time taking a core
         from the kernel's threads under CFS (a 1024^3 matmul on 2 cores: ~14 wake-ups a call) */
      if (owned && dl > (int64_t)now) sleep_on(&g_work, e, dl - (int64_t)now < IDLE_SLEEP_MAX_NS ? (long)(dl - (int64_t)now) : IDLE_SLEEP_MAX_NS);
      else backoff_wait(&h, &g_work, e, SLEEP_MAX_NS);
      continue;
    }
    b.spins = 0; b.sleep_ns = SLEEP_MIN_NS;
    drain(q);
    disown(q);
  }
  return NULL;
}

/* a host's pass over every queue nobody owns: runs what it can; returns the number of packets run. `deadline_ns`: when the
   host's wait gives up (0: never); the queue's worker stops a packet that runs past it (the host can't while it runs it) */
static int host_drain_all(int64_t deadline_ns) {
  int n = 0;
  /* the fault handlers are process-wide: cmdproc_create installed them (and re-installs them over a replacement, such as
     Python's faulthandler enabled later), so a kernel's fault on this thread reaches on_fault as on a worker */
  if (pthread_mutex_trylock(&g_reg_lock) != 0) return 0;   /* another host is draining */
  for (int i = 0; i < g_nqueues; i++) {
    cmdproc_queue *q = g_queues[i];
    if (__atomic_load_n(q->doorbell, __ATOMIC_ACQUIRE) == atomic_load(&q->rptr)) continue;
    if (!try_own(q)) continue;
    t_host = 1;
    atomic_store(&q->deadline_ns, deadline_ns);
    int ran = drain(q);
    n += ran;
    atomic_store(&q->deadline_ns, 0);
    t_host = 0;
    disown(q);
    /* packets left after some ran (submitted meanwhile, or a WAIT not satisfied yet): the worker, asleep while this thread ran
       the queue, takes them. (A WAIT at the head that nothing ran before: the waiting host wakes it once, cmdproc_wait_signal) */
    if (ran && __atomic_load_n(q->doorbell, __ATOMIC_ACQUIRE) != atomic_load(&q->rptr)) wake(&g_work);
  }
  pthread_mutex_unlock(&g_reg_lock);
  return n;
}

/* *** the host's interface (ctypes) *** */
static void register_fork_handler(void) { pthread_atfork(NULL, NULL, reg_after_fork); }

void *cmdproc_create(const char *name, void *ring, uint64_t ring_size, const uint64_t *doorbell) {
  if (ring_size == 0 || (ring_size & (ring_size - 1)) != 0) return NULL;
  install_handlers();
  cmdproc_queue *q = calloc(1, sizeof(*q));
  if (q == NULL) return NULL;
  snprintf(q->name, sizeof(q->name), "%s", name);
  q->ring = ring;
  q->ring_size = ring_size;
  q->doorbell = doorbell;
  atomic_store(&q->rptr, __atomic_load_n(doorbell, __ATOMIC_ACQUIRE));
  pthread_mutex_init(&q->lock, NULL);
  q->altstack = malloc(SIGSTKSZ * 4 > 65536 ? SIGSTKSZ * 4 : 65536);
  pthread_attr_t attr;   /* the worker runs kernels, whose packed panels live on its stack: the pool's 8 MiB, not a default */
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 8 << 20);
  int made = q->altstack != NULL && pthread_create(&q->thread, &attr, worker, q) == 0;
  pthread_attr_destroy(&attr);
  if (!made) {
    free(q->altstack);
    free(q);
    return NULL;
  }
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, register_fork_handler);
  pthread_mutex_lock(&g_reg_lock);
  if (g_nqueues < MAX_QUEUES) g_queues[g_nqueues++] = q;   /* beyond that, the worker alone runs it */
  pthread_mutex_unlock(&g_reg_lock);
  return q;
}

/* stops the worker (a WAIT in progress returns at once), joins it and frees the queue */
void cmdproc_destroy(void *h) {
  cmdproc_queue *q = h;
  if (q == NULL) return;
  pthread_mutex_lock(&g_reg_lock);
  for (int i = 0; i < g_nqueues; i++)
    if (g_queues[i] == q) { g_queues[i] = g_queues[--g_nqueues]; break; }
  pthread_mutex_unlock(&g_reg_lock);
  atomic_store(&q->stop, 1);
  wake_all();
  pthread_join(q->thread, NULL);
  pthread_mutex_destroy(&q->lock);
  free(q->altstack);
  free(q);
}

uint64_t cmdproc_rptr(void *h) { return atomic_load(&((cmdproc_queue *)h)->rptr); }
void cmdproc_kick(void) { wake_all(); }
/* stops the LAUNCH the queue runs right now (if any), whichever thread runs it: it is abandoned and reported as a fault
   ("interrupted by the host", or with `timeout` "ran past the host's deadline"); the packets after it run as after a fault.
   Returns 1 when a launch was running. */
int cmdproc_interrupt(void *h, int timeout) {
  cmdproc_queue *q = h;
  if (!atomic_load(&q->owner) || atomic_load(&q->busy) != 1 || atomic_load(&q->cur_opcode) != OP_LAUNCH) return 0;
  atomic_store(&q->stop_at, atomic_load(&q->cur_offset) + 1);
  atomic_store(&q->stop_req, timeout ? STOP_TIMEOUT : STOP_INTERRUPT);
  pthread_kill(q->runner, CPU_INTERRUPT_SIGNAL);
  return 1;
}

/* makes the WAIT the queue is blocked in right now (if any) fail as a fault; a later WAIT is not affected */
void cmdproc_abort_wait(void *h) {
  cmdproc_queue *q = h;
  if (atomic_load(&q->busy) != 2) return;
  atomic_store(&q->abort_at, atomic_load(&q->cur_offset) + 1);
  wake(&g_sig);
}

/* copies the latest fault report into buf (and its packet offset and opcode); returns the number of faults so far */
uint64_t cmdproc_error(void *h, char *buf, int size, uint64_t *offset, uint32_t *opcode) {
  cmdproc_queue *q = h;
  pthread_mutex_lock(&q->lock);
  uint64_t n = q->faults;
  if (size > 0) snprintf(buf, (size_t)size, "%s", q->report);
  if (offset) *offset = q->fault_offset;
  if (opcode) *opcode = q->fault_opcode;
  pthread_mutex_unlock(&q->lock);
  return n;
}

/* what the worker is doing right now, for a host-side timeout message */
void cmdproc_describe(void *h, char *buf, int size) {
  cmdproc_queue *q = h;
  int busy = atomic_load(&q->busy);
  uint64_t off = atomic_load(&q->cur_offset), rp = atomic_load(&q->rptr), db = __atomic_load_n(q->doorbell, __ATOMIC_ACQUIRE);
  uint32_t op = atomic_load(&q->cur_opcode);
  if (busy == 2) {
    const uint64_t *sig = (const uint64_t *)(uintptr_t)atomic_load(&q->wait_addr);
    snprintf(buf, (size_t)size, "%s is blocked in the WAIT packet at offset %llu: signal 0x%llx is %llu, waiting for >= %llu", q->name,
             (unsigned long long)off, (unsigned long long)(uintptr_t)sig, (unsigned long long)__atomic_load_n(sig, __ATOMIC_ACQUIRE),
             (unsigned long long)atomic_load(&q->wait_value));
  } else if (busy == 1) snprintf(buf, (size_t)size, "%s is running the %s packet at offset %llu", q->name, op < OP_MAX ? op_names[op] : "?",
                                 (unsigned long long)off);
  else snprintf(buf, (size_t)size, "%s is idle (read offset %llu, doorbell %llu)", q->name, (unsigned long long)rp, (unsigned long long)db);
}

/* sets how long a worker leaves new packets to the host's wait; returns the old value. A test that needs the waiting host to run
   a queue's packets, whatever the load, sets one longer than it can take to start the wait */
uint64_t cmdproc_set_handoff(uint64_t ns) { return atomic_exchange(&g_handoff_ns, ns); }

/* the host runs what it can of every queue nobody runs right now (host draining); returns the number of packets run */
int cmdproc_drain(void) { return host_drain_all(0); }

/* how many queues have packets their worker or a host has not run yet (-1: some queue is not known to the registry) */
int cmdproc_pending(void) {
  int n = 0;
  pthread_mutex_lock(&g_reg_lock);
  if (g_nqueues >= MAX_QUEUES) n = -1;
  else for (int i = 0; i < g_nqueues; i++)
    n += __atomic_load_n(g_queues[i]->doorbell, __ATOMIC_ACQUIRE) != atomic_load(&g_queues[i]->rptr);
  pthread_mutex_unlock(&g_reg_lock);
  return n;
}

/* the fast path of a synchronize in one call: 1 when no queue of the process has pending packets and no fault was recorded
   since `faults` (the count when the caller last read the reports), else 0 */
int cmdproc_idle_clean(uint64_t faults) { return atomic_load(&g_faults) == faults && cmdproc_pending() == 0; }

/* faults recorded on any queue so far (pass it to cmdproc_wait_signal after checking the reports) */
uint64_t cmdproc_faults(void) { return atomic_load(&g_faults); }

/* the host's wait: until *signal >= value (0), `timeout_ns` passed (1), or the process-wide fault count differs from `faults`
   (2). It runs what it can of the queues itself first (host draining, above); when that is not enough it wakes the workers,
   which may be asleep with work it could not take (a WAIT). ctypes drops the GIL here. */
int cmdproc_wait_signal(const uint64_t *signal, uint64_t value, int64_t timeout_ns, uint64_t faults, int64_t deadline_ns) {
  struct timespec t0, t;
  int woke = 0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  backoff b = {0, SLEEP_MIN_NS};
  for (;;) {
    uint32_t e = atomic_load(&g_sig.epoch);
    /* run what is pending first: then a wait returns only after the work submitted before it ran (when this thread could run
       it), even if the signal already held the value */
    if (host_drain_all(deadline_ns) > 0) { b.spins = 0; b.sleep_ns = SLEEP_MIN_NS; continue; }
    if (__atomic_load_n(signal, __ATOMIC_ACQUIRE) >= value) return 0;
    if (atomic_load(&g_faults) != faults) return 2;
    if (!woke) { wake(&g_work); woke = 1; }   /* what is left (a WAIT not satisfied yet) may need a worker */
    clock_gettime(CLOCK_MONOTONIC, &t);
    if ((int64_t)(t.tv_sec - t0.tv_sec) * 1000000000 + (t.tv_nsec - t0.tv_nsec) >= timeout_ns) return 1;
    backoff_wait(&b, &g_sig, e, SLEEP_MAX_NS);
  }
}

/* the fast path of a host wait in one call (each ctypes call costs a microsecond or so): 0 when no fault was recorded since
   `faults` (the count when the caller last read the reports), the signal reached `value` within `timeout_ns`, and still no
   fault was recorded after it; 1 otherwise, and the caller takes its slow path, which reads the reports */
int cmdproc_wait_clean(const uint64_t *signal, uint64_t value, int64_t timeout_ns, uint64_t faults, int64_t deadline_ns) {
  if (atomic_load(&g_faults) != faults) return 1;
  return cmdproc_wait_signal(signal, value, timeout_ns, faults, deadline_ns) == 0 && atomic_load(&g_faults) == faults ? 0 : 1;
}

/* core's submit program and the wait for its queue's signal in one call (an eager op submits, then waits at once: one ctypes
   call less, and no argument is built per call). `fn` is the submit program, called with its `nargs` pointer parameters; the
   value waited for is the host timeline value after it ran, as the caller's wait would read it. The caller (plugin_cpu.iface_hcq)
   fills this once per submission; fn's parameters are all pointers (core.hcq.callify), at most CMDPROC_SUBMIT_ARGS of them. */
#define CMDPROC_SUBMIT_ARGS 8
typedef struct {
  void (*fn)(void);
  int64_t nargs;
  void *args[CMDPROC_SUBMIT_ARGS];
  const uint64_t *signal, *timeline;
  int64_t slice_ns, timeout_ns;
} cmdproc_submit;

/* 0: submitted, and the signal reached the timeline value within slice_ns with no fault recorded since `faults`; 1: submitted,
   and the caller's general wait takes over; -1: nothing was submitted (more parameters than this knows) */
int cmdproc_submit_wait(const cmdproc_submit *s, uint64_t faults) {
  void *const *a = s->args;
  typedef void *p;
  switch (s->nargs) {   /* each call through its exact prototype */
    case 0: ((void (*)(void))s->fn)(); break;
    case 1: ((void (*)(p))s->fn)(a[0]); break;
    case 2: ((void (*)(p, p))s->fn)(a[0], a[1]); break;
    case 3: ((void (*)(p, p, p))s->fn)(a[0], a[1], a[2]); break;
    case 4: ((void (*)(p, p, p, p))s->fn)(a[0], a[1], a[2], a[3]); break;
    case 5: ((void (*)(p, p, p, p, p))s->fn)(a[0], a[1], a[2], a[3], a[4]); break;
    case 6: ((void (*)(p, p, p, p, p, p))s->fn)(a[0], a[1], a[2], a[3], a[4], a[5]); break;
    case 7: ((void (*)(p, p, p, p, p, p, p))s->fn)(a[0], a[1], a[2], a[3], a[4], a[5], a[6]); break;
    case 8: ((void (*)(p, p, p, p, p, p, p, p))s->fn)(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]); break;
    default: return -1;
  }
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  int64_t deadline_ns = (int64_t)t.tv_sec * 1000000000 + t.tv_nsec + s->timeout_ns;
  return cmdproc_wait_clean(s->signal, __atomic_load_n(s->timeline, __ATOMIC_ACQUIRE), s->slice_ns, faults, deadline_ns);
}
