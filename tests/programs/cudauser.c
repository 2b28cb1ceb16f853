/* A library that links the CUDA runtime, for programs to dlopen RTLD_LOCAL (as Python loads
 * PyTorch's extension modules). */
#include "cudart_standin.h"

__attribute__((visibility("default"))) cudaError_t cudauser_alloc(void **p, size_t n)
{
    return cudaMalloc(p, n);
}
