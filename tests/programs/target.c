/*
 * Test target for gpushim, built twice: target_dynamic (libcudart.so.13 linked
 * dynamically) and target_static (libcudart_static.a inside the executable).
 *
 * Usage: target <scenario> [args]; see main() for the scenarios.  Each one
 * prints "ok" last on success and exits nonzero with a message on any
 * unexpected CUDA result.  Every allocating call is made from a noinline
 * function with a distinctive name so tests can check stack symbolization.
 */
#define _GNU_SOURCE
#include "cudart_standin.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))
#define MiB ((size_t)1 << 20)
#define KiB ((size_t)1 << 10)

static void fail(const char *what, cudaError_t got, cudaError_t want)
{
    fprintf(stderr, "target: %s returned %d, expected %d\n", what, got, want);
    fflush(stdout);
    exit(1);
}

static void check(const char *what, cudaError_t got)
{
    if (got != cudaSuccess)
        fail(what, got, cudaSuccess);
}

static void print_alloc(const char *api, size_t size, const void *p)
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

/* ---------------------------------------------------------------- kinds */

NOINLINE void *kinds_malloc_freed(void)
{
    void *p = NULL;
    check("cudaMalloc", cudaMalloc(&p, 1 * MiB));
    print_alloc("cudaMalloc", 1 * MiB, p);
    return p;
}

NOINLINE void *kinds_malloc_kept(void)
{
    void *p = NULL;
    check("cudaMalloc", cudaMalloc(&p, 3 * MiB));
    print_alloc("cudaMalloc", 3 * MiB, p);
    return p;
}

NOINLINE void *kinds_managed_kept(void)
{
    void *p = NULL;
    check("cudaMallocManaged", cudaMallocManaged(&p, 2 * MiB, cudaMemAttachGlobal));
    print_alloc("cudaMallocManaged", 2 * MiB, p);
    return p;
}

NOINLINE void *kinds_host_kept(void)
{
    void *p = NULL;
    check("cudaMallocHost", cudaMallocHost(&p, 4 * MiB));
    print_alloc("cudaMallocHost", 4 * MiB, p);
    return p;
}

NOINLINE void *kinds_hostalloc_freed(void)
{
    void *p = NULL;
    check("cudaHostAlloc", cudaHostAlloc(&p, 1 * MiB, cudaHostAllocDefault));
    print_alloc("cudaHostAlloc", 1 * MiB, p);
    return p;
}

NOINLINE void *kinds_async_kept(void)
{
    void *p = NULL;
    check("cudaMallocAsync", cudaMallocAsync(&p, 5 * MiB, (cudaStream_t)0x10));
    print_alloc("cudaMallocAsync", 5 * MiB, p);
    return p;
}

NOINLINE void *kinds_async_freed(void)
{
    void *p = NULL;
    check("cudaMallocAsync", cudaMallocAsync(&p, 1 * MiB, (cudaStream_t)0x10));
    print_alloc("cudaMallocAsync", 1 * MiB, p);
    return p;
}

NOINLINE void *kinds_pitch_kept(void)
{
    void *p = NULL;
    size_t pitch = 0;
    check("cudaMallocPitch", cudaMallocPitch(&p, &pitch, 1000, 10));
    if (pitch != 1024) {
        fprintf(stderr, "target: cudaMallocPitch gave pitch %zu, expected 1024\n", pitch);
        exit(1);
    }
    print_alloc("cudaMallocPitch", pitch * 10, p);
    return p;
}

NOINLINE void *kinds_pool_kept(void)
{
    void *p = NULL;
    check("cudaMallocFromPoolAsync",
          cudaMallocFromPoolAsync(&p, 6 * MiB, (cudaMemPool_t)0x20, (cudaStream_t)0x10));
    print_alloc("cudaMallocFromPoolAsync", 6 * MiB, p);
    return p;
}

