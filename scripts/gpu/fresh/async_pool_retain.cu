// Negative: a stream-ordered memory pool (cudaMallocAsync) configured to retain freed
// memory, plus buffers held for the whole run. Every per-step allocation is freed with
// cudaFreeAsync; the pool keeps the physical memory (nvidia-smi stays high), which is not
// a leak.
//
// Mechanism, from public reports: with the default release threshold of 0 the pool gives
// memory back at every synchronisation and allocation is slow, so libraries set the
// threshold to the maximum and the pool keeps everything it ever reserved. Sources:
// rapidsai/rmm PR #2379 ("Default cuda_async_memory_resource release threshold to uint64_t
// max"), rapidsai/rmm issue #2510 (managed pool threshold causes allocation stalls),
// NVIDIA/cuda-python issue #771 (use an increased release threshold for the default pool),
// kokkos/kokkos PR #7032 (memory pool size setting for cudaMallocAsync).
//
// The loop allocates 3 buffers of varying size per step (sizes from a fixed set, so the
// pool's high-water mark is reached in the first steps) and frees them all; two model
// buffers (cudaMalloc) are allocated once and freed at exit.
//
// Truth: no leak.
#include <cuda_runtime.h>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#define CK(call)                                                              \
    do {                                                                      \
        cudaError_t e_ = (call);                                              \
        if (e_ != cudaSuccess) {                                              \
            fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__,                 \
                    cudaGetErrorString(e_));                                  \
            exit(1);                                                          \
        }                                                                     \
    } while (0)

__global__ void axpy(float* y, const float* x, float a, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i % 4096] + y[i];
}

int main(int argc, char** argv) {
    int steps = argc > 1 ? atoi(argv[1]) : 2000;
    CK(cudaSetDevice(0));
    cudaMemPool_t pool;
    CK(cudaDeviceGetDefaultMemPool(&pool, 0));
    uint64_t threshold = UINT64_MAX;
    CK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
    cudaStream_t s;
    CK(cudaStreamCreate(&s));

    // held for the whole run: "weights"
    float *weights = nullptr, *bias = nullptr;
    CK(cudaMalloc(&weights, 64u << 20));
    CK(cudaMalloc(&bias, 4096 * sizeof(float)));
    CK(cudaMemset(bias, 0, 4096 * sizeof(float)));

    const size_t sizes[] = {1u << 20, 3u << 20, 8u << 20, 24u << 20, 48u << 20};
    unsigned rng = 12345;
    double checksum = 0;
    for (int i = 0; i < steps; ++i) {
        float* bufs[3];
        size_t ns[3];
        for (int k = 0; k < 3; ++k) {
            rng = rng * 1664525u + 1013904223u;
            ns[k] = sizes[(rng >> 16) % 5] / sizeof(float);
            CK(cudaMallocAsync((void**)&bufs[k], ns[k] * sizeof(float), s));
            CK(cudaMemsetAsync(bufs[k], 0, ns[k] * sizeof(float), s));
            axpy<<<(unsigned)((ns[k] + 255) / 256), 256, 0, s>>>(bufs[k], bias, 0.5f, ns[k]);
        }
        for (int k = 0; k < 3; ++k) CK(cudaFreeAsync(bufs[k], s));
        if (i % 500 == 0) {
            CK(cudaStreamSynchronize(s));
            uint64_t reserved = 0, used = 0;
            CK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved));
            CK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used));
            printf("step %d: pool reserved %.0f MiB, used %.0f MiB\n", i,
                   reserved / 1048576.0, used / 1048576.0);
            checksum += (double)used;
        }
    }
    CK(cudaStreamSynchronize(s));
    CK(cudaFree(bias));
    CK(cudaFree(weights));
    CK(cudaStreamDestroy(s));
    printf("done %d steps (%.0f)\n", steps, checksum);
    return 0;
}
