/*
 * Scenarios of the test target (see target.c) about what gets traced: the
 * allocation kinds, threads, a leak, snapshots on signal and on demand, the
 * fault suite's pause, burst, churn and query.
 */
#include "target.h"

#include <dlfcn.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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

int scenario_kinds(void)
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

/* ------------------------------------------------------------- malloc3d */

/* cudaMalloc3D of 1000 x 10 x 3 bytes: pitch 1024, so 30720 bytes. */
NOINLINE void *malloc3d_kept(void)
{
    struct cudaPitchedPtr pp = {0};
    struct cudaExtent e = {1000, 10, 3};
    check("cudaMalloc3D", cudaMalloc3D(&pp, e));
    if (pp.pitch != 1024 || pp.xsize != 1000 || pp.ysize != 10) {
        fprintf(stderr, "target: cudaMalloc3D gave pitch %zu, xsize %zu, ysize %zu\n", pp.pitch, pp.xsize,
                pp.ysize);
        exit(1);
    }
    print_alloc("cudaMalloc3D", pp.pitch * 10 * 3, pp.ptr);
    return pp.ptr;
}

NOINLINE void *malloc3d_freed(void)
{
    struct cudaPitchedPtr pp = {0};
    struct cudaExtent e = {512, 4, 2};
    check("cudaMalloc3D", cudaMalloc3D(&pp, e));
    print_alloc("cudaMalloc3D", pp.pitch * 4 * 2, pp.ptr);
    return pp.ptr;
}

/* malloc3d: one kept (30720 bytes), one freed by cudaFree (4096 bytes), one failed (a zero
 * height, 0 bytes asked). */
int scenario_malloc3d(void)
{
    (void)malloc3d_kept();
    check("cudaFree", cudaFree(malloc3d_freed()));
    struct cudaPitchedPtr pp = {0};
    struct cudaExtent zero = {256, 0, 1};
    cudaError_t e = cudaMalloc3D(&pp, zero);
    if (e != cudaErrorInvalidValue)
        fail("cudaMalloc3D(256, 0, 1)", e, cudaErrorInvalidValue);
    return 0;
}

/* -------------------------------------------------------------- threads */

static long thread_iterations;

static void *thread_main(void *arg)
{
    (void)arg;
    for (long i = 0; i < thread_iterations; i++)
        thread_alloc_free();
    return NULL;
}

int scenario_threads(int argc, char **argv)
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

int scenario_leak(int argc, char **argv)
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

/* ----------------------------------------------------------------- grow */

NOINLINE void *grow_base(void)
{
    void *p = NULL;
    check("cudaMalloc", cudaMalloc(&p, 1 * MiB));
    return p;
}

NOINLINE void *grow_step(size_t size)
{
    void *p = NULL; /* kept on purpose */
    check("cudaMalloc", cudaMalloc(&p, size));
    return p;
}

/* grow N SIZE MS: a 1 MiB buffer, then N allocations of SIZE bytes, one every MS ms, all kept
 * (gpushim top's tests watch the site grow), then waits for its stdin to end. The deadlines are
 * absolute, so the rate is SIZE per MS however late a wake-up comes. Prints "ready" after the
 * first. */
int scenario_grow(int argc, char **argv)
{
    long n = argc > 2 ? strtol(argv[2], NULL, 10) : 100;
    long size = argc > 3 ? strtol(argv[3], NULL, 10) : 65536;
    long ms = argc > 4 ? strtol(argv[4], NULL, 10) : 10;
    if (n < 1 || size < 1 || ms < 1) {
        fprintf(stderr, "target: grow N SIZE MS: bad argument\n");
        return 2;
    }
    (void)grow_base();
    struct timespec next;
    clock_gettime(CLOCK_MONOTONIC, &next);
    for (long i = 0; i < n; i++) {
        (void)grow_step((size_t)size);
        if (i == 0) {
            printf("ready\n");
            fflush(stdout);
        }
        next.tv_nsec += ms * 1000000L;
        while (next.tv_nsec >= 1000000000L) {
            next.tv_nsec -= 1000000000L;
            next.tv_sec += 1;
        }
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL) == EINTR) {
        }
    }
    return read_to_eof(NULL);
}

/* ------------------------------------------------------------- snapshot */