static int scenario_kinds(void)
{
    void *a = kinds_malloc_freed();
    check("cudaFree", cudaFree(a));
    (void)kinds_malloc_kept();
    (void)kinds_managed_kept();
    (void)kinds_host_kept();
    void *h = kinds_hostalloc_freed();
    check("cudaFreeHost", cudaFreeHost(h));
    (void)kinds_async_kept();
    void *b = kinds_async_freed();
    check("cudaFreeAsync", cudaFreeAsync(b, (cudaStream_t)0x10));
    (void)kinds_pitch_kept();
    (void)kinds_pool_kept();
    check("cudaDeviceSynchronize", cudaDeviceSynchronize());
    return 0;
}

/* -------------------------------------------------------------- threads */

static long thread_iterations;

NOINLINE void thread_alloc_free(void)
{
    void *p = NULL;
    check("cudaMalloc", cudaMalloc(&p, 4096));
    check("cudaFree", cudaFree(p));
}

static void *thread_main(void *arg)
{
    (void)arg;
    for (long i = 0; i < thread_iterations; i++)
        thread_alloc_free();
    return NULL;
}

static int scenario_threads(int argc, char **argv)
{
    long n = argc > 2 ? strtol(argv[2], NULL, 10) : 4;
    long m = argc > 3 ? strtol(argv[3], NULL, 10) : 100;
    if (n < 1 || n > 4096 || m < 0) {
        fprintf(stderr, "target: threads N M: bad arguments\n");
        return 2;
    }
    thread_iterations = m;
    pthread_t *tids = calloc((size_t)n, sizeof *tids);
    if (tids == NULL)
        return 1;
    for (long i = 0; i < n; i++) {
        int e = pthread_create(&tids[i], NULL, thread_main, NULL);
        if (e != 0) {
            fprintf(stderr, "target: pthread_create: %s\n", strerror(e));
            return 1;
        }
    }
    for (long i = 0; i < n; i++)
        pthread_join(tids[i], NULL);
    free(tids);
    return 0;
}

/* ----------------------------------------------------------------- leak */

NOINLINE void *steady_pool(void)
{
    void *p = NULL;
    check("cudaMalloc", cudaMalloc(&p, 64 * MiB));
    return p;
}

NOINLINE void render_frame(void)
{
    void *scratch = NULL; /* leaked on purpose */
    check("cudaMalloc", cudaMalloc(&scratch, 1 * MiB));
}

NOINLINE void transient_work(void)
{
    void *p = NULL;
    check("cudaMalloc", cudaMalloc(&p, 256 * KiB));
    check("cudaFree", cudaFree(p));
}

static int scenario_leak(int argc, char **argv)
{
    long n = argc > 2 ? strtol(argv[2], NULL, 10) : 10;
    if (n < 0) {
        fprintf(stderr, "target: leak N: bad argument\n");
        return 2;
    }
    (void)steady_pool();
    for (long i = 0; i < n; i++) {
        if (i > 0)
            transient_work();
        render_frame();
    }
    return 0;
}

/* ------------------------------------------------------------- snapshot */

NOINLINE void *snapshot_before(void) { return device_alloc_named(1 * MiB); }
NOINLINE void *snapshot_after(void) { return device_alloc_named(2 * MiB); }

static int scenario_snapshot(void)
{
    (void)snapshot_before();
    fflush(stdout);
    raise(SIGUSR1);
    (void)snapshot_after();
    return 0;
}

/* ----------------------------------------------------------------- kill */

NOINLINE void *killed_alloc(void) { return device_alloc_named(7 * MiB); }

static int scenario_kill(void)
{
    void *p = killed_alloc();
    print_alloc("cudaMalloc", 7 * MiB, p);
    fflush(stdout);
    raise(SIGKILL);
    fprintf(stderr, "target: still alive after SIGKILL\n");
    return 1;
}

/* ----------------------------------------------------------------- fork */

