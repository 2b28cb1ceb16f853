// Allocation matrix for the nvcc rows of scripts/gpu-matrix.sh: 8 threads, each with its own
// stream, using cudaMalloc, cudaMallocManaged, cudaMallocHost and cudaMallocAsync. Built twice:
// with nvcc's default static runtime and with --cudart shared.
//
// Expected live at exit: device 80 MiB in 48 allocations, managed 16 MiB in 8, pinned_host
// 8 MiB in 8; 152 successful allocations and 88 frees.
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define MIB (1u << 20)
#define CHECK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
    fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); exit(1); } } while (0)

__attribute__((noinline)) static void *keep_device(void) { void *p; CHECK(cudaMalloc(&p, MIB)); return p; }
__attribute__((noinline)) static void churn(void) { void *p; CHECK(cudaMalloc(&p, MIB / 2)); CHECK(cudaFree(p)); }
__attribute__((noinline)) static void *keep_managed(void) { void *p; CHECK(cudaMallocManaged(&p, 2 * MIB)); return p; }
__attribute__((noinline)) static void *keep_host(void) { void *p; CHECK(cudaMallocHost(&p, MIB)); return p; }
__attribute__((noinline)) static void *async_alloc(cudaStream_t s) { void *p; CHECK(cudaMallocAsync(&p, 3 * MIB, s)); return p; }

static void *worker(void *arg) {
    (void)arg;
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    for (int i = 0; i < 4; i++) keep_device();
    for (int i = 0; i < 10; i++) churn();
    keep_managed();
    keep_host();
    async_alloc(s);
    async_alloc(s);
    void *t = async_alloc(s);
    CHECK(cudaFreeAsync(t, s));
    CHECK(cudaStreamSynchronize(s));
    return NULL;
}

int main(void) {
    CHECK(cudaFree(0));
    pthread_t th[8];
    for (int i = 0; i < 8; i++) pthread_create(&th[i], NULL, worker, NULL);
    for (int i = 0; i < 8; i++) pthread_join(th[i], NULL);
    CHECK(cudaDeviceSynchronize());
    printf("ok\n");
    return 0;
}
