// Leak: a device scratch buffer leaked on an early-return error path.
//
// Mechanism, from public reports: a batch function cudaMalloc's its buffers, then an input
// check or a copy fails and the function returns early through a CHECK/TRY macro, skipping
// the cudaFree calls that only run on the success path. Each rejected batch leaks its
// buffer; with no owner left, the pointer is gone. Sources:
// shrec/UltrafastSecp256k1 issue #345 ("CUDA device memory leaks on CUDA_TRY early return
// in batch verification ops"), NVIDIA/stdexec PR #2220 ("Free device allocation when copy
// fails": the successful allocation has no owner and is leaked), uxlfoundation/oneMath
// issue #274 ("Every CUDA_ERROR_FUNC could allow a memory leak").
//
// Truth: leak. verify_batch() allocates d_work at the line with the leak marker; for every batch
// whose header fails validation (b % 4 == 1: 50 of 200 batches, the last of them followed by good ones) it returns without
// freeing it. The pointer lives only in a local variable, so those 50 allocations have no
// pointer left once verify_batch returns. The 150 good batches free everything.
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define TRY(call)                                                            \
    do {                                                                     \
        cudaError_t e_ = (call);                                             \
        if (e_ != cudaSuccess) {                                             \
            fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__,                \
                    cudaGetErrorString(e_));                                 \
            return -1;                                                       \
        }                                                                    \
    } while (0)

struct BatchHeader {
    unsigned magic;
    unsigned count;
};

__global__ void score(const float* in, float* work, int* ok, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = in[i];
        work[i] = v * v + 1.0f;
        ok[i] = work[i] > 0.5f;
    }
}

static const unsigned kMagic = 0x5eed5eedu;

// Returns the number of accepted items, or -1 when the batch is rejected.
__attribute__((noinline)) int verify_batch(const BatchHeader& hdr, const float* host_in) {
    const unsigned n = hdr.count;
    float* d_work = nullptr;
    TRY(cudaMalloc(&d_work, (size_t)n * sizeof(float)));  // @leak

    // bug: the header is validated after the scratch buffer exists, and the rejection
    // path returns without cudaFree(d_work)
    if (hdr.magic != kMagic) {
        fprintf(stderr, "batch rejected: bad magic %#x\n", hdr.magic);
        return -1;
    }

    float* d_in = nullptr;
    int* d_ok = nullptr;
    TRY(cudaMalloc(&d_in, (size_t)n * sizeof(float)));
    TRY(cudaMalloc(&d_ok, (size_t)n * sizeof(int)));
    TRY(cudaMemcpy(d_in, host_in, (size_t)n * sizeof(float), cudaMemcpyHostToDevice));
    score<<<(n + 255) / 256, 256>>>(d_in, d_work, d_ok, n);
    TRY(cudaGetLastError());
    int first = 0;
    TRY(cudaMemcpy(&first, d_ok, sizeof(int), cudaMemcpyDeviceToHost));
    TRY(cudaFree(d_ok));
    TRY(cudaFree(d_in));
    TRY(cudaFree(d_work));
    return first ? (int)n : 0;
}

int main(int argc, char** argv) {
    int batches = argc > 1 ? atoi(argv[1]) : 200;
    const unsigned n = 1u << 20;  // 4 MiB per buffer
    std::vector<float> host(n);
    for (unsigned i = 0; i < n; ++i) host[i] = (float)((i * 2654435761u) % 1000) / 1000.0f;
    long accepted = 0;
    int rejected = 0;
    for (int b = 0; b < batches; ++b) {
        BatchHeader hdr{(b % 4 == 1) ? 0xbadu : kMagic, n};
        int r = verify_batch(hdr, host.data());
        if (r < 0) ++rejected; else accepted += r;
    }
    cudaDeviceSynchronize();
    size_t freeb = 0, total = 0;
    cudaMemGetInfo(&freeb, &total);
    printf("%d batches: %ld items accepted, %d batches rejected (%d MiB of scratch leaked)\n",
           batches, accepted, rejected, rejected * 4);
    return 0;
}