NOINLINE void *snapshot_before(void) { return device_alloc_named(1 * MiB); }
NOINLINE void *snapshot_after(void) { return device_alloc_named(2 * MiB); }

int scenario_snapshot(void)
{
    (void)snapshot_before();
    fflush(stdout);
    raise(SIGUSR1);
    (void)snapshot_after();
    return 0;
}

/* ------------------------------------------------------- sleep-snapshot */

NOINLINE void *sleeper_before(void) { return device_alloc_named(1 * MiB); }
NOINLINE void *sleeper_after(void) { return device_alloc_named(2 * MiB); }

int scenario_sleep_snapshot(void)
{
    (void)sleeper_before();
    /* TARGET_CHDIR: change the working directory once tracing has started. */
    const char *dir = getenv("TARGET_CHDIR");
    if (dir != NULL && chdir(dir) != 0) {
        perror("target: chdir");
        return 1;
    }
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

/* pause N: 1 MiB kept, "ready", stdin to its end, N alloc/free pairs of
 * 4 KiB, 2 MiB kept.  Live at exit: 3 MiB. */
int scenario_pause(int argc, char **argv)
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

int scenario_burst(int argc, char **argv)
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
int scenario_churn(int argc, char **argv)
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
int scenario_query(void)
{
    int dev = -1;
    size_t free_b = 0, total_b = 0;
    check("cudaGetDevice", cudaGetDevice(&dev));
    check("cudaMemGetInfo", cudaMemGetInfo(&free_b, &total_b));
    printf("query device %d total %zu\n", dev, total_b);
    printf("query threads %ld\n", status_field("Threads:"));
    return 0;
}

/* ---------------------------------------------------------------- steps */

/* A workspace per size, kept in a table: four sizes asked for in turn. */
NOINLINE void *steps_workspace(size_t size)
{
    static void *cache[4];
    static size_t sizes[4];
    for (int i = 0; i < 4; i++) {
        if (sizes[i] == size)
            return cache[i];
        if (sizes[i] == 0) {
            check("cudaMalloc", cudaMalloc(&cache[i], size));
            sizes[i] = size;
            return cache[i];
        }
    }
    return NULL;
}

/* One buffer per step, never freed. */
NOINLINE void *steps_leak(size_t size)
{
    void *p = NULL; /* kept on purpose */
    check("cudaMalloc", cudaMalloc(&p, size));
    return p;
}

/* steps workspace|leak N: N steps of the program's own work, each a cudaMemset (through the
 * runtime's driver table) and a kernel launch (the driver's symbol). `workspace` asks for one
 * of four workspaces each step: they are made in the first four steps and reused for the rest
 * (a warm-up, however fast). `leak` allocates 1 MiB every step and keeps it. */
int scenario_steps(int argc, char **argv)
{
    const char *how = argc > 2 ? argv[2] : "";
    long n = argc > 3 ? strtol(argv[3], NULL, 10) : 300;
    int leak = strcmp(how, "leak") == 0;
    if ((!leak && strcmp(how, "workspace") != 0) || n < 1) {
        fprintf(stderr, "target: steps workspace|leak N: bad arguments\n");
        return 2;
    }
    const size_t sizes[4] = {1 * MiB, 2 * MiB, 3 * MiB, 4 * MiB};
    /* The driver's kernel launch as JAX and CuPy find it: dlsym on libcuda. */
    void *lib = dlopen("libcuda.so.1", RTLD_NOW);
    PFN_cuLaunchKernel cuLaunchKernel = lib ? (PFN_cuLaunchKernel)dlsym(lib, "cuLaunchKernel") : NULL;
    if (cuLaunchKernel == NULL) {
        fprintf(stderr, "target: no cuLaunchKernel in libcuda.so.1\n");
        return 1;
    }
    for (long i = 0; i < n; i++) {
        void *p = leak ? steps_leak(1 * MiB) : steps_workspace(sizes[i % 4]);
        size_t size = leak ? 1 * MiB : sizes[i % 4];
        check("cudaMemset", cudaMemset(p, (int)(i & 0xff), size));
        if (cuLaunchKernel(NULL, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL) != CUDA_SUCCESS)
            fail("cuLaunchKernel", cudaErrorInitializationError, cudaSuccess);
    }
    printf("%ld steps\n", n);
    return 0;
}

