/* A library that links the CUDA runtime, for programs to dlopen RTLD_LOCAL (as Python loads
 * PyTorch's extension modules).  Built twice: libcudauser.so links libcudart.so.13,
 * libcudauser12.so links libcudart.so.12. */
#include "cudart_standin.h"

__attribute__((visibility("default"))) cudaError_t cudauser_alloc(void **p, size_t n)
{
    return cudaMalloc(p, n);
}

__attribute__((visibility("default"))) cudaError_t cudauser_free(void *p)
{
    return cudaFree(p);
}
