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
    else if (strcmp(s, "pipe-eof") == 0)
        rc = scenario_pipe_eof();
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
    else if (strcmp(s, "graph-leak") == 0)
        rc = scenario_graph_leak();
    else if (strcmp(s, "graph-capture-unlaunched") == 0)
        rc = scenario_graph_capture_unlaunched();
    else if (strcmp(s, "graph-capture-launch") == 0)
        rc = scenario_graph_capture_launch();
    else if (strcmp(s, "graph-alloc-free") == 0)
        rc = scenario_graph_alloc_free();
    else if (strcmp(s, "graph-free-elsewhere") == 0)
        rc = scenario_graph_free_elsewhere();
    else if (strcmp(s, "slow-free") == 0)
        rc = scenario_slow_free();
    else {
        fprintf(stderr, "hostile: unknown scenario %s\n", s);
        return 2;
    }
    if (rc == 0)
        printf("ok\n");
    fflush(stdout);
    return rc;
}
