// What the hot path's primitives cost on this machine (issue 18's breakdown, beside
// scripts/bench-gpu-probe.sh): ns per call of rdtsc, clock_gettime(CLOCK_MONOTONIC), a system
// call (getpid by syscall), a locked add on a line only this thread touches, and a store to a
// line another thread keeps reading followed by a locked add (a ring's head as the writer
// spins on it). Each the median of 31 rounds of 100,000 calls.
// Usage: primitives [PIN_A=2] [PIN_B=3]
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <x86intrin.h>

#define ROUNDS 31
#define CALLS 100000

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e9 + t.tv_nsec; }
static int cmp(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }
static void pin(int cpu) { cpu_set_t s; CPU_ZERO(&s); CPU_SET(cpu, &s); pthread_setaffinity_np(pthread_self(), sizeof s, &s); }

static _Alignas(64) _Atomic uint64_t mine;
static _Alignas(64) _Atomic uint64_t shared_head;
static _Atomic int stop;
static volatile uint64_t sink;

static void *reader(void *arg) {
    pin(*(int *)arg);
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) sink += atomic_load_explicit(&shared_head, memory_order_acquire);
    return NULL;
}

#define MEASURE(name, body) do { \
    double r[ROUNDS]; \
    for (int k = 0; k < ROUNDS; k++) { double t0 = now(); for (int i = 0; i < CALLS; i++) { body; } r[k] = (now() - t0) / CALLS; } \
    qsort(r, ROUNDS, sizeof r[0], cmp); printf("| %s | %.1f |\n", name, r[ROUNDS / 2]); } while (0)

int main(int argc, char **argv) {
    int a = argc > 1 ? atoi(argv[1]) : 2, b = argc > 2 ? atoi(argv[2]) : 3;
    pin(a);
    printf("| primitive | ns per call |\n|---|---|\n");
    MEASURE("empty loop", __asm__ volatile("" ::: "memory"));
    MEASURE("rdtsc", sink += __rdtsc());
    MEASURE("clock_gettime(CLOCK_MONOTONIC)", { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); sink += t.tv_nsec; });
    MEASURE("syscall(SYS_getpid)", sink += syscall(SYS_getpid));
    MEASURE("lock xadd, own line", sink += atomic_fetch_add(&mine, 1));
    MEASURE("store + lock xadd, own lines", { atomic_store_explicit(&shared_head, sink, memory_order_release); sink += atomic_fetch_add(&mine, 1); });
    pthread_t t;
    pthread_create(&t, NULL, reader, &b);
    MEASURE("store to a line another CPU spins on + lock xadd", { atomic_store_explicit(&shared_head, sink, memory_order_release); sink += atomic_fetch_add(&mine, 1); });
    MEASURE("store to a line another CPU spins on", { atomic_store_explicit(&shared_head, sink + i, memory_order_release); });
    atomic_store(&stop, 1);
    pthread_join(t, NULL);
    return 0;
}
