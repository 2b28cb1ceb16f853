/*
 * Programs that do what real programs do and that a preloaded tool must not disturb
 * (tests/never_harm.rs).  Linked to the stand-in libcudart.so.13.
 *
 * Usage: hostile <scenario>; each prints "ok" last on success.
 */
#define _GNU_SOURCE
#include "cudart_standin.h"
#include "cuda_standin.h"

#include <dirent.h>
#include <limits.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <dlfcn.h>
#include <sys/syscall.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))
#define MiB ((size_t)1 << 20)
#define KiB ((size_t)1 << 10)

static void check(const char *what, cudaError_t got)
{
    if (got != cudaSuccess) {
        fprintf(stderr, "hostile: %s returned %d\n", what, got);
        exit(1);
    }
}

/* atfork-lock: an allocator that holds its own lock around cudaMalloc and takes the same
 * lock in its fork prepare handler (as allocators that must fork safely do).  The shim's
 * first allocation must not run the program's fork handlers.  Live at exit: 1 MiB. */
static pthread_mutex_t alloc_lock = PTHREAD_MUTEX_INITIALIZER;
static void prepare(void) { pthread_mutex_lock(&alloc_lock); }
static void release(void) { pthread_mutex_unlock(&alloc_lock); }

NOINLINE static void *locked_alloc(size_t n)
{
    void *p = NULL;
    pthread_mutex_lock(&alloc_lock);
    check("cudaMalloc", cudaMalloc(&p, n));
    pthread_mutex_unlock(&alloc_lock);
    return p;
}

static int scenario_atfork_lock(void)
{
    pthread_atfork(prepare, release, release);
    (void)locked_alloc(1 * MiB);
    return 0;
}

/* pipe-eof: the program's pipe (not close-on-exec) is open when the shim starts its collector;
 * then the program closes the write end and expects EOF on the read end.  Live: 1 MiB. */
static int scenario_pipe_eof(void)
{
    int p[2];
    if (pipe(p) != 0)
        return 1;
    void *d = NULL;
    check("cudaMalloc", cudaMalloc(&d, 1 * MiB));
    close(p[1]);
    char c;
    ssize_t n = read(p[0], &c, 1);
    printf("read %zd\n", n);
    return n == 0 ? 0 : 1;
}

/* stdout-eof: the program's stdout is a pipe to a reader (a child here, `prog | head` in
 * life); after its first allocation the program closes its stdout and waits (10 s at most) for
 * the reader to see EOF. Prints on stderr whether it did, since stdout is closed. */
static int scenario_stdout_eof(void)
{
    int q[2], r[2];
    if (pipe(q) != 0 || pipe(r) != 0)
        return 1;
    pid_t reader = fork();
    if (reader == 0) {
        close(q[1]);
        close(r[0]);
        char buf[64];
        while (read(q[0], buf, sizeof buf) > 0)
            ;
        (void)write(r[1], "e", 1);
        _exit(0);
    }
    close(q[0]);
    close(r[1]);
    dup2(q[1], STDOUT_FILENO);
    close(q[1]);
    void *d = NULL;
    check("cudaMalloc", cudaMalloc(&d, 1 * MiB));
    close(STDOUT_FILENO);
    struct pollfd pfd = {.fd = r[0], .events = POLLIN};
    int seen = poll(&pfd, 1, 10000) == 1;
    fprintf(stderr, "stdout-eof: the reader %s EOF\n", seen ? "saw" : "did not see");
    kill(reader, SIGKILL);
    waitpid(reader, NULL, 0);
    return seen ? 0 : 1;
}

/* sigusr1-ignored: started with SIGUSR1 ignored (inherited); after its first allocation the
 * signal must still be ignored, so that children it execs inherit that (a handler would be
 * reset to the default action, which ends them). */
static int scenario_sigusr1_ignored(void)
{
    void *d = NULL;
    check("cudaMalloc", cudaMalloc(&d, 1 * MiB));
    struct sigaction cur;
    if (sigaction(SIGUSR1, NULL, &cur) != 0)
        return 1;
    printf("SIGUSR1 %s\n", cur.sa_handler == SIG_IGN ? "still ignored" : "no longer ignored");
    return 0;
}

/* sigwait: a server that blocks SIGTERM and takes it with sigwait, after its first
 * allocation started the shim's thread.  Live: 1 MiB. */
/* How many threads other than the caller do not block signal `sig` (/proc/self/task/N/status,
 * SigBlk); -1 if that cannot be read. */
static int threads_not_blocking(int sig)
{
    DIR *dir = opendir("/proc/self/task");
    if (dir == NULL)
        return -1;
    int n = 0;
    long me = (long)syscall(SYS_gettid);
    struct dirent *de;
    while ((de = readdir(dir)) != NULL) {
        long tid = strtol(de->d_name, NULL, 10);
        if (tid <= 0 || tid == me)
            continue;
        char path[64], line[256];
        snprintf(path, sizeof path, "/proc/self/task/%ld/status", tid);
        FILE *f = fopen(path, "r");
        if (f == NULL)
            continue;
        while (fgets(line, sizeof line, f) != NULL) {
            unsigned long long mask;
            if (sscanf(line, "SigBlk: %llx", &mask) == 1 && !(mask & (1ull << (sig - 1))))
                n++;
        }
        fclose(f);
    }
    closedir(dir);
    return n;
}

static int scenario_sigwait(void)
{
    void *d = NULL;
    check("cudaMalloc", cudaMalloc(&d, 1 * MiB));
    /* Where the kernel may deliver a process-directed SIGTERM besides this thread. */
    printf("other threads taking SIGTERM %d\n", threads_not_blocking(SIGTERM));
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    kill(getpid(), SIGTERM);
    int sig = 0;
    if (sigwait(&set, &sig) != 0)
        return 1;
    printf("sigwait %d\n", sig);
    return sig == SIGTERM ? 0 : 1;
}

/* coroutine: cudaMalloc from a coroutine whose stack is mapped below the thread's stack, called
 * through a frame without unwind information whose rbp points into an unmapped page between the
 * coroutine's stack and the thread's stack.  Live: 1 MiB. */
#if defined(__x86_64__)
int stale_rbp_call(void *fn, void *a, size_t b, void *rbp);
__asm__(".text\n"
        ".globl stale_rbp_call\n"
        ".type stale_rbp_call, @function\n"
        "stale_rbp_call:\n"
        "    push %rbp\n"
        "    mov %rcx, %rbp\n"
        "    mov %rdi, %rax\n"
        "    mov %rsi, %rdi\n"
        "    mov %rdx, %rsi\n"
        "    call *%rax\n"
        "    pop %rbp\n"
        "    ret\n"
        ".size stale_rbp_call, .-stale_rbp_call\n");
#endif

static ucontext_t main_ctx, co_ctx;
static void *co_result;
static char *co_hole;

static void coroutine_body(void)
{
#if defined(__x86_64__)
    check("cudaMalloc on a coroutine stack",
          stale_rbp_call((void *)cudaMalloc, &co_result, 1 * MiB, co_hole + 64));
#else
    check("cudaMalloc on a coroutine stack", cudaMalloc(&co_result, 1 * MiB));
#endif
}

static int scenario_coroutine(void)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE), stack = 64 * 1024;
    /* [stack][hole]: the hole is unmapped again at once. */
    char *m = mmap(NULL, stack + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return 1;
    co_hole = m + stack;
    munmap(co_hole, page);
    getcontext(&co_ctx);
    co_ctx.uc_stack.ss_sp = m;
    co_ctx.uc_stack.ss_size = stack;
    co_ctx.uc_link = &main_ctx;
    makecontext(&co_ctx, coroutine_body, 0);
    swapcontext(&main_ctx, &co_ctx);
    printf("coroutine %s\n", co_result != NULL ? "allocated" : "null");
    return co_result != NULL ? 0 : 1;
}

/* atexit-free: a cleanup handler registered before the first allocation frees 4 x 16 MiB, and
 * the program's destructor frees 8 MiB more.  Live at exit: 0. */
static void *cleanup_blocks[4];
static void *destructor_block;

