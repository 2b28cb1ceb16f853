// GPU cases of the reachability scan (issue 17; docs/gpu-matrix.md, scripts/gpu-matrix.sh):
// `reach CASE`, run under the shim in its own directory; each case writes truth.json there for
// compare.py. Written in the style of the CUDA samples' vectorAdd.
//   lost    vectorAdd three times through a helper whose device pointers are locals that are
//           never freed: 9 allocations of 4 MiB, every one definitely lost at exit.
//   kept    the same, with the pointers kept in a malloc'd struct that a global points to: all 9
//           reachable (from the heap), none lost.
//   cublas  8 threads, each creating its own cuBLAS handle, running one SGEMM of 512 x 512 on its
//           own matrices (kept in a global table) and ending without cublasDestroy: the handles'
//           own device memory (workspace) is held only through cuBLAS's own objects.
//   shared  the 9 pointers kept only in MAP_SHARED|MAP_ANONYMOUS memory (its mapping reads as
//           `/dev/zero (deleted)`): all 9 reachable.
//   registered  kept only in a heap block the program also pinned with cudaHostRegister (so the
//           driver points to it too): never definitely lost.
//   stack   kept only in the low end of a mapping whose high end is the stack the program gave
//           a thread (pthread_attr_setstack), blocked in read() at exit: never definitely lost.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define CHECK(x)                                                                          \
    do {                                                                                  \
        cudaError_t e_ = (x);                                                             \
        if (e_ != cudaSuccess) {                                                          \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

static const int N = 1 << 20; // floats per vector: 4 MiB

__global__ void vectorAdd(const float *A, const float *B, float *C, int n)
{
    int i = blockDim.x * blockIdx.x + threadIdx.x;
    if (i < n)
        C[i] = A[i] + B[i] + 0.0f;
}

struct Buffers {
    float *d_A, *d_B, *d_C;
};

// Kept: a global pointer to a malloc'd table of structs (the pointers live only in the heap).
Buffers *volatile g_kept;

// One vectorAdd, as the sample does it, but with no cudaFree at the end. With `keep` the device
// pointers go into `keep`, else they are dropped when the function returns.
__attribute__((noinline)) static float vector_add_once(Buffers *keep)
{
    size_t size = N * sizeof(float);
    float *h_A = (float *)malloc(size), *h_B = (float *)malloc(size), *h_C = (float *)malloc(size);
    for (int i = 0; i < N; ++i) {
        h_A[i] = rand() / (float)RAND_MAX;
        h_B[i] = rand() / (float)RAND_MAX;
    }
    float *d_A = NULL, *d_B = NULL, *d_C = NULL;
    CHECK(cudaMalloc((void **)&d_A, size));
    CHECK(cudaMalloc((void **)&d_B, size));
    CHECK(cudaMalloc((void **)&d_C, size));
    CHECK(cudaMemcpy(d_A, h_A, size, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(d_B, h_B, size, cudaMemcpyHostToDevice));
    int threads = 256, blocks = (N + threads - 1) / threads;
    vectorAdd<<<blocks, threads>>>(d_A, d_B, d_C, N);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(h_C, d_C, size, cudaMemcpyDeviceToHost));
    float check = h_C[N / 2] - h_A[N / 2] - h_B[N / 2];
    if (keep) {
        keep->d_A = d_A;
        keep->d_B = d_B;
        keep->d_C = d_C;
    }
    // Scrub the host copies of the pointers a sample would leave in freed host memory only.
    d_A = d_B = d_C = NULL;
    free(h_A);
    free(h_B);
    free(h_C);
    return check;
}

// Overwrites the stack below the caller, where the helper's dead frames hold stale copies.
__attribute__((noinline)) static void clear_stack()
{
    char pad[256 * 1024];
    explicit_bzero(pad, sizeof pad);
    __asm__ volatile("" : : "r"(pad) : "memory");
}

static int vector_cases(bool keep, Buffers *where = NULL)
{
    if (keep && !where)
        g_kept = (Buffers *)calloc(3, sizeof(Buffers));
    else if (where)
        g_kept = where;
    float err = 0;
    for (int i = 0; i < 3; i++)
        err += vector_add_once(keep ? &g_kept[i] : NULL);
    CHECK(cudaDeviceSynchronize());
    clear_stack();
    FILE *f = fopen("truth.json", "w");
    fprintf(f, "{\"allocations\": 9, \"bytes\": %zu, \"kept\": %s, \"error\": %g}\n", 9 * N * sizeof(float),
            keep ? "true" : "false", err);
    fclose(f);
    return 0;
}

// ---- the kinds of memory an outside review found the scan left out (issue 29, item 5)
static int shared_case()
{
    void *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return 1;
    return vector_cases(true, (Buffers *)m);
}

static int registered_case()
{
    Buffers *b = (Buffers *)aligned_alloc(4096, 4096);
    memset(b, 0, 4096);
    CHECK(cudaHostRegister(b, 4096, cudaHostRegisterDefault));
    return vector_cases(true, b);
}

static int g_pipe[2];

static void *blocked_thread(void *)
{
    char c;
    // Blocked until the process exits: its stack pointer stays near the top of its stack.
    while (read(g_pipe[0], &c, 1) < 0) {
    }
    return NULL;
}

static int stack_case()
{
    const size_t total = 1 << 20, stack = 768 << 10;
    char *m = (char *)mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED || pipe(g_pipe))
        return 1;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setstack(&a, m + (total - stack), stack);
    pthread_t t;
    if (pthread_create(&t, &a, blocked_thread, NULL))
        return 1;
    // The pointers go to the mapping's low end, below the thread's stack, and the global that
    // would lead to them is cleared: only the mapping holds them.
    int rc = vector_cases(true, (Buffers *)m);
    g_kept = NULL;
    return rc;
}

// ---- cublas: one handle per thread, never destroyed
static const int M = 512;
static float *g_mats[8][3];

static void *cublas_thread(void *arg)
{
    long t = (long)arg;
    cublasHandle_t h;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "cublasCreate failed\n");
        exit(1);
    }
    for (int k = 0; k < 3; k++)
        CHECK(cudaMalloc((void **)&g_mats[t][k], M * M * sizeof(float)));
    float one = 1, zero = 0;
    if (cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, M, M, M, &one, g_mats[t][0], M, g_mats[t][1], M, &zero,
                    g_mats[t][2], M) != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "cublasSgemm failed\n");
        exit(1);
    }
    CHECK(cudaDeviceSynchronize());
    // No cublasDestroy(h): the handle was a local of this thread, which now ends.
    return NULL;
}

static int cublas_case()
{
    pthread_t th[8];
    for (long t = 0; t < 8; t++)
        pthread_create(&th[t], NULL, cublas_thread, (void *)t);
    for (int t = 0; t < 8; t++)
        pthread_join(th[t], NULL);
    FILE *f = fopen("truth.json", "w");
    fprintf(f, "{\"threads\": 8, \"matrices\": 24, \"matrix_bytes\": %zu}\n", 24 * (size_t)M * M * sizeof(float));
    fclose(f);
    return 0;
}

int main(int argc, char **argv)
{
    const char *c = argc > 1 ? argv[1] : "";
    if (!strcmp(c, "lost"))
        return vector_cases(false);
    if (!strcmp(c, "kept"))
        return vector_cases(true);
    if (!strcmp(c, "cublas"))
        return cublas_case();
    if (!strcmp(c, "shared"))
        return shared_case();
    if (!strcmp(c, "registered"))
        return registered_case();
    if (!strcmp(c, "stack"))
        return stack_case();
    fprintf(stderr, "usage: reach lost|kept|cublas|shared|registered|stack\n");
    return 2;
}
