/*
 * target.h: what the parts of the test target share (target.c,
 * target_tracing.c, target_processes.c, target_odd.c): the includes, the
 * NOINLINE and size macros, the helpers defined in target.c, and one
 * scenario_* function per scenario that main() dispatches to.
 *
 * Include it first: it sets _GNU_SOURCE before any system header.
 */
#ifndef GPUSHIM_TARGET_H
#define GPUSHIM_TARGET_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "cudart_standin.h"
#include "cuda_standin.h"

#include <signal.h>
#include <stddef.h>

#define NOINLINE __attribute__((noinline))
#define MiB ((size_t)1 << 20)
#define KiB ((size_t)1 << 10)

/* Helpers (target.c). */
void fail(const char *what, cudaError_t got, cudaError_t want);
void check(const char *what, cudaError_t got);
void print_alloc(const char *api, size_t size, const void *p);
int read_to_eof(volatile sig_atomic_t *stop);

/* Allocating helpers shared by several scenarios (target.c); tests look for
 * these names in symbolized stacks. */
NOINLINE void *device_alloc_named(size_t size);
NOINLINE void thread_alloc_free(void);
NOINLINE void *pause_before(void);
NOINLINE void *pause_after(void);

/* Kinds, threads, leaks, snapshots and load (target_tracing.c). */
int scenario_kinds(void);
int scenario_threads(int argc, char **argv);
int scenario_leak(int argc, char **argv);
int scenario_grow(int argc, char **argv);
int scenario_snapshot(void);
int scenario_sleep_snapshot(void);
int scenario_pause(int argc, char **argv);
int scenario_burst(int argc, char **argv);
int scenario_churn(int argc, char **argv);
int scenario_query(void);
int scenario_malloc3d(void);
int scenario_steps(int argc, char **argv);

/* Processes: signals, fork, exec, reaping, reloads, cancellation, exits
 * (target_processes.c). */
int scenario_kill(void);
int scenario_fork(void);
int scenario_forkexec(void);
int scenario_stuck_exit(void);
int scenario_sigint_exit(void);
int scenario_forkexec_tools(void);
int scenario_reap(void);
int scenario_dlreload(void);
int scenario_fork_start(void);
int scenario_cancel(int argc, char **argv);
int scenario_close_fds(int argc, char **argv);
int scenario_quick_end(int argc, char **argv);
int scenario_graceful_term(void);
int scenario_close_range(void);
int scenario_subreaper_reap(void);

/* Odd calls: failing calls, overflowing sizes, frames without CFI
 * (target_odd.c). */
int scenario_errors(void);
int scenario_pitch_overflow(void);
int scenario_odd_rbp(void);
int scenario_paths(int argc, char **argv);
int scenario_alloca_paths(void);
/* target_rings.c: ring-threads N M | ring-exit N K | ring-snap N M | ring-fork N */
int scenario_rings(int argc, char **argv);

#endif