static void cleanup(void)
{
    for (int i = 0; i < 4; i++)
        check("cudaFree in an atexit handler", cudaFree(cleanup_blocks[i]));
}

__attribute__((destructor)) static void free_in_destructor(void)
{
    if (destructor_block != NULL)
        check("cudaFree in a destructor", cudaFree(destructor_block));
}

NOINLINE static void *cleanup_owned_alloc(size_t n)
{
    void *p = NULL;
    check("cudaMalloc", cudaMalloc(&p, n));
    return p;
}

static int scenario_atexit_free(void)
{
    atexit(cleanup);
    for (int i = 0; i < 4; i++)
        cleanup_blocks[i] = cleanup_owned_alloc(16 * MiB);
    destructor_block = cleanup_owned_alloc(8 * MiB);
    return 0;
}

/* dlmopen: a second copy of the runtime in a new link-map namespace, used through dlsym and
 * closed; then the program's own cudaMalloc.  Live: 2 MiB (1 MiB of them made by the second
 * copy, which the shim cannot keep loaded and so does not intercept). */
NOINLINE static void *own_alloc(size_t n)
{
    void *p = NULL;
    check("cudaMalloc", cudaMalloc(&p, n));
    return p;
}

static int scenario_dlmopen(void)
{
    void *h = dlmopen(LM_ID_NEWLM, "libcudart.so.13", RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        fprintf(stderr, "hostile: dlmopen: %s\n", dlerror());
        return 1;
    }
    cudaError_t (*other)(void **, size_t) = (cudaError_t(*)(void **, size_t))dlsym(h, "cudaMalloc");
    void *p = NULL;
    check("cudaMalloc of the second copy", other(&p, 1 * MiB));
    dlclose(h);
    (void)own_alloc(1 * MiB);
    (void)own_alloc(1 * MiB);
    return 0;
}

/* two-runtimes: a second runtime (libcudart.so.12) beside the program's own (libcudart.so.13):
 * a library dlopen'ed RTLD_LOCAL that links it, and a pointer taken from it with dlsym.  Each call
 * must reach the runtime it reaches without the shim: the program's own cudaMalloc its own
 * runtime, before and after the dlsym.  Prints what each runtime served.  Live at exit:
 * 1 + 4 + 8 + 16 MiB (the library's 2 MiB block is freed). */
NOINLINE static void *own_alloc_13(size_t n)
{
    void *p = NULL;
    check("cudaMalloc", cudaMalloc(&p, n));
    return p;
}

static int scenario_two_runtimes(void)
{
    (void)own_alloc_13(1 * MiB);
    void *user12 = dlopen("libcudauser12.so", RTLD_NOW | RTLD_LOCAL);
    void *user13 = dlopen("libcudauser.so", RTLD_NOW | RTLD_LOCAL);
    void *rt12 = dlopen("libcudart.so.12", RTLD_NOW | RTLD_LOCAL);
    if (user12 == NULL || user13 == NULL || rt12 == NULL) {
        fprintf(stderr, "hostile: dlopen: %s\n", dlerror());
        return 1;
    }
    cudaError_t (*alloc12)(void **, size_t) = (cudaError_t(*)(void **, size_t))dlsym(user12, "cudauser_alloc");
    cudaError_t (*free12)(void *) = (cudaError_t(*)(void *))dlsym(user12, "cudauser_free");
    cudaError_t (*alloc13)(void **, size_t) = (cudaError_t(*)(void **, size_t))dlsym(user13, "cudauser_alloc");
    void *p = NULL;
    check("cudauser_alloc through libcudart.so.12", alloc12(&p, 2 * MiB));
    check("cudauser_free through libcudart.so.12", free12(p));
    check("cudauser_alloc through libcudart.so.13", alloc13(&p, 4 * MiB));
    cudaError_t (*malloc12)(void **, size_t) = (cudaError_t(*)(void **, size_t))dlsym(rt12, "cudaMalloc");
    check("cudaMalloc from dlsym(libcudart.so.12)", malloc12(&p, 8 * MiB));
    (void)own_alloc_13(16 * MiB);
    PFN_cudart_standin_calls calls12 = (PFN_cudart_standin_calls)dlsym(rt12, "cudart_standin_calls");
    printf("runtime13 cudaMalloc=%lu cudaFree=%lu\n", cudart_standin_calls("cudaMalloc"),
           cudart_standin_calls("cudaFree"));
    printf("runtime12 cudaMalloc=%lu cudaFree=%lu\n", calls12("cudaMalloc"), calls12("cudaFree"));
    return 0;
}

/* slow-free: allocates 1 MiB and 7 MiB, says "ready", then frees the 7 MiB block, which the
 * stand-in makes wait (STANDIN_SLOW_FREE_BYTES/FIFO) as a free waits for a running kernel.
 * Live at exit: 1 MiB. */
NOINLINE static void *kept_alloc(size_t n)
{
    void *p = NULL;
    check("cudaMalloc", cudaMalloc(&p, n));
    return p;
}

static int scenario_slow_free(void)
{
    (void)kept_alloc(1 * MiB);
    void *slow = kept_alloc(7 * MiB);
    printf("ready\n");
    fflush(stdout);
    check("cudaFree of the slow block", cudaFree(slow));
    printf("freed\n");
    return 0;
}

/* arrays: CUDA arrays through the runtime and, by dlsym, the driver.  The stand-in pads each
 * array (each level) to 64 KiB, and the shim must report that footprint.  Live at exit:
 * a 64x64x64 float 3D array (1 MiB) and a 256x256 RGBA8 mipmapped array of 3 levels
 * (256 + 64 + 64 KiB).  Freed: a 1000x10 RGBA8 array (64 KiB) and a driver array. */
NOINLINE static cudaArray_t array_2d(void)
{
    struct cudaChannelFormatDesc rgba8 = {8, 8, 8, 8, cudaChannelFormatKindUnsigned};
    cudaArray_t a = NULL;
    check("cudaMallocArray", cudaMallocArray(&a, &rgba8, 1000, 10, 0));
    return a;
}

NOINLINE static cudaArray_t array_3d(void)
{
    struct cudaChannelFormatDesc f32 = {32, 0, 0, 0, cudaChannelFormatKindFloat};
    struct cudaExtent e = {64, 64, 64};
    cudaArray_t a = NULL;
    check("cudaMalloc3DArray", cudaMalloc3DArray(&a, &f32, e, 0));
    return a;
}

NOINLINE static cudaMipmappedArray_t array_mipmapped(void)
{
    struct cudaChannelFormatDesc rgba8 = {8, 8, 8, 8, cudaChannelFormatKindUnsigned};
    struct cudaExtent e = {256, 256, 0};
    cudaMipmappedArray_t m = NULL;
    check("cudaMallocMipmappedArray", cudaMallocMipmappedArray(&m, &rgba8, e, 3, 0));
    return m;
}

static int scenario_arrays(void)
{
    cudaArray_t a = array_2d();
    (void)array_3d();
    (void)array_mipmapped();
    check("cudaFreeArray", cudaFreeArray(a));
    void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (drv == NULL)
        return 1;
    PFN_cuArrayCreate_v2 create = (PFN_cuArrayCreate_v2)dlsym(drv, "cuArrayCreate_v2");
    PFN_cuArrayDestroy destroy = (PFN_cuArrayDestroy)dlsym(drv, "cuArrayDestroy");
    CUDA_ARRAY_DESCRIPTOR d = {128, 128, CU_AD_FORMAT_FLOAT, 4};
    CUarray da = NULL;
    if (create == NULL || destroy == NULL || create(&da, &d) != CUDA_SUCCESS || destroy(da) != CUDA_SUCCESS)
        return 1;
    return 0;
}

/* pthread-exit: the main thread ends with pthread_exit after a worker allocated 1 MiB and
 * returned: the process must end when its last thread does (exit status 0). */
static void *pthread_exit_worker(void *arg)
{
    (void)arg;
    (void)kept_alloc(1 * MiB);
    return NULL;
}

static int scenario_pthread_exit(void)
{
    pthread_t t;
    pthread_create(&t, NULL, pthread_exit_worker, NULL);
    printf("ok\n");
    fflush(stdout);
    pthread_exit(NULL);
}

