// Negative: stream-ordered allocation. Each of 300 steps takes a 4 MiB buffer with
// cudaMallocAsync on a stream, sets it and gives it back with cudaFreeAsync (the device's
// default memory pool may keep the memory for reuse). nvcc's default (static) runtime.
//
// Usage: cxx_async
#include "common.h"

int main()
{
    cudaStream_t s;
    check(cudaStreamCreate(&s), "cudaStreamCreate");
    for (int i = 0; i < 300; i++) {
        void *p = nullptr;
        check(cudaMallocAsync(&p, 4u << 20, s), "cudaMallocAsync");
        check(cudaMemsetAsync(p, i & 0xFF, 4u << 20, s), "cudaMemsetAsync");
        check(cudaFreeAsync(p, s), "cudaFreeAsync");
    }
    check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    check(cudaStreamDestroy(s), "cudaStreamDestroy");
    std::printf("300 steps\n");
    return 0;
}
