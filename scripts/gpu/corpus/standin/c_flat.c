/* Negative: weights (1 MiB) in a global for the run, a 64 KiB temporary allocated and freed in
 * each of 300 steps (STEPS from argv, default 300; pause_ms between steps, default 0).
 * Usage: c_flat [STEPS [PAUSE_MS]] */
#include "rt.h"

static void *g_weights;

NOINLINE void step(void)
{
    void *tmp = NULL;
    check(cudaMalloc(&tmp, 64 << 10), "cudaMalloc");
    check(cudaMemset(tmp, 1, 64 << 10), "cudaMemset");
    check(cudaFree(tmp), "cudaFree");
}

int main(int argc, char **argv)
{
    int steps = argc > 1 ? atoi(argv[1]) : 300;
    int pause_ms = argc > 2 ? atoi(argv[2]) : 0;
    check(cudaMalloc(&g_weights, 1 << 20), "cudaMalloc");
    for (int i = 0; i < steps; i++) {
        step();
        if (pause_ms)
            usleep(pause_ms * 1000);
    }
    printf("%d steps\n", steps);
    return 0;
}
