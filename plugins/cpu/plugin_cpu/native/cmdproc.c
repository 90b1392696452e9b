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

Sleeping: an idle worker spins briefly, then sleeps on a process-wide futex word with a timeout growing to 2 ms. SIGNAL packets,
faults and host waits bump the word and wake sleepers, so most waits end early and an idle device costs no CPU. */
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
  pthread_mutex_t lock;             /* guards the report */
  uint64_t faults;                  /* how many faults so far */
  uint64_t fault_offset;            /* offset and opcode of the latest faulting packet */
  uint32_t fault_opcode;
  char report[REPORT_LEN];          /* the latest fault */
  pthread_t thread;
  void *altstack;
} cmdproc_queue;

/* *** sleeping: workers spin briefly, then sleep on one process-wide futex word with a growing timeout. Everything that can make
   a worker's condition true (a SIGNAL packet, the host's cmdproc_kick) bumps the word, so waits usually end early; the timeout
   covers memory the host writes without a kick (a doorbell rung by the submit program). *** */
#define SPIN_ITERS 1000
#define YIELD_ITERS 50
#define SLEEP_MIN_NS 20000L
#define SLEEP_MAX_NS 2000000L
static _Atomic uint32_t g_epoch;
static _Atomic int g_sleepers;
static _Atomic uint64_t g_faults;   /* faults recorded on any queue, so a host wait can stop early */

