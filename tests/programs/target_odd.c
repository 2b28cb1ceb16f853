/*
 * Scenarios of the test target (see target.c) that make odd calls: failing
 * calls (a null out-pointer, unknown frees, out of memory), a pitched size
 * that overflows, and a call from a frame without unwind information.
 */
#include "target.h"

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
