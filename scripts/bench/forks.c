/*
 * N forked children, one after another: each child makes one cudaMalloc of 4 KiB (or, with
 * "none", no CUDA call) and exits; the parent waits for each. The parent allocates 1 MiB first,
 * unless "children-only" follows: with the real CUDA runtime a child cannot use CUDA once its
 * parent has (CUDA does not survive fork), so on a GPU (scripts/gpu/perf_suite.py's forks row)
 * only the children touch it, and each pays for a CUDA context of its own. Prints the wall time
 * of the N children (scripts/bench-forks.sh).
 *
 * Usage: forks N [alloc|none] [children-only]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int cudaMalloc(void **p, size_t n);

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 200;
    int alloc = !(argc > 2 && strcmp(argv[2], "none") == 0);
    int parent = !(argc > 3 && strcmp(argv[3], "children-only") == 0);
    void *p = NULL;
    if (parent && cudaMalloc(&p, 1 << 20) != 0)
        return 1;
    double t0 = now();
    for (int i = 0; i < n; i++) {
        pid_t k = fork();
        if (k < 0)
            return 1;
        if (k == 0) {
            void *q = NULL;
            if (alloc && cudaMalloc(&q, 4096) != 0)
                _exit(1);
            exit(0);
        }
        int st = 0;
        if (waitpid(k, &st, 0) != k || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
            return 1;
    }
    printf("%d children (%s): %.3f s, %.2f ms each\n", n, alloc ? "alloc" : "none", now() - t0,
           (now() - t0) * 1e3 / n);
    return 0;
}