static void wake_all(void) {
  atomic_fetch_add(&g_epoch, 1);
  if (atomic_load(&g_sleepers) > 0) syscall(SYS_futex, &g_epoch, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

typedef struct { int spins; long sleep_ns; } backoff;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

/* `epoch` must be read before the condition is checked, so a wake between the check and the sleep is not lost */
static void backoff_wait(backoff *b, uint32_t epoch) {
  if (b->spins < SPIN_ITERS) { b->spins++; cpu_relax(); return; }
  /* then yield for a while: on a busy machine the thread we wait for may need this core */
  if (b->spins < SPIN_ITERS + YIELD_ITERS) { b->spins++; sched_yield(); return; }
  struct timespec ts = {0, b->sleep_ns};
  atomic_fetch_add(&g_sleepers, 1);
  syscall(SYS_futex, &g_epoch, FUTEX_WAIT_PRIVATE, epoch, &ts, NULL, 0);
  atomic_fetch_sub(&g_sleepers, 1);
  b->sleep_ns = b->sleep_ns * 2 > SLEEP_MAX_NS ? SLEEP_MAX_NS : b->sleep_ns * 2;
}

/* *** faults *** */
static __thread sigjmp_buf *t_guard __attribute__((tls_model("initial-exec")));
static __thread int t_signo __attribute__((tls_model("initial-exec")));
static __thread void *t_addr __attribute__((tls_model("initial-exec")));
static struct sigaction g_old[NSIG];
static const int g_fault_signals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL};

static void on_fault(int sig, siginfo_t *info, void *uctx) {
  sigjmp_buf *g = t_guard;
  if (g != NULL) {
    t_guard = NULL;
    t_signo = sig;
    t_addr = info ? info->si_addr : NULL;
    siglongjmp(*g, 1);
  }
  /* a block of a guarded multi-block launch, on any pool thread (cpu_launch_guarded, pool.c) */
  if ((g = cpu_pool_guard) != NULL) {
    cpu_pool_guard = NULL;
    cpu_pool_signo = sig;
    cpu_pool_addr = info ? info->si_addr : NULL;
    siglongjmp(*g, 1);
  }
  /* not a worker running a packet: behave as if we were never installed (Python's faulthandler, or the default action) */
  struct sigaction *old = &g_old[sig];
  if (old->sa_flags & SA_SIGINFO) { if (old->sa_sigaction) { old->sa_sigaction(sig, info, uctx); return; } }
  else if (old->sa_handler != SIG_DFL && old->sa_handler != SIG_IGN) { old->sa_handler(sig); return; }
  /* returning re-runs the faulting instruction, which now gets the default action */
  signal(sig, SIG_DFL);
}

/* installs on_fault for the fault signals where it is not the handler (first use, or someone such as Python's faulthandler
   replaced it since: then that handler becomes the one we chain to) */
static void install_handlers(void) {
  static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
  struct sigaction sa, cur;
  memset(&sa, 0, sizeof(sa));
  sa.sa_sigaction = on_fault;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;  /* the mask saved by sigsetjmp(.., 1) unblocks the signal again */
  sigemptyset(&sa.sa_mask);
  pthread_mutex_lock(&lock);
  for (size_t i = 0; i < sizeof(g_fault_signals) / sizeof(g_fault_signals[0]); i++) {
    int sig = g_fault_signals[i];
    if (sigaction(sig, NULL, &cur) == 0 && (cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == on_fault) continue;
    sigaction(sig, &sa, &g_old[sig]);
  }
  pthread_mutex_unlock(&lock);
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
  wake_all();   /* a host waiting on a signal may now report the fault */
}

/* *** packets *** */
static inline uint64_t rd64(const uint32_t *p, int dw) { uint64_t v; memcpy(&v, p + dw, 8); return v; }

/* runs one decoded packet; returns 0, or -1 (with `what` filled) on a fault it detected itself. Signals longjmp out instead. */
static int run_packet(cmdproc_queue *q, const uint32_t *p, uint32_t op, char *what) {
  switch (op) {
  case OP_LAUNCH: {
    int nargs = (int)p[1];
    int64_t nblocks = (int64_t)rd64(p, 6);
    void *fn = (void *)(uintptr_t)rd64(p, 2);
    const uint64_t *args = (const uint64_t *)(uintptr_t)rd64(p, 4);
    int r;
    if (nblocks <= 1) r = nblocks == 1 ? cpu_launch(fn, nargs, args, 1) : 0;   /* one block runs right here, holding no lock */
    else {
      /* every block runs under the pool's own guard (this thread's is lifted: the pool holds its launch lock, so jumping
         out of the launch would deadlock later ones); a faulting block is abandoned, the others finish */
      sigjmp_buf *g = t_guard;
      int signo = 0; void *addr = NULL; int64_t block = -1;
      t_guard = NULL;
      r = cpu_launch_guarded(fn, nargs, args, nblocks, &signo, &addr, &block);
      t_guard = g;
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
    atomic_store(&q->wait_addr, (uint64_t)(uintptr_t)sig);
    atomic_store(&q->wait_value, want);
    atomic_store(&q->busy, 2);
    backoff b = {0, SLEEP_MIN_NS};
    for (;;) {
      uint32_t e = atomic_load(&g_epoch);
      if (__atomic_load_n(sig, __ATOMIC_ACQUIRE) >= want) break;
      if (atomic_load(&q->stop)) return 0;
      if (atomic_load(&q->abort_at) == atomic_load(&q->cur_offset) + 1) {
        atomic_store(&q->abort_at, 0);
        snprintf(what, REPORT_LEN, "aborted by the host: signal 0x%llx is %llu, waited for >= %llu", (unsigned long long)(uintptr_t)sig,
                 (unsigned long long)__atomic_load_n(sig, __ATOMIC_ACQUIRE), (unsigned long long)want);
        return -1;
      }
      backoff_wait(&b, e);
    }
    atomic_store(&q->busy, 1);
    return 0;
  }
  case OP_SIGNAL:
    __atomic_store_n((uint64_t *)(uintptr_t)rd64(p, 2), rd64(p, 4), __ATOMIC_RELEASE);
    wake_all();
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

/* runs one packet with the fault guard; 0 ok, -1 faulted (recorded) */
static int guarded(cmdproc_queue *q, const uint32_t *p, uint32_t op, uint64_t off) {
  char what[REPORT_LEN];
  sigjmp_buf jb;
  what[0] = 0;
  if (sigsetjmp(jb, 1) == 0) {
    t_guard = &jb;
    int r = run_packet(q, p, op, what);
    t_guard = NULL;
    if (r == 0) return 0;
  } else snprintf(what, REPORT_LEN, "%s at address %p", signal_name(t_signo), t_addr);
  record(q, off, op, what);
  return -1;
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
  uint64_t mask = q->ring_size - 1;
  backoff b = {0, SLEEP_MIN_NS};
  while (!atomic_load(&q->stop)) {
    uint32_t e = atomic_load(&g_epoch);
    uint64_t end = __atomic_load_n(q->doorbell, __ATOMIC_ACQUIRE), rp = atomic_load(&q->rptr);
    if (end == rp) { backoff_wait(&b, e); continue; }
    b.spins = 0; b.sleep_ns = SLEEP_MIN_NS;
    if (end - rp > q->ring_size) {
      char what[128];
      snprintf(what, sizeof(what), "doorbell %llu is more than the ring size (%llu) ahead; skipped to it", (unsigned long long)end,
               (unsigned long long)q->ring_size);
      record(q, rp, 0, what);
      atomic_store(&q->rptr, end);
      continue;
    }
    int draining = 0;
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
        break;
      }
      for (uint32_t i = 1; i < len; i++) memcpy(pkt + i, q->ring + ((rp + 4 * i) & mask), 4);
      atomic_store(&q->busy, 1);
      if (!(draining && (op == OP_LAUNCH || op == OP_COPY || op == OP_TIMESTAMP)) && guarded(q, pkt, op, rp) != 0) draining = 1;
      if (op == OP_SIGNAL) draining = 0;
      atomic_store(&q->busy, 0);
      rp += (uint64_t)len * 4;
      atomic_store_explicit(&q->rptr, rp, memory_order_release);
    }
  }
  return NULL;
}

/* *** the host's interface (ctypes) *** */
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
  if (q->altstack == NULL || pthread_create(&q->thread, NULL, worker, q) != 0) {
    free(q->altstack);
    free(q);
    return NULL;
  }
  return q;
}

/* stops the worker (a WAIT in progress returns at once), joins it and frees the queue */
void cmdproc_destroy(void *h) {
  cmdproc_queue *q = h;
  if (q == NULL) return;
  atomic_store(&q->stop, 1);
  wake_all();
  pthread_join(q->thread, NULL);
  pthread_mutex_destroy(&q->lock);
  free(q->altstack);
  free(q);
}

uint64_t cmdproc_rptr(void *h) { return atomic_load(&((cmdproc_queue *)h)->rptr); }
void cmdproc_kick(void) { wake_all(); }
/* makes the WAIT the queue is blocked in right now (if any) fail as a fault; a later WAIT is not affected */
void cmdproc_abort_wait(void *h) {
  cmdproc_queue *q = h;
  if (atomic_load(&q->busy) != 2) return;
  atomic_store(&q->abort_at, atomic_load(&q->cur_offset) + 1);
  wake_all();
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

/* faults recorded on any queue so far (pass it to cmdproc_wait_signal after checking the reports) */
uint64_t cmdproc_faults(void) { return atomic_load(&g_faults); }

/* the host's wait: until *signal >= value (0), `timeout_ns` passed (1), or the process-wide fault count differs from `faults`
   (2). It first wakes every sleeping worker, since the host has probably just rung a doorbell. ctypes drops the GIL here. */
int cmdproc_wait_signal(const uint64_t *signal, uint64_t value, int64_t timeout_ns, uint64_t faults) {
  wake_all();
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  backoff b = {0, SLEEP_MIN_NS};
  for (;;) {
    uint32_t e = atomic_load(&g_epoch);
    if (__atomic_load_n(signal, __ATOMIC_ACQUIRE) >= value) return 0;
    if (atomic_load(&g_faults) != faults) return 2;
    clock_gettime(CLOCK_MONOTONIC, &t);
    if ((int64_t)(t.tv_sec - t0.tv_sec) * 1000000000 + (t.tv_nsec - t0.tv_nsec) >= timeout_ns) return 1;
    backoff_wait(&b, e);
  }
}
