/*
 * Test target for gpushim, built twice: target_dynamic (libcudart.so.13 linked
 * dynamically) and target_static (libcudart_static.a inside the executable).
 *
 * Usage: target <scenario> [args]; see main() for the scenarios.  Each one
 * prints "ok" last on success and exits nonzero with a message on any
 * unexpected CUDA result.  Every allocating call is made from a noinline
 * function with a distinctive name so tests can check stack symbolization.
 *
 * This file holds main() and the helpers the scenarios share; the scenarios
 * live in target_tracing.c, target_processes.c and target_odd.c, and
 * target.h declares them all.
 */
#include "target.h"

#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void fail(const char *what, cudaError_t got, cudaError_t want)
{
    fprintf(stderr, "target: %s returned %d, expected %d\n", what, got, want);
    fflush(stdout);
    exit(1);
}

void check(const char *what, cudaError_t got)
{
    if (got != cudaSuccess)
        fail(what, got, cudaSuccess);
}

void print_alloc(const char *api, size_t size, const void *p)
{
    printf("alloc %s %zu 0x%" PRIxPTR "\n", api, size, (uintptr_t)p);
}

/* Plain cudaMalloc from a named frame, used by several scenarios. */
NOINLINE void *device_alloc_named(size_t size)
{
    void *p = NULL;
    check("cudaMalloc", cudaMalloc(&p, size));
    return p;
}

/* One 4 KiB alloc/free pair from a named frame (threads, pause, churn,
 * stuck-exit). */
NOINLINE void thread_alloc_free(void)
{
    void *p = NULL;
    check("cudaMalloc", cudaMalloc(&p, 4096));
    check("cudaFree", cudaFree(p));
}

/* 1 MiB and 2 MiB kept, from named frames (pause, stuck-exit, sigint-exit,
 * churn). */
NOINLINE void *pause_before(void) { return device_alloc_named(1 * MiB); }
NOINLINE void *pause_after(void) { return device_alloc_named(2 * MiB); }

/* Reads stdin to its end; 0 at EOF, 1 on a read error.  EINTR is retried
 * unless *stop is set. */
int read_to_eof(volatile sig_atomic_t *stop)
{
    char buf[256];
    for (;;) {
        ssize_t n = read(STDIN_FILENO, buf, sizeof buf);
        if (n > 0)
            continue;
        if (n == 0)
            return 0;
        if (errno == EINTR) {
            if (stop != NULL && *stop)
                return 0;
            continue;
        }
        perror("target: read stdin");
        return 1;
    }
}

/* ----------------------------------------------------------------- main */

static void usage(void)
{
    fprintf(stderr, "usage: target kinds | threads N M | leak N | grow N SIZE MS | snapshot | kill | fork | "
                    "forkexec | errors | none | sleep-snapshot | pause N | sigint-exit | "
                    "burst N | churn N | query | forkexec-tools | reap | pitch-overflow | malloc3d | "
                    "dlreload | odd-rbp | stuck-exit | paths N [fork] | ring-threads N M | "
                    "ring-exit N K | ring-snap N M | ring-fork N | graceful-term | close-range | subreaper-reap | "
                    "steps workspace|leak N\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage();
        return 2;
    }
    const char *s = argv[1];
    int rc;
    if (strcmp(s, "none") == 0) {
        printf("hello\n");
        return 0;
    } else if (strcmp(s, "kinds") == 0) {
        rc = scenario_kinds();
    } else if (strcmp(s, "threads") == 0) {
        rc = scenario_threads(argc, argv);
    } else if (strcmp(s, "leak") == 0) {
        rc = scenario_leak(argc, argv);
    } else if (strcmp(s, "grow") == 0) {
        rc = scenario_grow(argc, argv);
    } else if (strcmp(s, "steps") == 0) {
        rc = scenario_steps(argc, argv);
    } else if (strcmp(s, "snapshot") == 0) {
        rc = scenario_snapshot();
    } else if (strcmp(s, "kill") == 0) {
        rc = scenario_kill();
    } else if (strcmp(s, "fork") == 0) {
        rc = scenario_fork();
    } else if (strcmp(s, "forkexec") == 0) {
        rc = scenario_forkexec();
    } else if (strcmp(s, "errors") == 0) {
        rc = scenario_errors();
    } else if (strcmp(s, "sleep-snapshot") == 0) {
        rc = scenario_sleep_snapshot();
    } else if (strcmp(s, "pause") == 0) {
        rc = scenario_pause(argc, argv);
    } else if (strcmp(s, "stuck-exit") == 0) {
        rc = scenario_stuck_exit();
    } else if (strcmp(s, "sigint-exit") == 0) {
        rc = scenario_sigint_exit();
    } else if (strcmp(s, "burst") == 0) {
        rc = scenario_burst(argc, argv);
    } else if (strcmp(s, "churn") == 0) {
        rc = scenario_churn(argc, argv);
    } else if (strcmp(s, "query") == 0) {
        rc = scenario_query();
    } else if (strcmp(s, "forkexec-tools") == 0) {
        rc = scenario_forkexec_tools();
    } else if (strcmp(s, "reap") == 0) {
        rc = scenario_reap();
    } else if (strcmp(s, "malloc3d") == 0) {
        rc = scenario_malloc3d();
    } else if (strcmp(s, "pitch-overflow") == 0) {
        rc = scenario_pitch_overflow();
    } else if (strcmp(s, "dlreload") == 0) {
        rc = scenario_dlreload();
    } else if (strcmp(s, "odd-rbp") == 0) {
        rc = scenario_odd_rbp();
    } else if (strcmp(s, "alloca-paths") == 0) {
        rc = scenario_alloca_paths();
    } else if (strcmp(s, "paths") == 0) {
        rc = scenario_paths(argc, argv);
    } else if (strcmp(s, "fork-start") == 0) {
        rc = scenario_fork_start();
    } else if (strcmp(s, "cancel") == 0) {
        rc = scenario_cancel(argc, argv);
    } else if (strcmp(s, "close-fds") == 0) {
        rc = scenario_close_fds(argc, argv);
    } else if (strcmp(s, "quick-end") == 0) {
        rc = scenario_quick_end(argc, argv);
    } else if (strcmp(s, "subreaper-reap") == 0) {
        rc = scenario_subreaper_reap();
    } else if (strcmp(s, "close-range") == 0) {
        rc = scenario_close_range();
    } else if (strcmp(s, "graceful-term") == 0) {
        rc = scenario_graceful_term();
    } else if (strncmp(s, "ring-", 5) == 0) {
        rc = scenario_rings(argc, argv);
    } else {
        usage();
        return 2;
    }
    if (rc == 0)
        printf("ok\n");
    return rc;
}
