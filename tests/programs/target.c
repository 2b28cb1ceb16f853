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
#include "cuda_standin.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
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

/* ------------------------------------------------------------- faults
 * Scenarios for the fault suite (tests/faults/): the program must behave the same whatever
 * happens to gpushim's side.
 */

NOINLINE void *pause_before(void) { return device_alloc_named(1 * MiB); }
NOINLINE void *pause_after(void) { return device_alloc_named(2 * MiB); }

/* Reads stdin to its end; 0 at EOF, 1 on a read error.  EINTR is retried
 * unless *stop is set. */
static int read_to_eof(volatile sig_atomic_t *stop)
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

/* pause N: 1 MiB kept, "ready", stdin to its end, N alloc/free pairs of
 * 4 KiB, 2 MiB kept.  Live at exit: 3 MiB. */
static int scenario_pause(int argc, char **argv)
{
    long n = argc > 2 ? strtol(argv[2], NULL, 10) : 0;
    if (n < 0) {
        fprintf(stderr, "target: pause N: bad argument\n");
        return 2;
    }
    (void)pause_before();
    printf("ready\n");
    fflush(stdout);
    if (read_to_eof(NULL) != 0)
        return 1;
    for (long i = 0; i < n; i++)
        thread_alloc_free();
    (void)pause_after();
    return 0;
}

/* stuck-exit: 1 MiB kept, a thread that allocates and frees without end,
 * "ready", stdin to its end, then main returns (the exit path runs while the
 * other thread is still allocating). */
static void *alloc_forever(void *arg)
{
    (void)arg;
    for (;;)
        thread_alloc_free();
    return NULL;
}

static int scenario_stuck_exit(void)
{
    (void)pause_before();
    pthread_t t;
    int e = pthread_create(&t, NULL, alloc_forever, NULL);
    if (e != 0) {
        fprintf(stderr, "target: pthread_create: %s\n", strerror(e));
        return 1;
    }
    printf("ready\n");
    fflush(stdout);
    return read_to_eof(NULL);
}

/* sigint-exit: like pause 0 up to "ready", but a SIGINT handler ends the
 * wait and main returns 130 (the exit path runs). */
static volatile sig_atomic_t got_sigint;

static void on_sigint(int sig)
{
    (void)sig;
    got_sigint = 1;
}

static int scenario_sigint_exit(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0; /* no SA_RESTART: read() returns EINTR */
    if (sigaction(SIGINT, &sa, NULL) != 0) {
        perror("target: sigaction");
        return 1;
    }
    (void)pause_before();
    printf("ready\n");
    fflush(stdout);
    if (read_to_eof(&got_sigint) != 0)
        return 1;
    printf("interrupted %d\n", (int)got_sigint);
    return got_sigint ? 130 : 1;
}

/* burst N: one thread sends N SIGUSR1 to the process as fast as it can while
 * the main thread keeps allocating 4 KiB (never freed).  Prints the number of
 * allocations.  Without the shim SIGUSR1 would end the program. */
static atomic_int burst_done;
static long burst_signals;

NOINLINE void *burst_alloc(void)
{
    void *p = NULL;
    check("cudaMalloc", cudaMalloc(&p, 4 * KiB));
    return p;
}

static void *burst_signaller(void *arg)
{
    (void)arg;
    for (long i = 0; i < burst_signals; i++)
        kill(getpid(), SIGUSR1);
    atomic_store(&burst_done, 1);
    return NULL;
}

static int scenario_burst(int argc, char **argv)
{
    burst_signals = argc > 2 ? strtol(argv[2], NULL, 10) : 1000;
    if (burst_signals < 1) {
        fprintf(stderr, "target: burst N: bad argument\n");
        return 2;
    }
    long k = 0;
    (void)burst_alloc(); /* tracing is on before the first signal */
    k++;
    pthread_t t;
    int e = pthread_create(&t, NULL, burst_signaller, NULL);
    if (e != 0) {
        fprintf(stderr, "target: pthread_create: %s\n", strerror(e));
        return 1;
    }
    while (!atomic_load(&burst_done)) {
        (void)burst_alloc();
        k++;
    }
    pthread_join(t, NULL);
    printf("allocs %ld\n", k);
    return 0;
}

