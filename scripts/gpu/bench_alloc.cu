// Tight cudaMalloc/cudaFree loop of 2 MiB blocks (nvcc's default static runtime), for
// scripts/bench-gpu.sh. Prints the seconds taken by N pairs after a warm-up.
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }

__attribute__((noinline)) static void pair(void) {
    void *p;
    if (cudaMalloc(&p, 2u << 20) != cudaSuccess || cudaFree(p) != cudaSuccess) { fprintf(stderr, "cuda error\n"); exit(1); }
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 20000;
    cudaFree(0);
    for (long i = 0; i < 200; i++) pair();
    double t0 = now();
    for (long i = 0; i < n; i++) pair();
    printf("%.6f\n", now() - t0);
    return 0;
}