/* closed-stdio: standard input and output closed before the first allocation must stay closed
 * (the shim's socket must not take their numbers).  Says so on stderr. */
static int scenario_closed_stdio(void)
{
    close(0);
    close(1);
    (void)kept_alloc(1 * MiB);
    int in = fcntl(0, F_GETFD), out = fcntl(1, F_GETFD);
    fprintf(stderr, "stdin %s, stdout %s\n", in < 0 ? "closed" : "open", out < 0 ? "closed" : "open");
    return in < 0 && out < 0 ? 0 : 1;
}

/* raw-fork: a child made by the fork system call itself (crash handlers do this; no fork
 * handler runs) allocates 20,000 times, more than the shim's channel holds, and exits; then
 * the parent.  Neither may block. */
static int scenario_raw_fork(void)
{
    (void)kept_alloc(1 * MiB);
    long pid = syscall(SYS_fork);
    if (pid == 0) {
        for (int i = 0; i < 20000; i++) {
            void *p = NULL;
            if (cudaMalloc(&p, 4096) != cudaSuccess || cudaFree(p) != cudaSuccess)
                _exit(3);
        }
        exit(0);
    }
    int status = 0;
    waitpid((pid_t)pid, &status, 0);
    printf("child status %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    return 0;
}

/* small-stack: allocations from a thread with the smallest stack pthreads allow (16 KiB):
 * the shim must not overflow it.  Live at exit: 2 x 1 MiB. */
static void *small_stack_worker(void *arg)
{
    (void)arg;
    (void)kept_alloc(1 * MiB);
    (void)kept_alloc(1 * MiB);
    return NULL;
}

static int scenario_small_stack(void)
{
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, PTHREAD_STACK_MIN);
    pthread_t t;
    if (pthread_create(&t, &attr, small_stack_worker, NULL) != 0)
        return 1;
    pthread_join(t, NULL);
    return 0;
}

/* device-reset: 64 MiB and 1 MiB of pinned memory, cudaDeviceReset (the context and its device
 * memory go), 1 MiB, then the driver's cuCtxDestroy of the current context (through dlsym), and
 * 2 MiB.  Live at exit: 2 MiB of device memory and the 1 MiB pinned. */
/* The stand-in driver shows 4 devices to this process (STANDIN_DEVICES), as a machine with
 * several GPUs does: the scenarios that use devices 1 to 3 call it before any CUDA call. */
static void four_devices(void) { setenv("STANDIN_DEVICES", "4", 1); }

static int scenario_device_reset(void)
{
    (void)kept_alloc(64 * MiB);
    void *pinned = NULL;
    check("cudaMallocHost", cudaMallocHost(&pinned, 1 * MiB));
    check("cudaDeviceReset", cudaDeviceReset());
    (void)kept_alloc(1 * MiB);
    void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    CUresult (*get_current)(void **) = drv ? (CUresult(*)(void **))dlsym(drv, "cuCtxGetCurrent") : NULL;
    CUresult (*destroy)(void *) = drv ? (CUresult(*)(void *))dlsym(drv, "cuCtxDestroy_v2") : NULL;
    void *ctx = NULL;
    if (get_current == NULL || destroy == NULL || get_current(&ctx) != CUDA_SUCCESS || destroy(ctx) != CUDA_SUCCESS)
        return 1;
    (void)kept_alloc(2 * MiB);
    return 0;
}

/* stream-device: stream-ordered allocations on a stream of device 1 while device 0 is current
 * (the stand-in's stream handle 0x5001 belongs to device 1).  Live at exit: 8 MiB on GPU 1
 * through the runtime, 4 MiB on GPU 1 through the driver, 1 MiB on GPU 0. */
static int scenario_stream_device(void)
{
    four_devices();
    cudaStream_t on_gpu1 = (cudaStream_t)(uintptr_t)0x5001;
    void *p = NULL;
    check("cudaMallocAsync", cudaMallocAsync(&p, 8 * MiB, on_gpu1));
    check("cudaMallocAsync", cudaMallocAsync(&p, 1 * MiB, NULL));
    void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    CUresult (*alloc_async)(CUdeviceptr *, size_t, CUstream) =
        drv ? (CUresult(*)(CUdeviceptr *, size_t, CUstream))dlsym(drv, "cuMemAllocAsync") : NULL;
    CUdeviceptr d = 0;
    if (alloc_async == NULL || alloc_async(&d, 4 * MiB, (CUstream)on_gpu1) != CUDA_SUCCESS)
        return 1;
    return 0;
}

/* The driver's function `name` (through dlsym, so the shim's export where it wraps it). */
static void *driver_fn(const char *name)
{
    static void *drv;
    if (drv == NULL)
        drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    void *f = drv ? dlsym(drv, name) : NULL;
    if (f == NULL) {
        fprintf(stderr, "hostile: no %s\n", name);
        exit(1);
    }
    return f;
}

static void check_cu(const char *what, CUresult got)
{
    if (got != CUDA_SUCCESS) {
        fprintf(stderr, "hostile: %s returned %d\n", what, got);
        exit(1);
    }
}

/* contexts: a driver program's own contexts beside device 0's primary one (as PyCUDA makes
 * them). 1 MiB in the retained primary context, 2 MiB in a context made by cuCtxCreate_v2,
 * 4 MiB in one made by cuCtxCreate_v4; the first created context is destroyed from a thread
 * where the primary context is current (its 2 MiB go), then the last release of the primary
 * context destroys it (its 1 MiB go). Live at exit: the 4 MiB. */
static int scenario_contexts(void)
{
    CUresult (*retain)(void **, int) = (CUresult(*)(void **, int))driver_fn("cuDevicePrimaryCtxRetain");
    CUresult (*release)(int) = (CUresult(*)(int))driver_fn("cuDevicePrimaryCtxRelease_v2");
    CUresult (*set_current)(void *) = (CUresult(*)(void *))driver_fn("cuCtxSetCurrent");
    CUresult (*create_v2)(void **, unsigned, int) = (CUresult(*)(void **, unsigned, int))driver_fn("cuCtxCreate_v2");
    CUresult (*create_v4)(void **, void *, unsigned, int) =
        (CUresult(*)(void **, void *, unsigned, int))driver_fn("cuCtxCreate_v4");
    CUresult (*destroy)(void *) = (CUresult(*)(void *))driver_fn("cuCtxDestroy_v2");
    CUresult (*mem_alloc)(CUdeviceptr *, size_t) = (CUresult(*)(CUdeviceptr *, size_t))driver_fn("cuMemAlloc_v2");
    void *primary = NULL, *own = NULL, *other = NULL;
    CUdeviceptr d;
    check_cu("cuDevicePrimaryCtxRetain", retain(&primary, 0));
    check_cu("cuCtxSetCurrent", set_current(primary));
    check_cu("cuMemAlloc_v2", mem_alloc(&d, 1 * MiB));
    check_cu("cuCtxCreate_v2", create_v2(&own, 0, 0));
    check_cu("cuMemAlloc_v2", mem_alloc(&d, 2 * MiB));
    check_cu("cuCtxCreate_v4", create_v4(&other, NULL, 0, 0));
    check_cu("cuMemAlloc_v2", mem_alloc(&d, 4 * MiB));
    check_cu("cuCtxSetCurrent", set_current(primary));
    check_cu("cuCtxDestroy_v2", destroy(own));
    check_cu("cuDevicePrimaryCtxRelease_v2", release(0));
    return 0;
}

/* ctx-device-memory: in a context the program created, 1 MiB by cuMemAlloc (the context's), 4
 * MiB by cuMemAllocAsync on the legacy stream and 8 MiB from a pool of device 1 (the devices',
 * not the context's); the context is destroyed (1 MiB goes), then the program frees the other
 * two, which the driver still holds. Live at exit: nothing; no unknown free. */