/* A "Field:   value" line of /proc/self/status, as a number; -1 if absent. */
static long status_field(const char *field)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (f == NULL)
        return -1;
    char line[256];
    long v = -1;
    size_t n = strlen(field);
    while (fgets(line, sizeof line, f) != NULL) {
        if (strncmp(line, field, n) == 0) {
            v = strtol(line + n, NULL, 10);
            break;
        }
    }
    fclose(f);
    return v;
}

static uint64_t monotonic_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* churn N: 1 MiB kept, "ready <VmHWM kB>", then N alloc/free pairs of 4 KiB;
 * prints the peak resident size and the slowest pair. */
static int scenario_churn(int argc, char **argv)
{
    long n = argc > 2 ? strtol(argv[2], NULL, 10) : 1000;
    if (n < 0) {
        fprintf(stderr, "target: churn N: bad argument\n");
        return 2;
    }
    (void)pause_before();
    printf("ready %ld\n", status_field("VmHWM:"));
    fflush(stdout);
    uint64_t slowest = 0;
    for (long i = 0; i < n; i++) {
        uint64_t t0 = monotonic_us();
        thread_alloc_free();
        uint64_t dt = monotonic_us() - t0;
        if (dt > slowest)
            slowest = dt;
    }
    printf("vmhwm_kb %ld\n", status_field("VmHWM:"));
    printf("slowest_pair_us %" PRIu64 "\n", slowest);
    return 0;
}

/* query: an nvidia-smi-like tool: asks the runtime about the device, never
 * allocates, and prints its own thread count. */
static int scenario_query(void)
{
    int dev = -1;
    size_t free_b = 0, total_b = 0;
    check("cudaGetDevice", cudaGetDevice(&dev));
    check("cudaMemGetInfo", cudaMemGetInfo(&free_b, &total_b));
    printf("query device %d total %zu\n", dev, total_b);
    printf("query threads %ld\n", status_field("Threads:"));
    return 0;
}

/* forkexec-tools: with tracing on, fork+exec a shell and this program's
 * `query` (both inherit LD_PRELOAD); they must run as without the shim. */
NOINLINE void *tools_parent_alloc(void) { return device_alloc_named(1 * MiB); }

static int spawn_and_wait(const char *path, char *const argv[])
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        perror("target: fork");
        return 1;
    }
    if (pid == 0) {
        execv(path, argv);
        perror("target: execv");
        _exit(127);
    }
    return wait_child(pid, path);
}

static int scenario_forkexec_tools(void)
{
    (void)tools_parent_alloc();
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        perror("target: readlink /proc/self/exe");
        return 1;
    }
    self[n] = '\0';
    char *sh[] = {"sh", "-c", "echo child-sh; grep '^Threads:' /proc/$$/status", NULL};
    char *query[] = {self, "query", NULL};
    if (spawn_and_wait("/bin/sh", sh) != 0 || spawn_and_wait(self, query) != 0)
        return 1;
    return 0;
}

/* reap: forks a child that exits at once, then reaps children with wait()
 * until there are none (as shells and process supervisors do). */
NOINLINE void *reap_parent_alloc(void) { return device_alloc_named(1 * MiB); }

static int scenario_reap(void)
{
    (void)reap_parent_alloc();
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        perror("target: fork");
        return 1;
    }
    if (pid == 0)
        _exit(0);
    int reaped = 0, others = 0;
    for (;;) {
        int status = 0;
        pid_t w = wait(&status);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno != ECHILD) {
                perror("target: wait");
                return 1;
            }
            break;
        }
        if (w == pid)
            reaped++;
        else
            others++;
    }
    printf("reaped %d others %d\n", reaped, others);
    return reaped == 1 && others == 0 ? 0 : 1;
}

