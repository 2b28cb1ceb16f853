/* Stand-in program for scripts/bench-exit.sh: how long a program's exit takes under the shim.
 * Makes N cudaMalloc + cudaFree pairs of 4 KiB (against the CUDA stand-ins), then, as its last
 * act before returning from main, prints CLOCK_MONOTONIC in ns on stdout. The harness
 * (scripts/bench/exit_time.py) takes the same clock when waitpid returns: the difference is what
 * the exit costs (the shim's exit handler, its wait for the collector to confirm the stream).
 * Usage: exit N
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef int cudaError_t;
cudaError_t cudaMalloc(void **p, size_t n);
cudaError_t cudaFree(void *p);

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000000;
    for (long i = 0; i < n; i++) {
        void *p;
        if (cudaMalloc(&p, 4096) != 0 || cudaFree(p) != 0) {
            fprintf(stderr, "exit: pair %ld failed\n", i);
            return 1;
        }
    }
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    printf("%lld\n", (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec);
    fflush(stdout);
    return 0;
}