NOINLINE void *fork_parent_before(void) { return device_alloc_named(1 * MiB); }
NOINLINE void *fork_child_first(void) { return device_alloc_named(2 * MiB); }
NOINLINE void *fork_child_second(void) { return device_alloc_named(3 * MiB); }
NOINLINE void *fork_parent_after(void) { return device_alloc_named(4 * MiB); }

static int wait_child(pid_t pid, const char *what)
{
    int status = 0;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) {
            perror("target: waitpid");
            return 1;
        }
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "target: %s child ended with status 0x%x\n", what, status);
        return 1;
    }
    return 0;
}

static int scenario_fork(void)
{
    (void)fork_parent_before();
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        perror("target: fork");
        return 1;
    }
    if (pid == 0) {
        (void)fork_child_first();
        (void)fork_child_second();
        printf("child ok\n");
        fflush(stdout);
        exit(0);
    }
    if (wait_child(pid, "fork") != 0)
        return 1;
    (void)fork_parent_after();
    return 0;
}

/* ------------------------------------------------------------- forkexec */

NOINLINE void *forkexec_parent_alloc(void) { return device_alloc_named(1 * MiB); }

static int scenario_forkexec(void)
{
    (void)forkexec_parent_alloc();
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        perror("target: fork");
        return 1;
    }
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", "echo child-sh", (char *)NULL);
        perror("target: execl /bin/sh");
        _exit(127);
    }
    return wait_child(pid, "forkexec");
}

/* --------------------------------------------------------------- errors */

NOINLINE cudaError_t errors_null_out(void) { return cudaMalloc(NULL, 16); }

NOINLINE cudaError_t errors_oom(void **p) { return cudaMalloc(p, 2 * MiB); }

NOINLINE void *errors_small_kept(void) { return device_alloc_named(512 * KiB); }

static int scenario_errors(void)
{
    cudaError_t e = errors_null_out();
    printf("null-out %d\n", e);
    if (e != cudaErrorInvalidValue)
        fail("cudaMalloc(NULL, 16)", e, cudaErrorInvalidValue);

    e = cudaFree((void *)0x1234);
    printf("unknown-free %d\n", e);
    if (e != cudaErrorInvalidValue)
        fail("cudaFree(0x1234)", e, cudaErrorInvalidValue);

    e = cudaFree(NULL);
    printf("null-free %d\n", e);
    if (e != cudaSuccess)
        fail("cudaFree(NULL)", e, cudaSuccess);

    void *sentinel = (void *)0x5a5a;
    void *p = sentinel;
    e = errors_oom(&p);
    printf("oom %d\n", e);
    if (e != cudaErrorMemoryAllocation)
        fail("cudaMalloc(2 MiB) with STANDIN_DEVICE_BYTES=1048576", e, cudaErrorMemoryAllocation);
    if (p != sentinel) {
        fprintf(stderr, "target: failed cudaMalloc changed its out-pointer\n");
        return 1;
    }

    (void)errors_small_kept();
    return 0;
}

/* ------------------------------------------------------- sleep-snapshot */

NOINLINE void *sleeper_before(void) { return device_alloc_named(1 * MiB); }
NOINLINE void *sleeper_after(void) { return device_alloc_named(2 * MiB); }

static int scenario_sleep_snapshot(void)
{
    (void)sleeper_before();
    printf("ready\n");
    fflush(stdout);
    char buf[256];
    for (;;) {
        ssize_t n = read(STDIN_FILENO, buf, sizeof buf);
        if (n > 0)
            continue;
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            perror("target: read stdin");
            return 1;
        }
        break;
    }
    (void)sleeper_after();
    return 0;
}

/* ----------------------------------------------------------------- main */

static void usage(void)
{
    fprintf(stderr, "usage: target kinds | threads N M | leak N | snapshot | kill | fork | "
                    "forkexec | errors | none | sleep-snapshot\n");
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
    } else {
        usage();
        return 2;
    }
    if (rc == 0)
        printf("ok\n");
    return rc;
}