static int scenario_ctx_device_memory(void)
{
    CUresult (*create_v2)(void **, unsigned, int) = (CUresult(*)(void **, unsigned, int))driver_fn("cuCtxCreate_v2");
    CUresult (*destroy)(void *) = (CUresult(*)(void *))driver_fn("cuCtxDestroy_v2");
    CUresult (*mem_alloc)(CUdeviceptr *, size_t) = (CUresult(*)(CUdeviceptr *, size_t))driver_fn("cuMemAlloc_v2");
    CUresult (*alloc_async)(CUdeviceptr *, size_t, CUstream) =
        (CUresult(*)(CUdeviceptr *, size_t, CUstream))driver_fn("cuMemAllocAsync");
    CUresult (*free_async)(CUdeviceptr, CUstream) = (CUresult(*)(CUdeviceptr, CUstream))driver_fn("cuMemFreeAsync");
    CUresult (*pool_create)(CUmemoryPool *, const CUmemPoolProps *) =
        (CUresult(*)(CUmemoryPool *, const CUmemPoolProps *))driver_fn("cuMemPoolCreate");
    CUresult (*alloc_from)(CUdeviceptr *, size_t, CUmemoryPool, CUstream) =
        (CUresult(*)(CUdeviceptr *, size_t, CUmemoryPool, CUstream))driver_fn("cuMemAllocFromPoolAsync");
    CUmemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = 1;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = 1;
    CUmemoryPool pool = NULL;
    void *own = NULL;
    CUdeviceptr a, b, c;
    check_cu("cuMemPoolCreate", pool_create(&pool, &props));
    check_cu("cuCtxCreate_v2", create_v2(&own, 0, 0));
    check_cu("cuMemAlloc_v2", mem_alloc(&a, 1 * MiB));
    check_cu("cuMemAllocAsync", alloc_async(&b, 4 * MiB, NULL));
    check_cu("cuMemAllocFromPoolAsync", alloc_from(&c, 8 * MiB, pool, NULL));
    check_cu("cuCtxDestroy_v2", destroy(own));
    check_cu("cuMemFreeAsync", free_async(b, NULL));
    check_cu("cuMemFreeAsync", free_async(c, NULL));
    return 0;
}

/* pool-device: a memory pool located on device 1 (the stand-in's pool 0x7001), allocated from
 * on a stream of device 0: 8 MiB through the driver, 2 MiB through the runtime. Live at exit:
 * 10 MiB on GPU 1, nothing on GPU 0. */
static int scenario_pool_device(void)
{
    four_devices();
    CUresult (*pool_create)(CUmemoryPool *, const CUmemPoolProps *) =
        (CUresult(*)(CUmemoryPool *, const CUmemPoolProps *))driver_fn("cuMemPoolCreate");
    CUresult (*alloc_from)(CUdeviceptr *, size_t, CUmemoryPool, CUstream) =
        (CUresult(*)(CUdeviceptr *, size_t, CUmemoryPool, CUstream))driver_fn("cuMemAllocFromPoolAsync");
    CUmemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = 1; /* CU_MEM_ALLOCATION_TYPE_PINNED */
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = 1;
    CUmemoryPool pool = NULL;
    check_cu("cuMemPoolCreate", pool_create(&pool, &props));
    CUstream on_gpu0 = (CUstream)(uintptr_t)0x5000;
    CUdeviceptr d;
    check_cu("cuMemAllocFromPoolAsync", alloc_from(&d, 8 * MiB, pool, on_gpu0));
    void *p = NULL;
    check("cudaMallocFromPoolAsync", cudaMallocFromPoolAsync(&p, 2 * MiB, pool, on_gpu0));
    return 0;
}

/* oom-device: with 64 MiB per device (STANDIN_DEVICE_BYTES), 48 MiB on device 0 (current), 32
 * MiB on a stream of device 1, then 48 MiB more there, which fails with out of memory: device
 * 1 has 32 MiB free of 64 (device 0 has 16). */
