// Negative: a cuBLAS program. One handle created at start and kept for the run (cuBLAS makes
// its workspace inside cublasCreate); three 1024x1024 matrices held in globals; 300 SGEMMs.
// Built with nvcc's default static runtime and -lcublas.
//
// Usage: cxx_cublas
#include "common.h"

#include <cublas_v2.h>

static cublasHandle_t g_handle;
static float *g_a, *g_b, *g_c;

int main()
{
    const int n = 1024;
    const size_t bytes = sizeof(float) * n * n;
    if (cublasCreate(&g_handle) != CUBLAS_STATUS_SUCCESS) {
        std::fprintf(stderr, "cublasCreate failed\n");
        return 1;
    }
    check(cudaMalloc(&g_a, bytes), "cudaMalloc");
    check(cudaMalloc(&g_b, bytes), "cudaMalloc");
    check(cudaMalloc(&g_c, bytes), "cudaMalloc");
    check(cudaMemset(g_a, 0, bytes), "cudaMemset");
    check(cudaMemset(g_b, 0, bytes), "cudaMemset");
    const float alpha = 1.0f, beta = 0.5f;
    for (int i = 0; i < 300; i++)
        cublasSgemm(g_handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, g_a, n, g_b, n, &beta, g_c, n);
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    std::printf("300 gemms\n");
    return 0;
}