/* pitch-overflow: cudaMallocPitch with width x height beyond size_t; the
 * runtime's error must come back unchanged, out-parameters untouched. */
static int scenario_pitch_overflow(void)
{
    void *sentinel = (void *)0x5a5a;
    void *p = sentinel;
    size_t pitch = 7;
    cudaError_t e = cudaMallocPitch(&p, &pitch, (size_t)1 << 40, (size_t)1 << 40);
    printf("pitch-overflow %d\n", e);
    if (e != cudaErrorMemoryAllocation)
        fail("cudaMallocPitch(2^40, 2^40)", e, cudaErrorMemoryAllocation);
    if (p != sentinel || pitch != 7) {
        fprintf(stderr, "target: failed cudaMallocPitch changed its out-parameters\n");
        return 1;
    }
    return 0;
}

/* dlreload: the driver loaded, used, unloaded and loaded again at run time,
 * then wrapped names looked up with RTLD_DEFAULT and RTLD_NEXT.
 * Live at exit: 2 + 4 + 8 + 16 MiB; two unknown frees. */
struct extent {
    uintptr_t lo, hi;
};

static int find_libcuda(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    struct extent *x = data;
    const char *slash = strrchr(info->dlpi_name, '/');
    const char *base = slash != NULL ? slash + 1 : info->dlpi_name;
    if (strcmp(base, "libcuda.so.1") != 0)
        return 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD)
            continue;
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
        uintptr_t hi = lo + ph->p_memsz;
        if (x->lo == 0 || lo < x->lo)
            x->lo = lo;
        if (hi > x->hi)
            x->hi = hi;
    }
    return 1;
}

static void *need_sym(void *handle, const char *name)
{
    void *f = dlsym(handle, name);
    if (f == NULL) {
        fprintf(stderr, "target: dlsym(%s): %s\n", name, dlerror());
        exit(1);
    }
    return f;
}

NOINLINE CUdeviceptr dl_second_alloc(PFN_cuMemAlloc_v2 f)
{
    CUdeviceptr d = 0;
    check("cuMemAlloc_v2", f(&d, 2 * MiB));
    return d;
}

NOINLINE void *dl_default_alloc(cudaError_t (*f)(void **, size_t))
{
    void *p = NULL;
    check("dlsym(RTLD_DEFAULT) cudaMalloc", f(&p, 4 * MiB));
    return p;
}

NOINLINE void *dl_next_alloc(cudaError_t (*f)(void **, size_t))
{
    void *p = NULL;
    check("dlsym(RTLD_NEXT) cudaMalloc", f(&p, 8 * MiB));
    return p;
}

NOINLINE CUdeviceptr dl_default_driver_alloc(PFN_cuMemAlloc_v2 f)
{
    CUdeviceptr d = 0;
    check("dlsym(RTLD_DEFAULT) cuMemAlloc_v2", f(&d, 16 * MiB));
    return d;
}

