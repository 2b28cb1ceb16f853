/*
 * Scenarios of the test target (see target.c) that make odd calls: failing
 * calls (a null out-pointer, unknown frees, out of memory), a pitched size
 * that overflows, and a call from a frame without unwind information.
 */
#include "target.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <stdio.h>

/* --------------------------------------------------------------- errors */

NOINLINE cudaError_t errors_null_out(void) { return cudaMalloc(NULL, 16); }

NOINLINE cudaError_t errors_oom(void **p) { return cudaMalloc(p, 2 * MiB); }

NOINLINE void *errors_small_kept(void) { return device_alloc_named(512 * KiB); }

int scenario_errors(void)
{
    cudaError_t e = errors_null_out();
    printf("null-out %d\n", e);
    if (e != cudaErrorInvalidValue)
        fail("cudaMalloc(NULL, 16)", e, cudaErrorInvalidValue);

    e = cudaFree((void *)0x1234);
    printf("unknown-free %d\n", e);
    if (e != cudaErrorInvalidValue)
        fail("cudaFree(0x1234)", e, cudaErrorInvalidValue);

    e = cudaFree(NULL);
    printf("null-free %d\n", e);
    if (e != cudaSuccess)
        fail("cudaFree(NULL)", e, cudaSuccess);

    void *sentinel = (void *)0x5a5a;
    void *p = sentinel;
    e = errors_oom(&p);
    printf("oom %d\n", e);
    if (e != cudaErrorMemoryAllocation)
        fail("cudaMalloc(2 MiB) with STANDIN_DEVICE_BYTES=1048576", e, cudaErrorMemoryAllocation);
    if (p != sentinel) {
        fprintf(stderr, "target: failed cudaMalloc changed its out-pointer\n");
        return 1;
    }

    (void)errors_small_kept();
    return 0;
}

/* pitch-overflow: cudaMallocPitch with width x height beyond size_t; the
 * runtime's error must come back unchanged, out-parameters untouched. */
int scenario_pitch_overflow(void)
{
    void *sentinel = (void *)0x5a5a;
    void *p = sentinel;
    size_t pitch = 7;
    cudaError_t e = cudaMallocPitch(&p, &pitch, (size_t)1 << 40, (size_t)1 << 40);
    printf("pitch-overflow %d\n", e);
    if (e != cudaErrorMemoryAllocation)
        fail("cudaMallocPitch(2^40, 2^40)", e, cudaErrorMemoryAllocation);
    if (p != sentinel || pitch != 7) {
        fprintf(stderr, "target: failed cudaMallocPitch changed its out-parameters\n");
        return 1;
    }
    return 0;
}

/* odd-rbp: cudaMalloc called from a frame that has no unwind information and
 * holds rbp = -8 (code without CFI may use rbp as a general register).
 * Live at exit: 1 MiB. */
#if defined(__x86_64__)
int odd_rbp_call(void *fn, void *a, size_t b);
__asm__(".text\n"
        ".globl odd_rbp_call\n"
        ".type odd_rbp_call, @function\n"
        "odd_rbp_call:\n"
        "    push %rbp\n"
        "    mov $-8, %rbp\n"
        "    mov %rdi, %rax\n"
        "    mov %rsi, %rdi\n"
        "    mov %rdx, %rsi\n"
        "    call *%rax\n"
        "    pop %rbp\n"
        "    ret\n"
        ".size odd_rbp_call, .-odd_rbp_call\n");
#endif

int scenario_odd_rbp(void)
{
#if defined(__x86_64__)
    void *p = NULL;
    check("cudaMalloc through a frame without CFI", odd_rbp_call((void *)cudaMalloc, &p, 1 * MiB));
    printf("odd-rbp %s\n", p != NULL ? "allocated" : "null");
    return 0;
#else
    printf("odd-rbp allocated\n");
    return device_alloc_named(1 * MiB) != NULL ? 0 : 1;
#endif
}

/* ---------------------------------------------------------------- paths */

/* Issue 18's per-thread caches (the unwinder's memo, the thread's previous stack) must not
 * change a report: allocations from many call paths in a loop, on two threads, where the
 * same inner frames (paths_mid, paths_leaf) are reached at the same depth from different
 * outer callers (paths_outer_a/b), from a varying recursion depth, through cudaMalloc and
 * cudaMallocAsync, and the same path several times in a row. Every allocation of an even
 * iteration is kept. With "fork", the parent makes one more 4 KiB allocation just before the
 * fork, and the child its first from the same call site (the forking thread's previous stack),
 * then runs the loop. Sizes: path k of iteration i allocates 4096 * (k + 1) bytes. */
