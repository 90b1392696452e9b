/* The CPU plugin's persistent thread pool: runs one kernel's blocks on all cores. Shared by runtime.py (through ctypes)
   and the command processor (cmdproc.c), which are built into one library by plugin_cpu/native.py. */
#ifndef CPU_POOL_H
#define CPU_POOL_H
#include <stdint.h>
#include <signal.h>

#define CPU_MAX_ARGS 64

/* Runs fn(args[0], ..., args[nargs-1], (int64)b) for every b in [0, nblocks) on the persistent pool and returns
   when all are done. Each argument is passed as one 64-bit integer slot: pointers, and int32 values sign-extended
   (valid on x86-64 SysV and AArch64 AAPCS64, where a callee reads the low 32 bits of an int parameter).
   A negative nblocks runs the -nblocks blocks one after another on the calling thread instead (no pool handoff: for
   kernels whose work is too small to split).
   Returns 0, or -1 if nargs is outside [0, CPU_MAX_ARGS] or nblocks does not fit the kernel's `int gidx0`.
   Safe to call from several threads at once: launches that need the pool take turns, one-block launches run at once
   on the calling thread. Each pool thread runs its home share of the blocks first (a contiguous, proportional part: the
   caller the first), so the same thread runs the same blocks at every launch of a count unless another was late. */
int cpu_launch(void *fn, int nargs, const uint64_t *args, int64_t nblocks);

/* cpu_launch whose blocks run under a fault guard: a block that raises SIGSEGV/SIGBUS/SIGFPE/SIGILL is abandoned (the
   signal handler, cmdproc.c, jumps back to cpu_pool_guard), the other blocks still run, and the launch returns -2 with the
   first fault's signal, address and block in *signo, *addr, *block. An interrupt (SIGINT, or CPU_INTERRUPT_SIGNAL sent by
   cmdproc_interrupt or the host's deadline) stops the whole launch instead: the blocks running are left, the rest skipped,
   and *signo is SIGINT or CPU_INTERRUPT_SIGNAL. Installs the handler on first use (cpu_guard_install). */
int cpu_launch_guarded(void *fn, int nargs, const uint64_t *args, int64_t nblocks, int *signo, void **addr, int64_t *block);

/* the signal that asks a thread running a guarded kernel to leave it (SIGURG: ignored by default, so a stray one is harmless) */
#define CPU_INTERRUPT_SIGNAL SIGURG
static inline int cpu_is_interrupt(int sig) { return sig == SIGINT || sig == CPU_INTERRUPT_SIGNAL; }
/* installs the fault and interrupt handlers once per process (cmdproc.c); cpu_guard_check re-installs them where someone
   replaced them since (Python's faulthandler, signal.signal(SIGINT, ...)), and costs a few system calls */
void cpu_guard_install(void);
void cpu_guard_check(void);
/* stops the guarded pool job `job` (from a signal handler too): blocks not started are skipped, running ones interrupted */
void cpu_pool_cancel(uint32_t job);

/* set on a thread while it runs a guarded block: where the fault handler jumps, and where it leaves the signal's details */
#include <setjmp.h>
extern __thread sigjmp_buf *cpu_pool_guard;
extern __thread uint32_t cpu_pool_job;         /* the guarded pool job whose block this thread runs, or 0 */
extern __thread uint32_t cpu_pool_launching;   /* the guarded pool job this thread launched and waits for, or 0 */
extern __thread int cpu_pool_signo;
extern __thread void *cpu_pool_addr;
/* unblocks SIGSEGV/SIGBUS/SIGFPE/SIGILL on this thread: a guard calls it after its handler jumped out of a fault (the guards
   do not save the signal mask, which would cost a system call per block) */
void cpu_unblock_faults(void);

/* The number of threads that run blocks (the caller included): $CPU_THREADS if set (>= 1), else the number of CPUs this
   process may run on. Starts the pool on first use. Idle threads poll for $CPU_SPIN_US microseconds (default 300) before
   they sleep: the first $CPU_SPIN_PAUSE_US (default 20) with pause instructions, the rest yielding the core between polls. */
int cpu_pool_threads(void);

/* Makes every pool thread that polls for work now or until the next launch to the pool (and a launcher waiting for its blocks) go
   to sleep at once: before another library's threads run (a benchmark timing a peer), so our idle polling takes no core from
   them. */
void cpu_pool_park(void);
/* Sets the polling budget and its pause part (microseconds; a negative value leaves that one) after the pool started. */
void cpu_pool_set_spin(int64_t spin_us, int64_t pause_us);
/* Sets the first back-off (microseconds; 0: never) for which launches run their blocks on the launching thread after a pool job
   waited for a late worker (a descheduled one: a machine busier than it has cores; $CPU_BACKOFF_US, default 10000), and ends
   one in progress. Starts the pool. */
void cpu_pool_set_backoff(int64_t backoff_us);
/* How many pool threads sleep now (the others poll for work or run blocks). */
int cpu_pool_sleepers(void);

/* Stops and joins the pool's threads (also run at exit); the next launch starts a fresh pool. */
void cpu_pool_shutdown(void);

#endif