static int scenario_dlreload(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        fprintf(stderr, "target: dlopen libcuda.so.1: %s\n", dlerror());
        return 1;
    }
    PFN_cuMemFree_v2 free1 = (PFN_cuMemFree_v2)need_sym(h, "cuMemFree_v2");
    /* An unknown free: the driver answers CUDA_ERROR_INVALID_VALUE. */
    printf("first unknown-free %d\n", free1(0x1234));
    struct extent old = {0, 0};
    dl_iterate_phdr(find_libcuda, &old);
    dlclose(h);
    void *still = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    int unloaded = still == NULL;
    if (still != NULL)
        dlclose(still);
    /* Keep the old addresses taken, so that a new load lands elsewhere and a
     * stale pointer into the old one faults. */
    if (unloaded && old.hi > old.lo) {
        size_t len = (old.hi - old.lo + 4095) & ~(size_t)4095;
        void *m = mmap((void *)(old.lo & ~(uintptr_t)4095), len, PROT_NONE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        if (m == MAP_FAILED)
            fprintf(stderr, "target: cannot reserve the old libcuda range: %s\n", strerror(errno));
    }
    h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (h == NULL) {
        fprintf(stderr, "target: dlopen libcuda.so.1 again: %s\n", dlerror());
        return 1;
    }
    PFN_cuMemAlloc_v2 alloc2 = (PFN_cuMemAlloc_v2)need_sym(h, "cuMemAlloc_v2");
    (void)dl_second_alloc(alloc2);
    PFN_cuMemFree_v2 free_default = (PFN_cuMemFree_v2)need_sym(RTLD_DEFAULT, "cuMemFree_v2");
    printf("default unknown-free %d\n", free_default(0x1234));

    typedef cudaError_t (*malloc_fn)(void **, size_t);
    malloc_fn by_default = (malloc_fn)need_sym(RTLD_DEFAULT, "cudaMalloc");
    malloc_fn by_next = (malloc_fn)need_sym(RTLD_NEXT, "cudaMalloc");
    printf("default-is-linked %s\n", by_default == cudaMalloc ? "yes" : "no");
    (void)dl_default_alloc(by_default);
    (void)dl_next_alloc(by_next);
    PFN_cuMemAlloc_v2 drv_default = (PFN_cuMemAlloc_v2)need_sym(RTLD_DEFAULT, "cuMemAlloc_v2");
    (void)dl_default_driver_alloc(drv_default);
    return 0;
}

/* odd-rbp: cudaMalloc called from a frame that has no unwind information and
 * holds rbp = -8 (code without CFI may use rbp as a general register).
 * Live at exit: 1 MiB. */
#if defined(__x86_64__)
int odd_rbp_call(void *fn, void *a, size_t b);
__asm__(".text\n"
        ".globl odd_rbp_call\n"
        ".type odd_rbp_call, @function\n"
        "odd_rbp_call:\n"
        "    push %rbp\n"
        "    mov $-8, %rbp\n"
        "    mov %rdi, %rax\n"
        "    mov %rsi, %rdi\n"
        "    mov %rdx, %rsi\n"
        "    call *%rax\n"
        "    pop %rbp\n"
        "    ret\n"
        ".size odd_rbp_call, .-odd_rbp_call\n");
#endif

static int scenario_odd_rbp(void)
{
#if defined(__x86_64__)
    void *p = NULL;
    check("cudaMalloc through a frame without CFI", odd_rbp_call((void *)cudaMalloc, &p, 1 * MiB));
    printf("odd-rbp %s\n", p != NULL ? "allocated" : "null");
    return 0;
#else
    printf("odd-rbp allocated\n");
    return device_alloc_named(1 * MiB) != NULL ? 0 : 1;
#endif
}

/* ----------------------------------------------------------------- main */

static void usage(void)
{
    fprintf(stderr, "usage: target kinds | threads N M | leak N | snapshot | kill | fork | "
                    "forkexec | errors | none | sleep-snapshot | pause N | sigint-exit | "
                    "burst N | churn N | query | forkexec-tools | reap | pitch-overflow | "
                    "dlreload | odd-rbp | stuck-exit\n");
}

/* ---- Found by the adversarial review of 2026-11-30 ------------------------------------ */

static void *forkstart_worker(void *arg)
{
    (void)arg;
    for (int i = 0; i < 2000; i++) {
        void *p;
        check("cudaMalloc", cudaMalloc(&p, 4096));
        check("cudaFree", cudaFree(p));
    }
    return NULL;
}

/* fork-start: 8 threads start allocating (the shim starts up: module scans) while the main
 * thread forks 3 children at once; each child allocates and exit(5)s. A child that hangs is a
 * failure the test sees as a timeout. */