static NOINLINE void *paths_leaf(size_t size, int async)
{
    void *p = NULL;
    if (async)
        check("cudaMallocAsync", cudaMallocAsync(&p, size, 0));
    else
        check("cudaMalloc", cudaMalloc(&p, size));
    return p;
}
static NOINLINE void *paths_mid(size_t size, int async) { return paths_leaf(size, async); }
static NOINLINE void *paths_outer_a(size_t size, int async) { return paths_mid(size, async); }
static NOINLINE void *paths_outer_b(size_t size, int async) { return paths_mid(size, async); }
static NOINLINE void *paths_deep(int depth, size_t size, int async)
{
    void *p = depth <= 0 ? paths_outer_a(size, async) : paths_deep(depth - 1, size, async);
    __asm__ volatile("" ::: "memory"); /* not a tail call */
    return p;
}

static NOINLINE void paths_loop(long n)
{
    for (long i = 0; i < n; i++) {
        int k = (int)(i % 7);
        size_t size = 4096 * (size_t)(k + 1);
        void *p;
        switch (k) {
        /* outer_a then outer_b through the same call: the same stack depth, the same inner
         * frames, a different caller. */
        case 0: case 2: p = paths_outer_a(size, k == 2); break;
        case 1: case 3: p = paths_outer_b(size, k == 3); break;
        default: p = paths_deep((int)(i % 4), size, k == 6); break;
        }
        if (i % 2 != 0)
            check("cudaFree", cudaFree(p));
    }
}

static void *paths_thread(void *arg)
{
    paths_loop(*(long *)arg);
    return NULL;
}

int scenario_paths(int argc, char **argv)
{
    long n = argc > 2 ? atol(argv[2]) : 1000;
    pthread_t t;
    if (pthread_create(&t, NULL, paths_thread, &n) != 0)
        return 1;
    paths_loop(n);
    pthread_join(t, NULL);
    if (argc > 3 && strcmp(argv[3], "fork") == 0) {
        /* One 4 KiB allocation from one call site in the parent just before the fork, and
         * again from the same call site (the same stack) as the child's first allocation. */
        for (int round = 0; round < 2; round++) {
            if (round == 1) {
                fflush(stdout);
                pid_t pid = fork();
                if (pid < 0)
                    return 1;
                if (pid > 0) {
                    int status = 0;
                    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
                        fprintf(stderr, "target: paths fork child failed\n");
                        return 1;
                    }
                    break;
                }
            }
            (void)paths_outer_a(4096, 0);
            if (round == 1) {
                paths_loop(n);
                printf("child ok\n");
                fflush(stdout);
                exit(0);
            }
        }
    }
    return 0;
}

/* alloca-paths: the same allocation site (alloca_leaf, under alloca_mid) reached from two
 * callers whose alloca sizes add up to the same total, so that the hook runs at the same stack
 * pointer each time and the return addresses above alloca_mid's are equal; only alloca_mid's
 * saved frame pointer differs (256 bytes apart). Calls, in order: A A A B A B A A (A 6, B 2).
 * Found by an adversarial review of the unwinder's one-pass check (2026-12-02), which copied
 * the previous stack for such a call. */
static NOINLINE void alloca_leaf(void)
{
    void *p;
    check("cudaMalloc", cudaMalloc(&p, 1 << 20));
}
static NOINLINE void alloca_mid(long n)
{
    char *b = __builtin_alloca(n);
    __asm__ volatile("" ::"r"(b) : "memory");
    alloca_leaf();
}
static NOINLINE void alloca_outer_a(void)
{
    char *b = __builtin_alloca(256);
    __asm__ volatile("" ::"r"(b) : "memory");
    alloca_mid(1024);
}
static NOINLINE void alloca_outer_b(void)
{
    char *b = __builtin_alloca(512);
    __asm__ volatile("" ::"r"(b) : "memory");
    alloca_mid(768);
}

int scenario_alloca_paths(void)
{
    void (*volatile order[8])(void) = {alloca_outer_a, alloca_outer_a, alloca_outer_a, alloca_outer_b,
                                       alloca_outer_a, alloca_outer_b, alloca_outer_a, alloca_outer_a};
    for (int i = 0; i < 8; i++)
        order[i]();
    return 0;
}
