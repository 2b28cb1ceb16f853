/*
 * Scenarios of the test target (see target.c) about the shim's per-thread rings (issue 18):
 * many threads with exact per-thread counts, threads that end right after allocating, snapshots
 * taken while threads allocate, and a fork while threads allocate.
 */
#define _GNU_SOURCE
#include "target.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long ring_pairs;
static atomic_int ring_stop;
static atomic_long ring_done;

NOINLINE static void ring_pair(void)
{
    void *p = NULL;
    check("cudaMalloc", cudaMalloc(&p, 4 * KiB));
    check("cudaFree", cudaFree(p));
}

NOINLINE static void *ring_keep(void)
{
    void *p = NULL;
    check("cudaMalloc", cudaMalloc(&p, 8 * KiB));
    return p;
}

static int start_threads(long n, void *(*f)(void *), pthread_t *t)
{
    for (long i = 0; i < n; i++) {
        int e = pthread_create(&t[i], NULL, f, (void *)i);
        if (e != 0) {
            fprintf(stderr, "target: pthread_create: %s\n", strerror(e));
            return 1;
        }
    }
    return 0;
}

/* ring-threads N M: N threads, thread i named "ring-i", makes (i + 1) * M pairs of 4 KiB in
 * ring_pair and keeps i + 1 blocks of 8 KiB from ring_keep. */
static void *ring_threads_main(void *arg)
{
    long i = (long)arg;
    char name[16];
    snprintf(name, sizeof name, "ring-%ld", i);
    pthread_setname_np(pthread_self(), name);
    for (long k = 0; k < (i + 1) * ring_pairs; k++)
        ring_pair();
    for (long k = 0; k <= i; k++)
        (void)ring_keep();
    return NULL;
}

/* ring-exit N K: N threads each make K pairs of 4 KiB, keep 10 blocks of 8 KiB and end at
 * once; the main thread exits as soon as the last one has allocated, without joining them. */
static void *ring_exit_main(void *arg)
{
    (void)arg;
    for (long k = 0; k < ring_pairs; k++)
        ring_pair();
    for (int k = 0; k < 10; k++)
        (void)ring_keep();
    atomic_fetch_add(&ring_done, 1);
    return NULL;
}

/* ring-snap N M: N threads each keep M blocks of 8 KiB (no frees) while the main thread asks
 * for a snapshot (SIGUSR1) every millisecond until they are done; prints "snapshots S". */
static void *ring_snap_main(void *arg)
{
    (void)arg;
    for (long k = 0; k < ring_pairs; k++)
        (void)ring_keep();
    atomic_fetch_add(&ring_done, 1);
    return NULL;
}

/* ring-fork N: N threads make pairs until told to stop; the main thread makes 500 pairs and
 * forks at once (its ring still holds some of them); the child makes 3,000 pairs (6,000 events,
 * more than a ring holds) and keeps one block of 8 KiB; prints the child's exit status. */
static void *ring_fork_main(void *arg)
{
    (void)arg;
    while (!atomic_load(&ring_stop))
        ring_pair();
    return NULL;
}

int scenario_rings(int argc, char **argv)
{
    const char *s = argv[1];
    long n = argc > 2 ? strtol(argv[2], NULL, 10) : 16;
    ring_pairs = argc > 3 ? strtol(argv[3], NULL, 10) : 1000;
    if (n < 1 || n > 256 || ring_pairs < 0) {
        fprintf(stderr, "target: %s N M: bad arguments\n", s);
        return 2;
    }
    pthread_t t[256];
    if (strcmp(s, "ring-threads") == 0) {
        if (start_threads(n, ring_threads_main, t))
            return 1;
        for (long i = 0; i < n; i++)
            pthread_join(t[i], NULL);
        return 0;
    }
    if (strcmp(s, "ring-exit") == 0) {
        if (start_threads(n, ring_exit_main, t))
            return 1;
        while (atomic_load(&ring_done) < n)
            sched_yield();
        printf("ok\n");
        fflush(stdout);
        exit(0);
    }
    if (strcmp(s, "ring-snap") == 0) {
        (void)ring_keep(); /* tracing is on before the first signal */
        if (start_threads(n, ring_snap_main, t))
            return 1;
        long snaps = 0;
        while (atomic_load(&ring_done) < n) {
            kill(getpid(), SIGUSR1);
            snaps++;
            nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
        }
        for (long i = 0; i < n; i++)
            pthread_join(t[i], NULL);
        printf("snapshots %ld\n", snaps);
        return 0;
    }
    if (strcmp(s, "ring-fork") == 0) {
        if (start_threads(n, ring_fork_main, t))
            return 1;
        for (int k = 0; k < 500; k++)
            ring_pair();
        pid_t c = fork();
        if (c == 0) {
            for (int k = 0; k < 3000; k++)
                ring_pair();
            (void)ring_keep();
            exit(0);
        }
        int st = 0;
        waitpid(c, &st, 0);
        atomic_store(&ring_stop, 1);
        for (long i = 0; i < n; i++)
            pthread_join(t[i], NULL);
        printf("child status %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
        return 0;
    }
    fprintf(stderr, "target: unknown scenario %s\n", s);
    return 2;
}