static int scenario_fork_start(void)
{
    pthread_t t[8];
    for (int i = 0; i < 8; i++)
        pthread_create(&t[i], NULL, forkstart_worker, NULL);
    int bad = 0;
    for (int k = 0; k < 3; k++) {
        pid_t c = fork();
        if (c == 0) {
            void *p;
            cudaMalloc(&p, 123);
            exit(5);
        }
        int st;
        waitpid(c, &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 5)
            bad++;
    }
    for (int i = 0; i < 8; i++)
        pthread_join(t[i], NULL);
    printf("bad children %d\n", bad);
    return bad ? 1 : 0;
}

static void *cancel_worker(void *arg)
{
    (void)arg;
    for (;;) {
        void *p;
        if (cudaMalloc(&p, 4096) != cudaSuccess)
            abort();
        cudaFree(p);
        pthread_testcancel();
    }
    return NULL;
}

/* cancel US: a thread allocating in a loop (its first allocation starts the shim) is
 * cancelled after US microseconds; then main allocates once more. */
static int scenario_cancel(int argc, char **argv)
{
    int us = argc > 2 ? atoi(argv[2]) : 0;
    pthread_t t;
    pthread_create(&t, NULL, cancel_worker, NULL);
    if (us > 0)
        usleep(us);
    pthread_cancel(t);
    void *r;
    pthread_join(t, &r);
    void *p;
    check("cudaMalloc", cudaMalloc(&p, 77));
    printf("cancelled %d\n", r == PTHREAD_CANCELED);
    return 0;
}

/* close-fds PREFIX: allocate, close every descriptor from 3 up (as daemons do), open eight
 * files PREFIX.0 .. PREFIX.7 (they take the lowest free numbers, the shim's old socket's among
 * them), allocate 200 more times, then write one line to each file: every write must succeed. */
static int scenario_close_fds(int argc, char **argv)
{
    if (argc < 3)
        return 2;
    void *p;
    check("cudaMalloc", cudaMalloc(&p, MiB));
    for (int fd = 3; fd < 1024; fd++)
        close(fd);
    int f[8];
    for (int i = 0; i < 8; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s.%d", argv[2], i);
        f[i] = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
    }
    for (int i = 0; i < 200; i++)
        check("cudaMalloc", cudaMalloc(&p, 4096));
    int bad = 0;
    for (int i = 0; i < 8; i++)
        if (write(f[i], "data\n", 5) != 5)
            bad++;
    printf("failed writes %d\n", bad);
    return bad ? 1 : 0;
}

/* quick-end HOW: 100 allocations of 1 MiB, then end with _exit(5), _Exit(5) or
 * quick_exit(5): no atexit handler runs. */
static int scenario_quick_end(int argc, char **argv)
{
    const char *how = argc > 2 ? argv[2] : "_exit";
    void *p;
    for (int i = 0; i < 100; i++)
        check("cudaMalloc", cudaMalloc(&p, MiB));
    printf("ok\n");
    fflush(stdout);
    if (strcmp(how, "_Exit") == 0)
        _Exit(5);
    if (strcmp(how, "quick_exit") == 0)
        quick_exit(5);
    _exit(5);
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
    } else if (strcmp(s, "pitch-overflow") == 0) {
        rc = scenario_pitch_overflow();
    } else if (strcmp(s, "dlreload") == 0) {
        rc = scenario_dlreload();
    } else if (strcmp(s, "odd-rbp") == 0) {
        rc = scenario_odd_rbp();
    } else if (strcmp(s, "fork-start") == 0) {
        rc = scenario_fork_start();
    } else if (strcmp(s, "cancel") == 0) {
        rc = scenario_cancel(argc, argv);
    } else if (strcmp(s, "close-fds") == 0) {
        rc = scenario_close_fds(argc, argv);
    } else if (strcmp(s, "quick-end") == 0) {
        rc = scenario_quick_end(argc, argv);
    } else {
        usage();
        return 2;
    }
    if (rc == 0)
        printf("ok\n");
    return rc;
}
