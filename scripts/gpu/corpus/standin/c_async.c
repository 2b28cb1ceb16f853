/* Negative: stream-ordered allocation, a 64 KiB buffer taken with cudaMallocAsync and given back
 * with cudaFreeAsync in each of 300 steps.
 * Usage: c_async */
#include "rt.h"

int main(void)
{
    for (int i = 0; i < 300; i++) {
        void *p = NULL;
        check(cudaMallocAsync(&p, 64 << 10, NULL), "cudaMallocAsync");
        check(cudaFreeAsync(p, NULL), "cudaFreeAsync");
    }
    printf("300 steps\n");
    return 0;
}