static int scenario_oom_device(void)
{
    four_devices();
    cudaStream_t on_gpu1 = (cudaStream_t)(uintptr_t)0x5001;
    void *p = NULL;
    check("cudaMalloc", cudaMalloc(&p, 48 * MiB));
    check("cudaMallocAsync", cudaMallocAsync(&p, 32 * MiB, on_gpu1));
    if (cudaMallocAsync(&p, 48 * MiB, on_gpu1) == cudaSuccess)
        return 1;
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Virtual memory management through the driver (dlsym on libcuda.so.1, as XLA and PyTorch do).
 * Each scenario prints what the stand-in driver saw (cuMemGetInfo) and raises SIGUSR1 where a
 * snapshot shows the collector's view in the middle. */

static struct {
    CUresult (*create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
    CUresult (*release)(CUmemGenericAllocationHandle);
    CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
    CUresult (*address_free)(CUdeviceptr, size_t);
    CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
    CUresult (*unmap)(CUdeviceptr, size_t);
    CUresult (*retain)(CUmemGenericAllocationHandle *, void *);
    CUresult (*export_fd)(void *, CUmemGenericAllocationHandle, int, unsigned long long);
    CUresult (*import_fd)(CUmemGenericAllocationHandle *, void *, int);
    CUresult (*mem_info)(size_t *, size_t *);
} vmm;

static void drv(const char *what, CUresult r)
{
    if (r != CUDA_SUCCESS) {
        fprintf(stderr, "hostile: %s returned %d\n", what, r);
        exit(1);
    }
}

static void vmm_load(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (h == NULL)
        exit(1);
#define LOAD(field, name)                                                                                      \
    do {                                                                                                       \
        *(void **)&vmm.field = dlsym(h, name);                                                                 \
        if (vmm.field == NULL) {                                                                               \
            fprintf(stderr, "hostile: no %s\n", name);                                                         \
            exit(1);                                                                                           \
        }                                                                                                      \
    } while (0)
    LOAD(create, "cuMemCreate");
    LOAD(release, "cuMemRelease");
    LOAD(reserve, "cuMemAddressReserve");
    LOAD(address_free, "cuMemAddressFree");
    LOAD(map, "cuMemMap");
    LOAD(unmap, "cuMemUnmap");
    LOAD(retain, "cuMemRetainAllocationHandle");
    LOAD(export_fd, "cuMemExportToShareableHandle");
    LOAD(import_fd, "cuMemImportFromShareableHandle");
    LOAD(mem_info, "cuMemGetInfo_v2");
#undef LOAD
}

/* Device memory in use as the driver counts it, MiB. */
static size_t used_mib(void)
{
    size_t free_b = 0, total = 0;
    drv("cuMemGetInfo", vmm.mem_info(&free_b, &total));
    return (total - free_b) / MiB;
}

NOINLINE static CUmemGenericAllocationHandle vmm_create(size_t size)
{
    CUmemAllocationProp prop = {0};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    CUmemGenericAllocationHandle h = 0;
    drv("cuMemCreate", vmm.create(&h, size, &prop, 0));
    return h;
}

static CUdeviceptr vmm_reserve(size_t size)
{
    CUdeviceptr va = 0;
    drv("cuMemAddressReserve", vmm.reserve(&va, size, 0, 0, 0));
    return va;
}

static void snapshot_here(void)
{
    fflush(stdout);
    raise(SIGUSR1);
}

/* vmm-release-mapped: 64 MiB created, mapped, written, released; still in use and readable;
 * snapshot 1; unmapped (now freed). */
static int scenario_vmm_release_mapped(void)
{
    vmm_load();
    size_t base = used_mib();
    CUmemGenericAllocationHandle h = vmm_create(64 * MiB);
    CUdeviceptr va = vmm_reserve(64 * MiB);
    drv("cuMemMap", vmm.map(va, 64 * MiB, 0, h, 0));
    ((volatile char *)(uintptr_t)va)[12345] = 42;
    drv("cuMemRelease", vmm.release(h));
    printf("after release: +%zu MiB in use, byte %d\n", used_mib() - base, ((volatile char *)(uintptr_t)va)[12345]);
    snapshot_here();
    drv("cuMemUnmap", vmm.unmap(va, 64 * MiB));
    printf("after unmap: +%zu MiB in use\n", used_mib() - base);
    drv("cuMemAddressFree", vmm.address_free(va, 64 * MiB));
    return 0;
}

/* vmm-nccl: create, map, retain (the same handle comes back), release, unmap (snapshot 1:
 * one reference left), release. */
static int scenario_vmm_nccl(void)
{
    vmm_load();
    size_t base = used_mib();
    CUmemGenericAllocationHandle h = vmm_create(64 * MiB);
    CUdeviceptr va = vmm_reserve(64 * MiB);
    drv("cuMemMap", vmm.map(va, 64 * MiB, 0, h, 0));
    CUmemGenericAllocationHandle again = 0;
    drv("cuMemRetainAllocationHandle", vmm.retain(&again, (void *)(uintptr_t)(va + 4096)));
    printf("retained the same handle: %d\n", again == h);
    drv("cuMemRelease", vmm.release(again));
    drv("cuMemUnmap", vmm.unmap(va, 64 * MiB));
    printf("after unmap: +%zu MiB in use\n", used_mib() - base);
    snapshot_here();
    drv("cuMemRelease", vmm.release(h));
    printf("after the last release: +%zu MiB in use\n", used_mib() - base);
    drv("cuMemAddressFree", vmm.address_free(va, 64 * MiB));
    return 0;
}

/* vmm-unmap-two: two 32 MiB handles mapped side by side, one cuMemUnmap over both (snapshot
 * 1: both still referenced), then both released. */
static int scenario_vmm_unmap_two(void)
{
    vmm_load();
    size_t base = used_mib();
    CUmemGenericAllocationHandle a = vmm_create(32 * MiB), b = vmm_create(32 * MiB);
    CUdeviceptr va = vmm_reserve(64 * MiB);
    drv("cuMemMap", vmm.map(va, 32 * MiB, 0, a, 0));
    drv("cuMemMap", vmm.map(va + 32 * MiB, 32 * MiB, 0, b, 0));
    drv("cuMemUnmap", vmm.unmap(va, 64 * MiB));
    printf("after unmap: +%zu MiB in use\n", used_mib() - base);
    snapshot_here();
    drv("cuMemRelease", vmm.release(a));
    drv("cuMemRelease", vmm.release(b));
    printf("after release: +%zu MiB in use\n", used_mib() - base);
    drv("cuMemAddressFree", vmm.address_free(va, 64 * MiB));
    return 0;
}

/* vmm-import: 64 MiB exported as a POSIX descriptor and imported back (another handle for the
 * same memory), the import mapped (snapshot 1), unmapped, both handles released. */
static int scenario_vmm_import(void)
{
    vmm_load();
    size_t base = used_mib();
    CUmemGenericAllocationHandle h = vmm_create(64 * MiB);
    int fd = -1;
    drv("cuMemExportToShareableHandle", vmm.export_fd(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    CUmemGenericAllocationHandle imported = 0;
    drv("cuMemImportFromShareableHandle",
        vmm.import_fd(&imported, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    close(fd);
    CUdeviceptr va = vmm_reserve(64 * MiB);
    drv("cuMemMap", vmm.map(va, 64 * MiB, 0, imported, 0));
    printf("imported mapped: +%zu MiB in use\n", used_mib() - base);
    snapshot_here();
    drv("cuMemUnmap", vmm.unmap(va, 64 * MiB));
    drv("cuMemRelease", vmm.release(imported));
    drv("cuMemRelease", vmm.release(h));
    printf("after release: +%zu MiB in use\n", used_mib() - base);
    drv("cuMemAddressFree", vmm.address_free(va, 64 * MiB));
    return 0;
}

/* Graph memory (CUDA Programming Guide, "Graph Memory Nodes").  The capturing stream is the
 * stand-in's stream 0x5000 (device 0). */
#define CAPTURE_STREAM ((cudaStream_t)(uintptr_t)0x5000)

static void check_graph(const char *what, cudaError_t got) { check(what, got); }

/* A graph holding one allocation node of `n` bytes (and a free node for it if `freed`). */
NOINLINE static cudaGraph_t graph_alloc_node(size_t n, void **p, int freed)
{
    cudaGraph_t g = NULL;
    check_graph("cudaGraphCreate", cudaGraphCreate(&g, 0));
    CUDA_MEM_ALLOC_NODE_PARAMS a;
    memset(&a, 0, sizeof a);
    a.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    a.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    a.bytesize = n;
    cudaGraphNode_t an = NULL, fn = NULL;
    check_graph("cudaGraphAddMemAllocNode", cudaGraphAddMemAllocNode(&an, g, NULL, 0, &a));
    *p = (void *)(uintptr_t)a.dptr;
    if (freed)
        check_graph("cudaGraphAddMemFreeNode", cudaGraphAddMemFreeNode(&fn, g, &an, 1, *p));
    return g;
}

/* A step's own work (on a GPU the graph's kernels): it spreads the leak over the run, as in
 * examples/leak.c, so that timing can tell it from a burst before a slow exit. */
static volatile unsigned step_sink;
NOINLINE static void step_work(int step)
{
    unsigned h = (unsigned)step;
    for (int i = 0; i < 100000; i++)
        h = h * 1664525u + 1013904223u;
    step_sink = h;
}

/* graph-leak: 64 steps, each building a graph with a 1 MiB allocation node never freed,
 * launching it once and destroying it (graph destruction frees nothing), then a trim.  Live:
 * 64 MiB at graph_alloc_node. */
static int scenario_graph_leak(void)
{
    for (int i = 0; i < 64; i++) {
        step_work(i);
        void *p = NULL;
        cudaGraph_t g = graph_alloc_node(1 * MiB, &p, 0);
        cudaGraphExec_t e = NULL;
        check_graph("cudaGraphInstantiate", cudaGraphInstantiate(&e, g, 0));
        check_graph("cudaGraphLaunch", cudaGraphLaunch(e, CAPTURE_STREAM));
        check_graph("cudaGraphExecDestroy", cudaGraphExecDestroy(e));
        check_graph("cudaGraphDestroy", cudaGraphDestroy(g));
    }
    check_graph("cudaDeviceGraphMemTrim", cudaDeviceGraphMemTrim(0));
    return 0;
}

NOINLINE static void *captured_alloc(size_t n)
{
    void *p = NULL;
    check_graph("cudaMallocAsync", cudaMallocAsync(&p, n, CAPTURE_STREAM));
    return p;
}

/* graph-capture-unlaunched: a 32 MiB cudaMallocAsync captured into a graph that is destroyed
 * without being launched.  Live: nothing. */
static int scenario_graph_capture_unlaunched(void)
{
    check_graph("cudaStreamBeginCapture", cudaStreamBeginCapture(CAPTURE_STREAM, cudaStreamCaptureModeGlobal));
    (void)captured_alloc(32 * MiB);
    cudaGraph_t g = NULL;
    check_graph("cudaStreamEndCapture", cudaStreamEndCapture(CAPTURE_STREAM, &g));
    check_graph("cudaGraphDestroy", cudaGraphDestroy(g));
    return 0;
}

/* capture-queries: 100 pool-hit pairs on a stream of device 0 before any capture; then four
 * captures of a cudaMallocAsync/cuMemAllocAsync, each begun and ended another way (the runtime,
 * whose driver table comes from cuGetProcAddress; the driver's _v2_ptsz on the per-thread
 * stream by dlsym; cuStreamBeginCaptureToGraph and CUDA 10.0's cuStreamBeginCapture through
 * cuGetProcAddress); each graph destroyed unlaunched; then 100 pairs more and 1 MiB kept.
 * Prints how often the stand-in driver was asked a stream's capture state and device before,
 * during and after the captures. Live: 1 MiB. */
NOINLINE static void pool_pairs(int n)
{
    for (int i = 0; i < n; i++) {
        void *p = NULL;
        check("cudaMallocAsync", cudaMallocAsync(&p, 4096, CAPTURE_STREAM));
        check("cudaFreeAsync", cudaFreeAsync(p, CAPTURE_STREAM));
    }
}

NOINLINE static void capture_query_counts(const char *when)
{
    unsigned long (*calls)(const char *) = (unsigned long (*)(const char *))driver_fn("standin_calls");
    printf("%s is_capturing=%lu stream_device=%lu ctx_device=%lu\n", when, calls("cuStreamIsCapturing"),
           calls("cuStreamGetDevice"), calls("cuCtxGetDevice"));
}

static int scenario_capture_queries(void)
{
    typedef CUresult (*Begin2)(CUstream, int);
    typedef CUresult (*Begin1)(CUstream);
    typedef CUresult (*BeginToGraph)(CUstream, CUgraph, const void *, const void *, size_t, int);
    typedef CUresult (*End)(CUstream, CUgraph *);
    typedef CUresult (*AllocAsync)(CUdeviceptr *, size_t, CUstream);
    PFN_cuGetProcAddress_v1 gpa = (PFN_cuGetProcAddress_v1)driver_fn("cuGetProcAddress");
    PFN_cuGraphCreate graph_create = (PFN_cuGraphCreate)driver_fn("cuGraphCreate");
    PFN_cuGraphDestroy graph_destroy = (PFN_cuGraphDestroy)driver_fn("cuGraphDestroy");
    AllocAsync alloc_async = (AllocAsync)driver_fn("cuMemAllocAsync");
    pool_pairs(100);
    capture_query_counts("before");
    /* 1. The runtime. */
    check("cudaStreamBeginCapture", cudaStreamBeginCapture(CAPTURE_STREAM, cudaStreamCaptureModeGlobal));
    (void)captured_alloc(1 * MiB);
    cudaGraph_t g = NULL;
    check("cudaStreamEndCapture", cudaStreamEndCapture(CAPTURE_STREAM, &g));
    check("cudaGraphDestroy", cudaGraphDestroy(g));
    /* 2. The per-thread default stream, by dlsym. */
    check_cu("cuStreamBeginCapture_v2_ptsz", ((Begin2)driver_fn("cuStreamBeginCapture_v2_ptsz"))(NULL, 0));
    CUdeviceptr d = 0;
    check_cu("cuMemAllocAsync_ptsz", ((AllocAsync)driver_fn("cuMemAllocAsync_ptsz"))(&d, 2 * MiB, NULL));
    CUgraph cg = NULL;
    check_cu("cuStreamEndCapture_ptsz", ((End)driver_fn("cuStreamEndCapture_ptsz"))(NULL, &cg));
    check_cu("cuGraphDestroy", graph_destroy(cg));
    /* 3. Into the program's graph, through cuGetProcAddress. */
    void *f = NULL;
    check_cu("cuGetProcAddress", gpa("cuStreamBeginCaptureToGraph", &f, 12030, 0));
    check_cu("cuGraphCreate", graph_create(&cg, 0));
    check_cu("cuStreamBeginCaptureToGraph", ((BeginToGraph)f)((CUstream)CAPTURE_STREAM, cg, NULL, NULL, 0, 0));
    check_cu("cuMemAllocAsync", alloc_async(&d, 4 * MiB, (CUstream)CAPTURE_STREAM));
    check_cu("cuGetProcAddress", gpa("cuStreamEndCapture", &f, 12030, 0));
    CUgraph same = NULL;
    check_cu("cuStreamEndCapture", ((End)f)((CUstream)CAPTURE_STREAM, &same));
    check_cu("cuGraphDestroy", graph_destroy(cg));
    /* 4. CUDA 10.0's ABI, through cuGetProcAddress. */
    check_cu("cuGetProcAddress", gpa("cuStreamBeginCapture", &f, 10000, 0));
    check_cu("cuStreamBeginCapture", ((Begin1)f)((CUstream)CAPTURE_STREAM));
    check_cu("cuMemAllocAsync", alloc_async(&d, 8 * MiB, (CUstream)CAPTURE_STREAM));
    check_cu("cuStreamEndCapture", ((End)driver_fn("cuStreamEndCapture"))((CUstream)CAPTURE_STREAM, &cg));
    check_cu("cuGraphDestroy", graph_destroy(cg));
    capture_query_counts("captured");
    pool_pairs(100);
    capture_query_counts("after");
    void *kept = NULL;
    check("cudaMallocAsync", cudaMallocAsync(&kept, 1 * MiB, CAPTURE_STREAM));
    return 0;
}

/* graph-capture-launch: a 4 MiB cudaMallocAsync captured into a graph instantiated with
 * auto-free-on-launch, launched three times (each relaunch frees the previous launch's).
 * Live: 4 MiB at captured_alloc. */
static int scenario_graph_capture_launch(void)
{
    check_graph("cudaStreamBeginCapture", cudaStreamBeginCapture(CAPTURE_STREAM, cudaStreamCaptureModeGlobal));
    (void)captured_alloc(4 * MiB);
    cudaGraph_t g = NULL;
    check_graph("cudaStreamEndCapture", cudaStreamEndCapture(CAPTURE_STREAM, &g));
    cudaGraphExec_t e = NULL;
    check_graph("cudaGraphInstantiate", cudaGraphInstantiate(&e, g, cudaGraphInstantiateFlagAutoFreeOnLaunch));
    for (int i = 0; i < 3; i++)
        check_graph("cudaGraphLaunch", cudaGraphLaunch(e, CAPTURE_STREAM));
    return 0;
}

/* graph-alloc-free: a graph that allocates 16 MiB and frees it, launched three times.  Live:
 * nothing; three allocations and three frees. */
static int scenario_graph_alloc_free(void)
{
    void *p = NULL;
    cudaGraph_t g = graph_alloc_node(16 * MiB, &p, 1);
    cudaGraphExec_t e = NULL;
    check_graph("cudaGraphInstantiate", cudaGraphInstantiate(&e, g, 0));
    for (int i = 0; i < 3; i++)
        check_graph("cudaGraphLaunch", cudaGraphLaunch(e, CAPTURE_STREAM));
    return 0;
}

/* graph-free-elsewhere: graph A's 8 MiB allocation, launched, freed by cudaFreeAsync outside any
 * graph; A launched again, and freed by graph B's free node (B made with the driver's
 * cuGraphAddMemFreeNode, instantiated and launched through the driver, found with dlsym).
 * Live: nothing, no unknown free. */
static int scenario_graph_free_elsewhere(void)
{
    void *p = NULL;
    cudaGraph_t a = graph_alloc_node(8 * MiB, &p, 0);
    cudaGraphExec_t ea = NULL;
    check_graph("cudaGraphInstantiate", cudaGraphInstantiate(&ea, a, 0));
    check_graph("cudaGraphLaunch", cudaGraphLaunch(ea, CAPTURE_STREAM));
    check_graph("cudaFreeAsync", cudaFreeAsync(p, CAPTURE_STREAM));
    check_graph("cudaGraphLaunch", cudaGraphLaunch(ea, CAPTURE_STREAM));
    void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    PFN_cuGraphCreate create = drv ? (PFN_cuGraphCreate)dlsym(drv, "cuGraphCreate") : NULL;
    PFN_cuGraphAddMemFreeNode add_free = drv ? (PFN_cuGraphAddMemFreeNode)dlsym(drv, "cuGraphAddMemFreeNode") : NULL;
    PFN_cuGraphInstantiateWithFlags inst =
        drv ? (PFN_cuGraphInstantiateWithFlags)dlsym(drv, "cuGraphInstantiateWithFlags") : NULL;
    PFN_cuGraphLaunch launch = drv ? (PFN_cuGraphLaunch)dlsym(drv, "cuGraphLaunch") : NULL;
    if (create == NULL || add_free == NULL || inst == NULL || launch == NULL)
        return 1;
    CUgraph b = NULL;
    CUgraphNode fn = NULL;
    CUgraphExec eb = NULL;
    if (create(&b, 0) != CUDA_SUCCESS || add_free(&fn, b, NULL, 0, (CUdeviceptr)(uintptr_t)p) != CUDA_SUCCESS ||
        inst(&eb, b, 0) != CUDA_SUCCESS || launch(eb, (CUstream)CAPTURE_STREAM) != CUDA_SUCCESS)
        return 1;
    return 0;
}

/* nvml-growth: untraced device memory that grows (as kernel modules loaded per call do).  The
 * NVML stand-in's file (GPUSHIM_STANDIN_NVML) says this process uses 500 MiB at the first
 * allocation (and 1 MiB traced); once the collector has sampled it (its query log has a line), 8 MiB per "call"
 * more for 20 calls, with one 1 MiB allocation per call.  Live at exit: 21 MiB traced; the
 * driver counts 681 MiB, 660 MiB of it untraced. */
static void nvml_says(const char *path, unsigned long long bytes)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        exit(1);
    fprintf(f, "%d %llu\n", (int)getpid(), bytes);
    fclose(f);
    if (rename(tmp, path) != 0)
        exit(1);
}

static int scenario_nvml_growth(void)
{
    const char *path = getenv("GPUSHIM_STANDIN_NVML");
    if (!path)
        return 1;
    nvml_says(path, 501 * MiB);
    void *p = NULL;
    check("cudaMalloc", cudaMalloc(&p, MiB));
    char q[4096];
    snprintf(q, sizeof q, "%s.queries", path);
    for (int i = 0; i < 10000 && access(q, F_OK) != 0; i++)
        poll(NULL, 0, 1); /* bounded wait for the collector's first sample */
    if (access(q, F_OK) != 0)
        return 1;
    for (int i = 1; i <= 20; i++) {
        nvml_says(path, 500 * MiB + MiB + (unsigned long long)i * (8 * MiB + MiB));
        check("cudaMalloc", cudaMalloc(&p, MiB));
    }
    return 0;
}

/* rank: one rank of a job (tests/faults/jobs.rs starts four with RANK and LOCAL_RANK set). It
 * makes device LOCAL_RANK's primary context current and keeps LOCAL_RANK + 1 MiB there
 * (rank_weights), then leaks 256 KiB at rank_step ten times, freeing a 64 KiB scratch buffer
 * between (a leak of every rank); the rank named by LEAK_RANK also leaks 128 KiB at
 * rank_odd_batch each step (a leak of one rank). The rank named by STRAY_RANK first keeps
 * 2 MiB on device 0's primary context (rank_stray_on_gpu0), before switching to its own. */
/* A macro, so that the first frame of each site is the function named for it. */
#define rank_alloc(size)                                                                                   \
    ({                                                                                                     \
        CUresult (*mem_alloc)(CUdeviceptr *, size_t) =                                                     \
            (CUresult(*)(CUdeviceptr *, size_t))driver_fn("cuMemAlloc_v2");                                \
        CUdeviceptr d_ = 0;                                                                                \
        check_cu("cuMemAlloc_v2", mem_alloc(&d_, (size)));                                                 \
        d_;                                                                                                \
    })

static void rank_use_device(int dev)
{
    CUresult (*retain)(void **, int) = (CUresult(*)(void **, int))driver_fn("cuDevicePrimaryCtxRetain");
    CUresult (*set_current)(void *) = (CUresult(*)(void *))driver_fn("cuCtxSetCurrent");
    void *ctx = NULL;
    check_cu("cuDevicePrimaryCtxRetain", retain(&ctx, dev));
    check_cu("cuCtxSetCurrent", set_current(ctx));
}

static NOINLINE void rank_stray_on_gpu0(void) { (void)rank_alloc(2 * MiB); }
static NOINLINE void rank_weights(int local) { (void)rank_alloc((size_t)(local + 1) * MiB); }
static NOINLINE void rank_step(void) { (void)rank_alloc(256 * KiB); }
static NOINLINE void rank_odd_batch(void) { (void)rank_alloc(128 * KiB); }

static void rank_scratch(void)
{
    CUresult (*mem_free)(CUdeviceptr) = (CUresult(*)(CUdeviceptr))driver_fn("cuMemFree_v2");
    check_cu("cuMemFree_v2", mem_free(rank_alloc(64 * KiB)));
}

static int env_int(const char *name, int otherwise)
{
    const char *v = getenv(name);
    return v && *v ? atoi(v) : otherwise;
}

static int scenario_rank(void)
{
    four_devices();
    int rank = env_int("RANK", -1), local = env_int("LOCAL_RANK", 0);
    if (env_int("STRAY_RANK", -2) == rank) {
        rank_use_device(0);
        rank_stray_on_gpu0();
    }
    rank_use_device(local);
    rank_weights(local);
    for (int i = 0; i < 10; i++) {
        usleep(2000);
        rank_scratch();
        rank_step();
        if (env_int("LEAK_RANK", -2) == rank)
            rank_odd_batch();
    }
    return 0;
}

/* devices-per-thread: each thread's own current device. Two threads make devices 1 and 2's
 * primary contexts current and keep 1 and 2 MiB; the main thread keeps 4 MiB on device 0, pushes
 * device 3's primary context (cuCtxPushCurrent) for 8 MiB, pops it and keeps 16 MiB more on
 * device 0. Live at exit: 20 MiB on ordinal 0, 1 on 1, 2 on 2, 8 on 3. */
static void *device_thread(void *arg)
{
    int dev = (int)(intptr_t)arg;
    rank_use_device(dev);
    (void)rank_alloc((size_t)dev * MiB);
    return NULL;
}

static int scenario_devices_per_thread(void)
{
    four_devices();
    CUresult (*retain)(void **, int) = (CUresult(*)(void **, int))driver_fn("cuDevicePrimaryCtxRetain");
    CUresult (*push)(void *) = (CUresult(*)(void *))driver_fn("cuCtxPushCurrent_v2");
    CUresult (*pop)(void **) = (CUresult(*)(void **))driver_fn("cuCtxPopCurrent_v2");
    rank_use_device(0);
    (void)rank_alloc(4 * MiB);
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        if (pthread_create(&t[i], NULL, device_thread, (void *)(intptr_t)(i + 1)) != 0)
            return 1;
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    void *ctx3 = NULL, *popped = NULL;
    check_cu("cuDevicePrimaryCtxRetain", retain(&ctx3, 3));
    check_cu("cuCtxPushCurrent_v2", push(ctx3));
    (void)rank_alloc(8 * MiB);
    check_cu("cuCtxPopCurrent_v2", pop(&popped));
    (void)rank_alloc(16 * MiB);
    return 0;
}

/* fork-workers: a parent that keeps 1 MiB, then forks three workers (as a DataLoader does)
 * that each keep (worker + 1) * 256 KiB on device 0 and exit; the parent waits for them. */
static int scenario_fork_workers(void)
{
    rank_use_device(0);
    (void)rank_alloc(1 * MiB);
    fflush(stdout);
    fflush(stderr);
    pid_t kids[3];
    for (int w = 0; w < 3; w++) {
        kids[w] = fork();
        if (kids[w] < 0)
            return 1;
        if (kids[w] == 0) {
            rank_use_device(0);
            (void)rank_alloc((size_t)(w + 1) * 256 * KiB);
            exit(0);
        }
    }
    for (int w = 0; w < 3; w++) {
        int st = 0;
        if (waitpid(kids[w], &st, 0) != kids[w] || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
            return 1;
    }
    return 0;
}

/* metrics: what tests/faults/metrics.rs scrapes from the collector's /metrics. On device
 * LOCAL_RANK's primary context (0 without it) it keeps LOCAL_RANK + 1 MiB at metrics_weights and
 * d * 64 KiB at metrics_nest for each depth d of 1..8 (eight sites: one stack per depth of the
 * recursion), then leaks 256 KiB at metrics_step ten times 2 ms apart, freeing a 64 KiB scratch
 * buffer before each, and asks once for 1 TiB, which fails (out of memory). It prints "ready"
 * and exits when its standard input ends. */
static NOINLINE void metrics_weights(int local) { (void)rank_alloc((size_t)(local + 1) * MiB); }
static NOINLINE void metrics_step(void) { (void)rank_alloc(256 * KiB); }

static NOINLINE int metrics_nest(int depth, int units)
{
    volatile int here = depth;
    if (depth > 1) {
        int r = metrics_nest(depth - 1, units);
        return r + here;
    }
    (void)rank_alloc((size_t)units * 64 * KiB);
    return here;
}

static int scenario_metrics(void)
{
    int local = env_int("LOCAL_RANK", 0);
    rank_use_device(local);
    metrics_weights(local);
    for (int d = 1; d <= 8; d++)
        (void)metrics_nest(d, d);
    for (int i = 0; i < 10; i++) {
        usleep(2000);
        rank_scratch();
        metrics_step();
    }
    CUresult (*mem_alloc)(CUdeviceptr *, size_t) = (CUresult(*)(CUdeviceptr *, size_t))driver_fn("cuMemAlloc_v2");
    CUdeviceptr huge = 0;
    if (mem_alloc(&huge, (size_t)1 << 40) == CUDA_SUCCESS)
        return 1;
    printf("ready\n");
    fflush(stdout);
    char b[64];
    while (read(0, b, sizeof b) > 0) {
    }
    return 0;
}

/* fork-many: after 1 MiB of its own, 20 children one after another; the even ones allocate
 * 4 KiB and exit, the odd ones exit without a CUDA call.  Each that allocates gets a collector
 * and a report of its own; the others start none. */
static int scenario_fork_many(void)
{
    void *d = NULL;
    check("cudaMalloc", cudaMalloc(&d, 1 * MiB));
    fflush(stdout);
    for (int i = 0; i < 20; i++) {
        pid_t k = fork();
        if (k < 0)
            return 1;
        if (k == 0) {
            void *q = NULL;
            if (i % 2 == 0)
                check("cudaMalloc", cudaMalloc(&q, 4 * KiB));
            exit(0);
        }
        int st = 0;
        if (waitpid(k, &st, 0) != k || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
            return 1;
    }
    return 0;
}

/* own-usr1: after its first allocation the program installs its own SIGUSR1 handler (a
 * "graceful restart"), says "ready", reads stdin to its end, allocates 2 MiB more and says how
 * often its handler ran.  Live at exit: 3 MiB. */
static volatile sig_atomic_t own_usr1_runs;
static void own_usr1(int sig)
{
    (void)sig;
    own_usr1_runs++;
}

static int scenario_own_usr1(void)
{
    void *d = NULL;
    check("cudaMalloc", cudaMalloc(&d, 1 * MiB));
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = own_usr1;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGUSR1, &sa, NULL) != 0)
        return 1;
    printf("ready\n");
    fflush(stdout);
    char buf[256];
    while (read(STDIN_FILENO, buf, sizeof buf) > 0)
        ;
    check("cudaMalloc", cudaMalloc(&d, 2 * MiB));
    printf("handler ran %d\n", (int)own_usr1_runs);
    return 0;
}

/* published-early: one thread allocates into a slot another thread watches; the watcher
 * frees each pointer as soon as it appears there, which can be while the allocating call has
 * not returned yet (the real function wrote the slot before returning).  200,000 pairs, all
 * freed: no unknown free, no replaced allocation, nothing live. */
#define PUBLISHED_EARLY_PAIRS 200000
static void *volatile early_slot;
static int early_done;

static void *early_watcher(void *arg)
{
    (void)arg;
    long freed = 0;
    while (freed < PUBLISHED_EARLY_PAIRS) {
        void *p = __atomic_exchange_n(&early_slot, NULL, __ATOMIC_ACQ_REL);
        if (p == NULL) {
            /* The slot is read once more after the end is seen: the last pointer may have
             * been written between the exchange above and that read. */
            if (!__atomic_load_n(&early_done, __ATOMIC_ACQUIRE))
                continue;
            p = __atomic_exchange_n(&early_slot, NULL, __ATOMIC_ACQ_REL);
            if (p == NULL)
                break;
        }
        check("cudaFree", cudaFree(p));
        freed++;
    }
    return (void *)freed;
}

static int scenario_published_early(void)
{
    pthread_t w;
    if (pthread_create(&w, NULL, early_watcher, NULL) != 0)
        return 1;
    for (long i = 0; i < PUBLISHED_EARLY_PAIRS; i++) {
        /* Wait until the watcher took the last one: the slot is written only by the call. */
        while (__atomic_load_n(&early_slot, __ATOMIC_ACQUIRE) != NULL)
            ;
        check("cudaMalloc", cudaMalloc((void **)&early_slot, 4096));
    }
    __atomic_store_n(&early_done, 1, __ATOMIC_RELEASE);
    void *freed = NULL;
    pthread_join(w, &freed);
    if ((long)freed != PUBLISHED_EARLY_PAIRS) {
        fprintf(stderr, "hostile: the watcher freed %ld of %d\n", (long)freed, PUBLISHED_EARLY_PAIRS);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: hostile <scenario>\n");
        return 2;
    }
    const char *s = argv[1];
    int rc;
    if (strcmp(s, "atfork-lock") == 0)
        rc = scenario_atfork_lock();
    else if (strcmp(s, "rank") == 0)
        rc = scenario_rank();
    else if (strcmp(s, "metrics") == 0)
        rc = scenario_metrics();
    else if (strcmp(s, "devices-per-thread") == 0)
        rc = scenario_devices_per_thread();
    else if (strcmp(s, "fork-workers") == 0)
        rc = scenario_fork_workers();
    else if (strcmp(s, "pipe-eof") == 0)
        rc = scenario_pipe_eof();
    else if (strcmp(s, "stdout-eof") == 0)
        rc = scenario_stdout_eof();
    else if (strcmp(s, "sigusr1-ignored") == 0)
        rc = scenario_sigusr1_ignored();
    else if (strcmp(s, "sigwait") == 0)
        rc = scenario_sigwait();
    else if (strcmp(s, "coroutine") == 0)
        rc = scenario_coroutine();
    else if (strcmp(s, "atexit-free") == 0)
        rc = scenario_atexit_free();
    else if (strcmp(s, "dlmopen") == 0)
        rc = scenario_dlmopen();
    else if (strcmp(s, "arrays") == 0)
        rc = scenario_arrays();
    else if (strcmp(s, "pthread-exit") == 0)
        rc = scenario_pthread_exit();
    else if (strcmp(s, "closed-stdio") == 0)
        rc = scenario_closed_stdio();
    else if (strcmp(s, "raw-fork") == 0)
        rc = scenario_raw_fork();
    else if (strcmp(s, "small-stack") == 0)
        rc = scenario_small_stack();
    else if (strcmp(s, "device-reset") == 0)
        rc = scenario_device_reset();
    else if (strcmp(s, "stream-device") == 0)
        rc = scenario_stream_device();
    else if (strcmp(s, "contexts") == 0)
        rc = scenario_contexts();
    else if (strcmp(s, "ctx-device-memory") == 0)
        rc = scenario_ctx_device_memory();
    else if (strcmp(s, "pool-device") == 0)
        rc = scenario_pool_device();
    else if (strcmp(s, "oom-device") == 0)
        rc = scenario_oom_device();
    else if (strcmp(s, "vmm-release-mapped") == 0)
        rc = scenario_vmm_release_mapped();
    else if (strcmp(s, "vmm-nccl") == 0)
        rc = scenario_vmm_nccl();
    else if (strcmp(s, "vmm-unmap-two") == 0)
        rc = scenario_vmm_unmap_two();
    else if (strcmp(s, "vmm-import") == 0)
        rc = scenario_vmm_import();
    else if (strcmp(s, "graph-leak") == 0)
        rc = scenario_graph_leak();
    else if (strcmp(s, "graph-capture-unlaunched") == 0)
        rc = scenario_graph_capture_unlaunched();
    else if (strcmp(s, "capture-queries") == 0)
        rc = scenario_capture_queries();
    else if (strcmp(s, "graph-capture-launch") == 0)
        rc = scenario_graph_capture_launch();
    else if (strcmp(s, "graph-alloc-free") == 0)
        rc = scenario_graph_alloc_free();
    else if (strcmp(s, "graph-free-elsewhere") == 0)
        rc = scenario_graph_free_elsewhere();
    else if (strcmp(s, "slow-free") == 0)
        rc = scenario_slow_free();
    else if (strcmp(s, "two-runtimes") == 0)
        rc = scenario_two_runtimes();
    else if (strcmp(s, "nvml-growth") == 0)
        rc = scenario_nvml_growth();
    else if (strcmp(s, "fork-many") == 0)
        rc = scenario_fork_many();
    else if (strcmp(s, "own-usr1") == 0)
        rc = scenario_own_usr1();
    else if (strcmp(s, "published-early") == 0)
        rc = scenario_published_early();
    else {
        fprintf(stderr, "hostile: unknown scenario %s\n", s);
        return 2;
    }
    if (rc == 0)
        printf("ok\n");
    fflush(stdout);
    return rc;
}
