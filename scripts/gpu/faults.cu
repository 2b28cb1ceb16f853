// GPU cases of the fault review (docs/gpu-matrix.md, scripts/gpu-matrix.sh): `faults CASE`, run
// under the shim in its own directory; each case writes truth.json there for compare.py.
//   exit-cleanup  4 x 16 MiB freed by an atexit handler registered before the first allocation
//                 (after the runtime's own, so it runs before the runtime tears down), 8 MiB by a
//                 static object's destructor: nothing may stay live in the report.
//   slow-free     a SIGUSR1 sent while cudaFree waits for a 2 s kernel: how long until the
//                 snapshot file exists (it must not wait for the kernel).
//   reset         64 MiB, then cudaDeviceReset, then 1 MiB: only the 1 MiB may stay live.
//   reset-driver  the same with the driver's cuDevicePrimaryCtxReset.
//   stream-device (two GPUs) 768 MiB by cudaMallocAsync on a stream of GPU 1 while GPU 0 is
//                 current, and 64 MiB on GPU 0's default stream.
//   contexts      driver API: 16 MiB in GPU 0's retained primary context, 32 MiB in a context made
//                 by cuCtxCreate, 8 MiB in a second one; the first is destroyed while the primary
//                 context is current, then the primary context's last release destroys it: only
//                 the 8 MiB may stay live.
//   pool-device   (two GPUs) 256 MiB from a memory pool located on GPU 1, on a stream of GPU 0.
//   oom-device    (two GPUs) 16 GiB held on GPU 0, then an out-of-memory cudaMallocAsync on a stream
//                 of GPU 1: the OOM report's free/total must be GPU 1's.
//   vmm           64 MiB by cuMemCreate, mapped, released while mapped (the driver still uses it:
//                 a snapshot then must show it live), unmapped; then NCCL's order on another
//                 64 MiB: map, cuMemRetainAllocationHandle, release, unmap, release. Nothing may
//                 stay live, no unknown free.
//   arrays        CUDA arrays (2D, 3D, mipmapped) left live, against cuMemGetInfo's used bytes and
//                 cuArrayGetMemoryRequirements.
//   devices-per-thread (two GPUs) a thread on GPU 1 (cudaSetDevice) keeps 96 MiB; the main thread,
//                 on GPU 0, keeps 64 MiB, pushes GPU 1's primary context (cuCtxPushCurrent) for a
//                 32 MiB cuMemAlloc and pops it. Truth: each GPU's bytes, PCI bus id and UUID as the
//                 runtime gives them, to compare with the report's devices and physical_devices.
//   graph         graph memory nodes: 64 graphs each leaking a 1 MiB allocation node (launched once,
//                 destroyed); a 32 MiB cudaMallocAsync captured into a graph destroyed unlaunched;
//                 a 16 MiB allocation freed in its own graph, launched 3 times; an 8 MiB graph
//                 allocation freed by cudaFreeAsync outside, relaunched and freed by another
//                 graph's free node; a trim. Records cuMemGetInfo's used bytes at each step.
//   pool-paths    (issue 18) 20,000 pool hits (cudaMallocAsync + cudaFreeAsync of 4 KiB on one
//                 stream) alternating between two call paths that share their inner frames at the
//                 same depth (pool_path_a, pool_path_b -> pool_path_mid; a on even iterations, b
//                 on odd); kept: every 1000th iteration's 4 KiB on path a (20 x 4 KiB) and, on
//                 path b, the 8 KiB made every 2000th iteration (10 x 8 KiB), so 160 KiB live at
//                 exit at two sites of 10,000 allocations each. Run with the per-thread caches on
//                 and off (GPUSHIM_UNWIND_CACHE=0): the two reports must have the same sites.
//   metrics       (issue 14, GPUSHIM_METRICS=127.0.0.1:0) 64 MiB at metrics_weights, 10 x 4 MiB at
//                 metrics_leak 5 ms apart, 10 x 1 MiB allocated and freed: 104 MiB live. Then
//                 it scrapes its own collector's /metrics (the address from the SD file
//                 gpushim-*.sd.json in the working directory) until gpushim_process_live_bytes
//                 shows 104 MiB (at most 60 s), writes the scrape to metrics.txt and its truth.
//   ring-threads  (issue 18, the shim's per-thread rings) 16 threads, thread i named ring-i on a
//                 stream of its own: (i + 1) x 2,000 pool hits (cudaMallocAsync + cudaFreeAsync of
//                 4 KiB, ring_pair) and i + 1 blocks of 8 KiB kept (ring_keep), while the main
//                 thread sends itself SIGUSR1 every 2 ms until they are done. Truth: per thread its
//                 pairs and kept blocks; compare.py checks the totals, each thread's count and bytes
//                 at each site, and that no snapshot notes a late marker or lost events.
#include <cuda.h>
#include <cuda_runtime.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <glob.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CHECK(x)                                                                          \
    do {                                                                                  \
        cudaError_t e_ = (x);                                                             \
        if (e_ != cudaSuccess) {                                                          \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

#define DRV(x)                                                                            \
    do {                                                                                  \
        CUresult r_ = (x);                                                                \
        if (r_ != CUDA_SUCCESS) {                                                         \
            fprintf(stderr, "%s:%d %s: CUresult %d\n", __FILE__, __LINE__, #x, (int)r_);   \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

static const size_t MiB = 1 << 20;

static double now_ms()
{
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

// ---- exit-cleanup
static void *blocks[4];
struct Owner {
    void *p = nullptr;
    ~Owner()
    {
        if (p)
            cudaFree(p);
    }
};

// Constructed at first use, after the runtime started: destroyed before the runtime's teardown.
static Owner &owner()
{
    static Owner o;
    return o;
}

static void cleanup()
{
    for (void *b : blocks)
        cudaFree(b);
}

__attribute__((noinline)) static void *cleanup_owned(size_t n)
{
    void *p = nullptr;
    CHECK(cudaMalloc(&p, n));
    return p;
}

static int exit_cleanup()
{
    // The runtime registers its own exit handler when it starts; handlers run in reverse order,
    // so ours must come after it (a program's cleanup handler in practice does).
    CHECK(cudaFree(0));
    atexit(cleanup);
    owner();
    for (auto &b : blocks)
        b = cleanup_owned(16 * MiB);
    owner().p = cleanup_owned(8 * MiB);
    FILE *f = fopen("truth.json", "w");
    fprintf(f, "{\"freed_at_exit\": %zu}\n", 72 * MiB);
    fclose(f);
    return 0;
}

// ---- slow-free
__global__ void spin(long long cycles)
{
    long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
}

static volatile int freeing;
static double snapshot_ms = -1;

static bool snapshot_exists()
{
    DIR *d = opendir(".");
    bool found = false;
    for (dirent *e; d && (e = readdir(d));)
        found |= strstr(e->d_name, "-snapshot-1.json") != nullptr;
    if (d)
        closedir(d);
    return found;
}

static void *signaller(void *)
{
    while (!freeing) {
    }
    usleep(300 * 1000); // cudaFree is waiting for the kernel by now
    double t0 = now_ms();
    kill(getpid(), SIGUSR1);
    while (!snapshot_exists() && now_ms() - t0 < 10000)
        usleep(1000);
    snapshot_ms = snapshot_exists() ? now_ms() - t0 : -1;
    return nullptr;
}

static int slow_free()
{
    int clock_khz = 0;
    CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
    void *p = nullptr;
    CHECK(cudaMalloc(&p, 64 * MiB));
    pthread_t t;
    pthread_create(&t, nullptr, signaller, nullptr);
    double k0 = now_ms();
    spin<<<1, 1>>>((long long)clock_khz * 2000); // about 2 s
    freeing = 1;
    CHECK(cudaFree(p)); // waits for the kernel
    double kernel_ms = now_ms() - k0;
    pthread_join(t, nullptr);
    FILE *f = fopen("truth.json", "w");
    fprintf(f, "{\"snapshot_ms\": %.1f, \"free_waited_ms\": %.1f}\n", snapshot_ms, kernel_ms);
    fclose(f);
    return 0;
}

// ---- arrays
static int arrays()
{
    CHECK(cudaFree(0));
    size_t free0, free1, total;
    cuMemGetInfo(&free0, &total);
    cudaChannelFormatDesc rgba8 = cudaCreateChannelDesc<uchar4>();
    cudaChannelFormatDesc f32 = cudaCreateChannelDesc<float>();
    cudaArray_t a2 = nullptr, a3 = nullptr;
    cudaMipmappedArray_t m = nullptr;
    CHECK(cudaMallocArray(&a2, &rgba8, 4096, 4096));                          // 64 MiB of texels
    CHECK(cudaMalloc3DArray(&a3, &f32, make_cudaExtent(256, 256, 256)));       // 64 MiB
    CHECK(cudaMallocMipmappedArray(&m, &rgba8, make_cudaExtent(4096, 4096, 0), 4)); // 85 MiB
    cuMemGetInfo(&free1, &total);
    CUDA_ARRAY_MEMORY_REQUIREMENTS req{};
    CUresult r2 = cuArrayGetMemoryRequirements(&req, (CUarray)a2, 0);
    size_t req2 = req.size;
    CUresult r3 = cuArrayGetMemoryRequirements(&req, (CUarray)a3, 0);
    size_t req3 = req.size;
    CUresult rm = cuMipmappedArrayGetMemoryRequirements(&req, (CUmipmappedArray)m, 0);
    size_t reqm = req.size;
    FILE *f = fopen("truth.json", "w");
    fprintf(f,
            "{\"used_delta\": %zu, \"texel_bytes\": %zu, \"requirements\": [[%d, %zu], [%d, %zu], [%d, %zu]]}\n",
            free0 - free1, (size_t)(64 + 64 + 85) * MiB, (int)r2, req2, (int)r3, req3, (int)rm, reqm);
    fclose(f);
    return 0;
}

// ---- reset
static int reset(bool driver)
{
    void *p = nullptr;
    CHECK(cudaMalloc(&p, 64 * MiB));
    if (driver) {
        if (cuDevicePrimaryCtxReset(0) != CUDA_SUCCESS)
            return 1;
    } else {
        CHECK(cudaDeviceReset());
    }
    CHECK(cudaMalloc(&p, 1 * MiB));
    FILE *f = fopen("truth.json", "w");
    fprintf(f, "{\"freed_by_reset\": %zu, \"kept\": %zu}\n", 64 * MiB, 1 * MiB);
    fclose(f);
    return 0;
}

// ---- vmm
// Device memory in use beyond `free0` (cuMemGetInfo), bytes; negative if less.
static long long used_since(size_t free0)
{
    size_t f = 0, total = 0;
    DRV(cuMemGetInfo(&f, &total));
    return (long long)free0 - (long long)f;
}

__attribute__((noinline)) static CUmemGenericAllocationHandle vmm_create(size_t size, const CUmemAllocationProp *prop)
{
    CUmemGenericAllocationHandle h = 0;
    DRV(cuMemCreate(&h, size, prop, 0));
    return h;
}

static int vmm()
{
    CHECK(cudaFree(0));
    CUdevice dev = 0;
    DRV(cuCtxGetDevice(&dev));
    CUmemAllocationProp prop = {};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    size_t gran = 0;
    DRV(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    const size_t size = 64 * MiB; // a multiple of the granularity (2 MiB on the H200)
    CUmemAccessDesc access = {};
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    size_t free0 = 0, total = 0;
    DRV(cuMemGetInfo(&free0, &total));
    CUdeviceptr va = 0;
    DRV(cuMemAddressReserve(&va, size, 0, 0, 0));

    // Released while mapped: still in use and readable.
    CUmemGenericAllocationHandle h = vmm_create(size, &prop);
    DRV(cuMemMap(va, size, 0, h, 0));
    DRV(cuMemSetAccess(va, size, &access, 1));
    CHECK(cudaMemset((void *)va, 42, size));
    CHECK(cudaDeviceSynchronize());
    DRV(cuMemRelease(h));
    long long after_release = used_since(free0);
    unsigned char byte = 0;
    CHECK(cudaMemcpy(&byte, (void *)(va + 12345), 1, cudaMemcpyDeviceToHost));
    double t0 = now_ms();
    kill(getpid(), SIGUSR1);
    while (!snapshot_exists() && now_ms() - t0 < 10000)
        usleep(1000);
    DRV(cuMemUnmap(va, size));
    long long after_unmap = used_since(free0);

    // NCCL's order: retain the handle mapped at the address, release it, unmap, release.
    CUmemGenericAllocationHandle h2 = vmm_create(size, &prop);
    DRV(cuMemMap(va, size, 0, h2, 0));
    DRV(cuMemSetAccess(va, size, &access, 1));
    CUmemGenericAllocationHandle again = 0;
    DRV(cuMemRetainAllocationHandle(&again, (void *)va));
    DRV(cuMemRelease(again));
    DRV(cuMemUnmap(va, size));
    long long nccl_after_unmap = used_since(free0);
    DRV(cuMemRelease(h2));
    long long end = used_since(free0);
    DRV(cuMemAddressFree(va, size));

    FILE *f = fopen("truth.json", "w");
    fprintf(f,
            "{\"size\": %zu, \"granularity\": %zu, \"used_after_release\": %lld, \"byte\": %d, "
            "\"used_after_unmap\": %lld, \"same_handle\": %d, \"nccl_used_after_unmap\": %lld, "
            "\"used_end\": %lld}\n",
            size, gran, after_release, (int)byte, after_unmap, again == h2 ? 1 : 0, nccl_after_unmap, end);
    fclose(f);
    return 0;
}

// ---- stream-device
static int stream_device()
{
    int n = 0;
    CHECK(cudaGetDeviceCount(&n));
    FILE *f = fopen("truth.json", "w");
    if (n < 2) {
        fprintf(f, "{\"gpus\": %d}\n", n);
        fclose(f);
        return 0;
    }
    cudaStream_t s1;
    CHECK(cudaSetDevice(1));
    CHECK(cudaStreamCreate(&s1));
    CHECK(cudaSetDevice(0));
    void *p = nullptr, *q = nullptr;
    CHECK(cudaMallocAsync(&p, 768 * MiB, s1));
    CHECK(cudaMallocAsync(&q, 64 * MiB, 0));
    CHECK(cudaDeviceSynchronize());
    cudaPointerAttributes a{};
    CHECK(cudaPointerGetAttributes(&a, p));
    fprintf(f, "{\"gpus\": %d, \"on_gpu1\": %zu, \"on_gpu0\": %zu, \"ptr_device\": %d}\n", n, 768 * MiB, 64 * MiB,
            a.device);
    fclose(f);
    return 0;
}

// ---- contexts
static CUresult create_context(CUcontext *c)
{
#if CUDA_VERSION >= 13000
    return cuCtxCreate(c, nullptr, 0, 0);
#else
    return cuCtxCreate(c, 0, 0);
#endif
}

static int contexts()
{
    CUcontext primary, own, other;
    CUdeviceptr a, b, c;
    size_t free0, free1, total;
    DRV(cuInit(0));
    DRV(cuDevicePrimaryCtxRetain(&primary, 0));
    DRV(cuCtxSetCurrent(primary));
    DRV(cuMemGetInfo(&free0, &total));
    DRV(cuMemAlloc(&a, 16 * MiB));
    DRV(create_context(&own));
    DRV(cuMemAlloc(&b, 32 * MiB));
    // Stream-ordered memory made while the program's own context is current: the device's
    // pool's, or the context's? The free after the context's destruction tells.
    CUdeviceptr pooled;
    DRV(cuMemAllocAsync(&pooled, 4 * MiB, 0));
    DRV(cuStreamSynchronize(0));
    DRV(create_context(&other));
    DRV(cuMemAlloc(&c, 8 * MiB));
    DRV(cuCtxSetCurrent(primary));
    DRV(cuCtxDestroy(own));
    CUresult pooled_free = cuMemFreeAsync(pooled, 0);
    cuStreamSynchronize(0);
    DRV(cuDevicePrimaryCtxRelease(0));
    DRV(cuCtxSetCurrent(other));
    DRV(cuMemGetInfo(&free1, &total));
    FILE *f = fopen("truth.json", "w");
    fprintf(f,
            "{\"kept\": %zu, \"freed_created\": %zu, \"freed_primary\": %zu, \"free_before\": %zu, \"free_after\": %zu, "
            "\"pooled_free_after_destroy\": %d}\n",
            8 * MiB, 32 * MiB, 16 * MiB, free0, free1, (int)pooled_free);
    fclose(f);
    return 0;
}

// ---- pool-device, oom-device
static int two_gpus(FILE *f)
{
    int n = 0;
    CHECK(cudaGetDeviceCount(&n));
    if (n < 2)
        fprintf(f, "{\"gpus\": %d}\n", n);
    return n >= 2;
}

static int pool_device()
{
    FILE *f = fopen("truth.json", "w");
    if (!two_gpus(f))
        return fclose(f), 0;
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = 1;
    cudaMemPool_t pool;
    CHECK(cudaMemPoolCreate(&pool, &props));
    CHECK(cudaSetDevice(0));
    cudaStream_t s0;
    CHECK(cudaStreamCreate(&s0));
    void *p = nullptr;
    cudaError_t e = cudaMallocFromPoolAsync(&p, 256 * MiB, pool, s0);
    int ptr_device = -1;
    if (e == cudaSuccess) {
        CHECK(cudaStreamSynchronize(s0));
        cudaPointerAttributes a{};
        CHECK(cudaPointerGetAttributes(&a, p));
        ptr_device = a.device;
    }
    fprintf(f, "{\"gpus\": 2, \"result\": %d, \"on_gpu1\": %zu, \"ptr_device\": %d}\n", (int)e, 256 * MiB, ptr_device);
    fclose(f);
    return 0;
}

static int oom_device()
{
    FILE *f = fopen("truth.json", "w");
    if (!two_gpus(f))
        return fclose(f), 0;
    size_t free0, free1, total0, total1;
    CHECK(cudaSetDevice(1));
    cudaStream_t s1;
    CHECK(cudaStreamCreate(&s1));
    CHECK(cudaMemGetInfo(&free1, &total1));
    CHECK(cudaSetDevice(0));
    void *held = nullptr, *p = nullptr;
    CHECK(cudaMalloc(&held, 16ull << 30));
    CHECK(cudaMemGetInfo(&free0, &total0));
    cudaError_t e = cudaMallocAsync(&p, 1ull << 40, s1);
    (void)cudaGetLastError();
    fprintf(f, "{\"gpus\": 2, \"result\": %d, \"free_gpu1\": %zu, \"total_gpu1\": %zu, \"free_gpu0\": %zu}\n", (int)e,
            free1, total1, free0);
    fclose(f);
    return 0;
}

// ---- graph
static long long used_bytes()
{
    size_t f = 0, t = 0;
    cudaMemGetInfo(&f, &t);
    return (long long)t - (long long)f;
}

// A graph holding one allocation node of `n` bytes on device 0 (and a free node for it if `freed`).
__attribute__((noinline)) static cudaGraph_t graph_alloc_node(size_t n, void **p, bool freed)
{
    cudaGraph_t g;
    CHECK(cudaGraphCreate(&g, 0));
    cudaMemAllocNodeParams a{};
    a.poolProps.allocType = cudaMemAllocationTypePinned;
    a.poolProps.location.type = cudaMemLocationTypeDevice;
    a.poolProps.location.id = 0;
    a.bytesize = n;
    cudaGraphNode_t an, fn;
    CHECK(cudaGraphAddMemAllocNode(&an, g, nullptr, 0, &a));
    *p = a.dptr;
    if (freed)
        CHECK(cudaGraphAddMemFreeNode(&fn, g, &an, 1, a.dptr));
    return g;
}

__attribute__((noinline)) static void *captured_alloc(size_t n, cudaStream_t s)
{
    void *p = nullptr;
    CHECK(cudaMallocAsync(&p, n, s));
    return p;
}

static int graph()
{
    int clock_khz = 0;
    CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CHECK(cudaDeviceSynchronize());
    const long long base = used_bytes();
    long long at_create = 0, at_instantiate = 0, at_launch = 0, after_destroy = 0;
    // 1. The leak: each step's graph allocates 1 MiB that nobody frees; a 1 ms kernel per step
    //    spreads it over the run.
    for (int i = 0; i < 64; i++) {
        spin<<<1, 1, 0, s>>>((long long)clock_khz);
        void *p = nullptr;
        cudaGraph_t g = graph_alloc_node(1 * MiB, &p, false);
        if (i == 0)
            at_create = used_bytes() - base;
        cudaGraphExec_t e;
        CHECK(cudaGraphInstantiate(&e, g, 0));
        if (i == 0)
            at_instantiate = used_bytes() - base;
        CHECK(cudaGraphLaunch(e, s));
        CHECK(cudaStreamSynchronize(s));
        if (i == 0)
            at_launch = used_bytes() - base;
        CHECK(cudaGraphExecDestroy(e));
        CHECK(cudaGraphDestroy(g));
        if (i == 0)
            after_destroy = used_bytes() - base;
    }
    // 2. A captured allocation in a graph destroyed without a launch.
    const long long before_capture = used_bytes();
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    (void)captured_alloc(32 * MiB, s);
    cudaGraph_t cg;
    CHECK(cudaStreamEndCapture(s, &cg));
    const long long at_capture = used_bytes() - before_capture;
    CHECK(cudaGraphDestroy(cg));
    // 3. Allocated and freed in its own graph, launched three times.
    void *q = nullptr;
    cudaGraph_t fg = graph_alloc_node(16 * MiB, &q, true);
    cudaGraphExec_t fe;
    CHECK(cudaGraphInstantiate(&fe, fg, 0));
    for (int i = 0; i < 3; i++)
        CHECK(cudaGraphLaunch(fe, s));
    CHECK(cudaStreamSynchronize(s));
    // 4. Freed outside its graph, then by another graph's free node.
    void *r = nullptr;
    cudaGraph_t ag = graph_alloc_node(8 * MiB, &r, false);
    cudaGraphExec_t ae;
    CHECK(cudaGraphInstantiate(&ae, ag, 0));
    CHECK(cudaGraphLaunch(ae, s));
    CHECK(cudaFreeAsync(r, s));
    CHECK(cudaGraphLaunch(ae, s));
    cudaGraph_t bg;
    CHECK(cudaGraphCreate(&bg, 0));
    cudaGraphNode_t bn;
    CHECK(cudaGraphAddMemFreeNode(&bn, bg, nullptr, 0, r));
    cudaGraphExec_t be;
    CHECK(cudaGraphInstantiate(&be, bg, 0));
    CHECK(cudaGraphLaunch(be, s));
    CHECK(cudaStreamSynchronize(s));
    // 5. A trim: returns unused graph memory (the freed 16 and 8 MiB), not the leak.
    const long long before_trim = used_bytes() - base;
    CHECK(cudaDeviceGraphMemTrim(0));
    const long long after_trim = used_bytes() - base;
    FILE *f = fopen("truth.json", "w");
    fprintf(f,
            "{\"leaked\": %zu, \"leak_count\": 64, \"unlaunched\": %zu, \"allocs\": %d, \"frees\": %d, "
            "\"used_at_create\": %lld, \"used_at_instantiate\": %lld, \"used_at_launch\": %lld, "
            "\"used_after_destroy\": %lld, \"used_at_capture\": %lld, \"used_before_trim\": %lld, "
            "\"used_after_trim\": %lld}\n",
            64 * MiB, 32 * MiB, 64 + 3 + 2, 3 + 2, at_create, at_instantiate, at_launch, after_destroy, at_capture,
            before_trim, after_trim);
    fclose(f);
    return 0;
}

// ---- devices-per-thread
static void *on_gpu1(void *)
{
    void *p = nullptr;
    CHECK(cudaSetDevice(1));
    CHECK(cudaMalloc(&p, 96 * MiB));
    CHECK(cudaDeviceSynchronize());
    return p;
}

static int devices_per_thread()
{
    int n = 0;
    CHECK(cudaGetDeviceCount(&n));
    FILE *f = fopen("truth.json", "w");
    if (n < 2) {
        fprintf(f, "{\"gpus\": %d}\n", n);
        fclose(f);
        return 0;
    }
    CHECK(cudaSetDevice(0));
    void *p = nullptr;
    CHECK(cudaMalloc(&p, 64 * MiB));
    pthread_t t;
    if (pthread_create(&t, nullptr, on_gpu1, nullptr) != 0)
        return 1;
    pthread_join(t, nullptr);
    CUdevice d1;
    CUcontext c1, popped;
    DRV(cuDeviceGet(&d1, 1));
    DRV(cuDevicePrimaryCtxRetain(&c1, d1));
    DRV(cuCtxPushCurrent(c1));
    CUdeviceptr q;
    DRV(cuMemAlloc(&q, 32 * MiB));
    DRV(cuCtxPopCurrent(&popped));
    int current = -1;
    CHECK(cudaGetDevice(&current));
    fprintf(f, "{\"gpus\": %d, \"on_gpu0\": %zu, \"on_gpu1\": %zu, \"current_after_pop\": %d", n, 64 * MiB,
            128 * MiB, current);
    for (int d = 0; d < 2; d++) {
        char bus[64] = {0};
        CHECK(cudaDeviceGetPCIBusId(bus, (int)sizeof bus - 1, d));
        cudaDeviceProp prop{};
        CHECK(cudaGetDeviceProperties(&prop, d));
        fprintf(f, ", \"pci%d\": \"%s\", \"uuid%d\": \"", d, bus, d);
        for (int i = 0; i < 16; i++)
            fprintf(f, "%02x", (unsigned char)prop.uuid.bytes[i]);
        fprintf(f, "\"");
    }
    fprintf(f, "}\n");
    fclose(f);
    return 0;
}

// ---- pool-paths
__attribute__((noinline)) static void *pool_path_mid(size_t size, cudaStream_t s)
{
    void *p = nullptr;
    CHECK(cudaMallocAsync(&p, size, s));
    return p;
}
__attribute__((noinline)) static void *pool_path_a(size_t size, cudaStream_t s) { return pool_path_mid(size, s); }
__attribute__((noinline)) static void *pool_path_b(size_t size, cudaStream_t s) { return pool_path_mid(size, s); }

static int pool_paths()
{
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    size_t kept_a = 0, kept_b = 0;
    int n_a = 0, n_b = 0;
    for (int i = 0; i < 20000; i++) {
        int b = i % 2;
        size_t size = b && i % 2000 == 1 ? 8192 : 4096;
        void *p = b ? pool_path_b(size, s) : pool_path_a(size, s);
        if (!b && i % 1000 == 0) {
            kept_a += size, n_a++;
        } else if (b && i % 2000 == 1) {
            kept_b += size, n_b++;
        } else {
            CHECK(cudaFreeAsync(p, s));
        }
    }
    CHECK(cudaStreamSynchronize(s));
    FILE *f = fopen("truth.json", "w");
    fprintf(f, "{\"pairs\": 20000, \"kept_a\": %zu, \"n_a\": %d, \"kept_b\": %zu, \"n_b\": %d}\n", kept_a, n_a, kept_b, n_b);
    fclose(f);
    return 0;
}

// ---- metrics
__attribute__((noinline)) static void *metrics_weights()
{
    void *p = nullptr;
    CHECK(cudaMalloc(&p, 64 * MiB));
    return p;
}
__attribute__((noinline)) static void *metrics_leak()
{
    void *p = nullptr;
    CHECK(cudaMalloc(&p, 4 * MiB));
    return p;
}

// GET /metrics from the address in the first gpushim-*.sd.json of the working directory; the
// body in `out` (up to `cap` bytes). False when there is no file yet or the request fails.
static bool scrape_own_metrics(char *out, size_t cap)
{
    glob_t g;
    if (glob("gpushim-*.sd.json", 0, nullptr, &g) != 0)
        return false;
    FILE *f = fopen(g.gl_pathv[0], "r");
    globfree(&g);
    if (!f)
        return false;
    char text[4096] = {0};
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    const char *t = strstr(text, "\"targets\"");
    const char *q = t ? strchr(t, '"' ) : nullptr;  // the key's opening quote
    q = q ? strchr(q + 1, '"') : nullptr;           // its closing quote
    q = q ? strchr(q + 1, '"') : nullptr;           // the address's opening quote
    if (!q)
        return false;
    char addr[128] = {0};
    if (sscanf(q + 1, "%127[^\"]", addr) != 1)
        return false;
    char *colon = strrchr(addr, ':');
    if (!colon)
        return false;
    *colon = 0;
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)atoi(colon + 1));
    if (inet_pton(AF_INET, addr, &sa.sin_addr) != 1)
        return false;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return false;
    bool ok = connect(fd, (sockaddr *)&sa, sizeof sa) == 0;
    const char req[] = "GET /metrics HTTP/1.0\r\n\r\n";
    ok = ok && write(fd, req, sizeof req - 1) == (ssize_t)(sizeof req - 1);
    size_t got = 0;
    while (ok && got < cap - 1) {
        ssize_t r = read(fd, out + got, cap - 1 - got);
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    out[got] = 0;
    return ok && got > 0;
}

// The value of the first sample line of `name` (followed by `{` or a space): the text after the
// line's last space; -1 when there is none.
static double metric_value(const char *text, const char *name)
{
    size_t len = strlen(name);
    for (const char *l = text; *l;) {
        const char *end = strchr(l, '\n');
        size_t n = end ? (size_t)(end - l) : strlen(l);
        if (n > len && strncmp(l, name, len) == 0 && (l[len] == '{' || l[len] == ' ')) {
            const char *sp = l + n;
            while (sp > l && sp[-1] != ' ')
                sp--;
            return atof(sp);
        }
        if (!end)
            break;
        l = end + 1;
    }
    return -1;
}

static int metrics()
{
    (void)metrics_weights();
    for (int i = 0; i < 10; i++) {
        void *scratch = nullptr;
        CHECK(cudaMalloc(&scratch, 1 * MiB));
        CHECK(cudaFree(scratch));
        (void)metrics_leak();
        usleep(5000);
    }
    const size_t kept = 104 * MiB;
    static char body[1 << 20];
    bool seen = false;
    for (int i = 0; i < 3000 && !seen; i++) {  // 60 s at most, polling every 20 ms
        seen = scrape_own_metrics(body, sizeof body) && metric_value(body, "gpushim_process_live_bytes") == (double)kept;
        if (!seen)
            usleep(20000);
    }
    FILE *m = fopen("metrics.txt", "w");
    fputs(body, m);
    fclose(m);
    FILE *f = fopen("truth.json", "w");
    fprintf(f, "{\"kept\": %zu, \"allocations\": 21, \"frees\": 10, \"scraped\": %s}\n", kept, seen ? "true" : "false");
    fclose(f);
    return 0;
}

// ---- exit-time (issue 14: the program's exit is released within 50 ms, whatever the run's
// length). The parent, which makes no CUDA call, runs itself 5 times as "exit-time-child N"
// (traced like any program: LD_PRELOAD is inherited, each child has its own collector); a child
// makes N cudaMallocAsync + cudaFreeAsync pairs of 4 KiB on a stream of device 0 (pool hits),
// then writes CLOCK_MONOTONIC (ns) on
// the pipe its parent gave it as its last act and returns from main. The parent takes the same
// clock when waitpid returns: the difference is what the exit cost. truth.json: the pairs and
// each run's exit time in ms.
static int exit_time_child(long n, int fd)
{
    // Stream-ordered pool hits (about 1 us a pair on the H200): a million events in seconds,
    // where a million cudaMalloc + cudaFree pairs take over a minute.
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    for (long i = 0; i < n; i++) {
        void *p = nullptr;
        CHECK(cudaMallocAsync(&p, 4096, s));
        CHECK(cudaFreeAsync(p, s));
    }
    CHECK(cudaStreamSynchronize(s));
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    long long stamp = (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
    if (write(fd, &stamp, sizeof stamp) != (ssize_t)sizeof stamp)
        return 1;
    return 0;
}

// One child's exit time, ms: the child runs `self exit-time-child N FD`, with the shim
// (LD_PRELOAD inherited) or without it (`bare`: LD_PRELOAD removed before the exec). < 0 on failure.
static double exit_time_run(const char *self, long n, bool bare)
{
    int fds[2];
    if (pipe(fds) != 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        if (bare)
            unsetenv("LD_PRELOAD");
        char nbuf[32], fdbuf[16];
        snprintf(nbuf, sizeof nbuf, "%ld", n);
        snprintf(fdbuf, sizeof fdbuf, "%d", fds[1]);
        execl(self, self, "exit-time-child", nbuf, fdbuf, (char *)nullptr);
        _exit(127);
    }
    close(fds[1]);
    long long stamp = 0;
    ssize_t got = read(fds[0], &stamp, sizeof stamp);
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    long long end = (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
    if (got != (ssize_t)sizeof stamp || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "exit-time: a run failed (status %d)\n", status);
        return -1;
    }
    return (end - stamp) / 1e6;
}

// 5 runs under the shim and 5 without, alternately: a CUDA program's own exit (the runtime's and
// driver's teardown of its context) takes its time with or without the shim.
static int exit_time(const char *self, long n)
{
    const int runs = 5;
    double ms[runs], bare[runs];
    for (int r = 0; r < runs; r++) {
        if ((ms[r] = exit_time_run(self, n, false)) < 0 || (bare[r] = exit_time_run(self, n, true)) < 0)
            return 1;
        printf("exit-time: run %d: %ld pairs, exit %.1f ms (without the shim %.1f ms)\n", r, n, ms[r], bare[r]);
    }
    FILE *f = fopen("truth.json", "w");
    fprintf(f, "{\"pairs\": %ld, \"runs\": %d, \"exit_ms\": [", n, runs);
    for (int r = 0; r < runs; r++)
        fprintf(f, "%s%.3f", r ? ", " : "", ms[r]);
    fprintf(f, "], \"bare_exit_ms\": [");
    for (int r = 0; r < runs; r++)
        fprintf(f, "%s%.3f", r ? ", " : "", bare[r]);
    fprintf(f, "]}\n");
    fclose(f);
    return 0;
}

// ---- capture-paths (issue 18): stream-ordered calls ask no capture state while no capture is in
// progress; every way a capture begins must still make its allocations graph nodes. Three captures,
// each of a cudaMallocAsync whose graph is destroyed unlaunched: (1) on a stream that joined the
// capture of another by waiting on its event (it never began a capture itself); (2) through
// cudaStreamBeginCaptureToGraph into the program's graph; (3) on the per-thread default stream.
// Pool hits before, between and after; 1 MiB kept. Live: 1 MiB; unlaunched: 4 + 8 + 2 MiB in 3 nodes.
__attribute__((noinline)) static void capture_pool_pairs(cudaStream_t s, int n)
{
    for (int i = 0; i < n; i++) {
        void *p = nullptr;
        CHECK(cudaMallocAsync(&p, 4096, s));
        CHECK(cudaFreeAsync(p, s));
    }
}

static int capture_paths()
{
    cudaStream_t s1, s2;
    CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    cudaEvent_t fork_ev, join_ev;
    CHECK(cudaEventCreateWithFlags(&fork_ev, cudaEventDisableTiming));
    CHECK(cudaEventCreateWithFlags(&join_ev, cudaEventDisableTiming));
    capture_pool_pairs(s1, 1000);
    // 1. s2 joins s1's capture through an event (CUDA Programming Guide, "Cross-stream
    // Dependencies and Events").
    CHECK(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal));
    CHECK(cudaEventRecord(fork_ev, s1));
    CHECK(cudaStreamWaitEvent(s2, fork_ev, 0));
    (void)captured_alloc(4 * MiB, s2);
    CHECK(cudaEventRecord(join_ev, s2));
    CHECK(cudaStreamWaitEvent(s1, join_ev, 0));
    cudaGraph_t g1;
    CHECK(cudaStreamEndCapture(s1, &g1));
    CHECK(cudaGraphDestroy(g1));
    capture_pool_pairs(s2, 1000);
    // 2. Into the program's own graph.
    cudaGraph_t g2;
    CHECK(cudaGraphCreate(&g2, 0));
    CHECK(cudaStreamBeginCaptureToGraph(s1, g2, nullptr, nullptr, 0, cudaStreamCaptureModeGlobal));
    (void)captured_alloc(8 * MiB, s1);
    cudaGraph_t same;
    CHECK(cudaStreamEndCapture(s1, &same));
    CHECK(cudaGraphDestroy(g2));
    // 3. The per-thread default stream.
    CHECK(cudaStreamBeginCapture(cudaStreamPerThread, cudaStreamCaptureModeThreadLocal));
    (void)captured_alloc(2 * MiB, cudaStreamPerThread);
    cudaGraph_t g3;
    CHECK(cudaStreamEndCapture(cudaStreamPerThread, &g3));
    CHECK(cudaGraphDestroy(g3));
    capture_pool_pairs(s1, 1000);
    void *kept = nullptr;
    CHECK(cudaMallocAsync(&kept, 1 * MiB, s1));
    CHECK(cudaDeviceSynchronize());
    FILE *f = fopen("truth.json", "w");
    fprintf(f, "{\"live\": %zu, \"unlaunched\": %zu, \"nodes\": 3, \"allocs\": %d, \"frees\": %d}\n", 1 * MiB,
            14 * MiB, 3001, 3000);
    fclose(f);
    return 0;
}

// ---- ring-threads
static const int RING_THREADS = 16;
static const long RING_PAIRS = 2000;
static volatile int ring_done_count;

__attribute__((noinline)) static void ring_pair(cudaStream_t s)
{
    void *p = nullptr;
    CHECK(cudaMallocAsync(&p, 4096, s));
    CHECK(cudaFreeAsync(p, s));
}

__attribute__((noinline)) static void *ring_keep(cudaStream_t s)
{
    void *p = nullptr;
    CHECK(cudaMallocAsync(&p, 8192, s));
    return p;
}

static void *ring_thread(void *arg)
{
    long i = (long)arg;
    char name[16];
    snprintf(name, sizeof name, "ring-%ld", i);
    pthread_setname_np(pthread_self(), name);
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    for (long k = 0; k < (i + 1) * RING_PAIRS; k++)
        ring_pair(s);
    for (long k = 0; k <= i; k++)
        (void)ring_keep(s);
    CHECK(cudaStreamSynchronize(s));
    __atomic_add_fetch(&ring_done_count, 1, __ATOMIC_RELEASE);
    return nullptr;
}

static int ring_threads()
{
    CHECK(cudaFree(0));
    pthread_t t[RING_THREADS];
    for (long i = 0; i < RING_THREADS; i++)
        if (pthread_create(&t[i], nullptr, ring_thread, (void *)i) != 0)
            return 1;
    int signals = 0;
    while (__atomic_load_n(&ring_done_count, __ATOMIC_ACQUIRE) < RING_THREADS) {
        kill(getpid(), SIGUSR1);
        signals++;
        timespec ts{0, 2000000};
        nanosleep(&ts, nullptr);
    }
    for (int i = 0; i < RING_THREADS; i++)
        pthread_join(t[i], nullptr);
    FILE *f = fopen("truth.json", "w");
    fprintf(f, "{\"threads\": %d, \"pairs_per_index\": %ld, \"pair_bytes\": 4096, \"keep_bytes\": 8192, \"signals\": %d}\n",
            RING_THREADS, RING_PAIRS, signals);
    fclose(f);
    return 0;
}

int main(int argc, char **argv)
{
    const char *c = argc > 1 ? argv[1] : "";
    if (!strcmp(c, "exit-cleanup"))
        return exit_cleanup();
    if (!strcmp(c, "slow-free"))
        return slow_free();
    if (!strcmp(c, "arrays"))
        return arrays();
    if (!strcmp(c, "reset"))
        return reset(false);
    if (!strcmp(c, "reset-driver"))
        return reset(true);
    if (!strcmp(c, "stream-device"))
        return stream_device();
    if (!strcmp(c, "contexts"))
        return contexts();
    if (!strcmp(c, "pool-device"))
        return pool_device();
    if (!strcmp(c, "oom-device"))
        return oom_device();
    if (!strcmp(c, "vmm"))
        return vmm();
    if (!strcmp(c, "graph"))
        return graph();
    if (!strcmp(c, "devices-per-thread"))
        return devices_per_thread();
    if (!strcmp(c, "pool-paths"))
        return pool_paths();
    if (!strcmp(c, "metrics"))
        return metrics();
    if (!strcmp(c, "exit-time"))
        return exit_time(argv[0], argc > 2 ? atol(argv[2]) : 1000000);
    if (!strcmp(c, "exit-time-child") && argc > 3)
        return exit_time_child(atol(argv[2]), atoi(argv[3]));
    if (!strcmp(c, "capture-paths"))
        return capture_paths();
    if (!strcmp(c, "ring-threads"))
        return ring_threads();
    fprintf(stderr, "usage: faults exit-cleanup|slow-free|arrays|reset|reset-driver|stream-device|contexts|pool-device|oom-device|vmm|graph|devices-per-thread|pool-paths|metrics|exit-time [N]|capture-paths|ring-threads\n");
    return 2;
}
