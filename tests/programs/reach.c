/*
 * Programs whose device pointers are kept, dropped or hidden, for the reachability scan
 * (shim/src/reach.rs; tests/reach.rs).  Linked to the stand-in libcudart.so.13.
 *
 * Usage: reach <scenario>; each prints "ok" last on success and then exits normally, so that
 * the final report carries a scan.
 */
#define _GNU_SOURCE
#include "cudart_standin.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))
#define KiB ((size_t)1 << 10)

/* Kept by the program: read by nobody, but they are the program's references. */
void *volatile held[4];
void *volatile last_kept;
char *volatile interior_kept;
volatile uintptr_t hidden;
void *volatile device_holder;

/* Clears the stack below the caller, where dead frames keep stale copies of pointers. */
static NOINLINE void clear_stack(void)
{
    char pad[512 * 1024];
    explicit_bzero(pad, sizeof pad); /* not removed as a dead store, unlike memset */
    __asm__ volatile("" : : "r"(pad) : "memory");
}

/* 5 allocations through one pointer variable: the first 4 are lost, the last is kept. */
static NOINLINE int overwrite_in_loop(void)
{
    void *p = NULL;
    for (int i = 0; i < 5; i++)
        if (cudaMalloc(&p, 8 * KiB) != cudaSuccess)
            return 1;
    last_kept = p;
    return 0;
}

/* 4 allocations kept in a global array: all reachable from the program's data. */
static NOINLINE int global_array(void)
{
    for (int i = 0; i < 4; i++) {
        void *p;
        if (cudaMalloc(&p, 8 * KiB) != cudaSuccess)
            return 1;
        held[i] = p;
    }
    return 0;
}

struct holder {
    long tag;
    void *dev;
};

/* The pointer lives only in a malloc'd struct whose own pointer is dropped (not freed). */
static NOINLINE int heap_struct_dropped(void)
{
    struct holder *h = malloc(sizeof *h);
    if (h == NULL)
        return 1;
    h->tag = 17;
    if (cudaMalloc(&h->dev, 8 * KiB) != cudaSuccess)
        return 1;
    return 0;
}

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int allocated;
static volatile pid_t sleeper;

/* True once thread `tid` sleeps in the kernel (state S in /proc/self/task/TID/stat): a thread
 * about to call futex in pthread_cond_wait still runs, and its stack would be read as anonymous
 * memory rather than as a blocked thread's stack. */
static int sleeping(pid_t tid)
{
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/self/task/%d/stat", (int)tid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *close = strrchr(buf, ')'); /* the name may hold spaces and parentheses */
    return close != NULL && close[1] == ' ' && close[2] == 'S';
}

static NOINLINE void *thread_keeps_on_stack(void *arg)
{
    (void)arg;
    void *volatile mine = NULL;
    void *p;
    if (cudaMalloc(&p, 8 * KiB) != cudaSuccess)
        return NULL;
    mine = p;
    p = NULL;
    clear_stack();
    sleeper = (pid_t)syscall(SYS_gettid);
    pthread_mutex_lock(&mu);
    allocated = 1;
    pthread_cond_broadcast(&cv);
    /* Waits for ever: the process exits while this thread sleeps here, `mine` on its stack. */
    while (allocated)
        pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    return (void *)mine;
}

/* The pointer lives only on another thread's stack, which sleeps on a condition. */
static NOINLINE int other_thread_stack(void)
{
    pthread_t t;
    if (pthread_create(&t, NULL, thread_keeps_on_stack, NULL) != 0)
        return 1;
    pthread_mutex_lock(&mu);
    while (!allocated)
        pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    /* Wait (at most about 10 s) until it sleeps in pthread_cond_wait. */
    for (int i = 0; i < 10000 && !sleeping(sleeper); i++) {
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
    return 0;
}

/* Only p + 4096 is kept. */
static NOINLINE int interior_only(void)
{
    char *p;
    if (cudaMalloc((void **)&p, 16 * KiB) != cudaSuccess)
        return 1;
    interior_kept = p + 4096;
    return 0;
}

/* The pointer is kept XOR-ed with a constant: no word holds it (a documented limitation). */
static NOINLINE int xor_hidden(void)
{
    void *p;
    if (cudaMalloc(&p, 8 * KiB) != cudaSuccess)
        return 1;
    hidden = (uintptr_t)p ^ 0x5555555555555555ull;
    return 0;
}

/* The pointer is kept only in device memory (the stand-in backs device memory with host
 * memory, so a store stands for a cudaMemcpy to the device): lost, a documented limitation. */
static NOINLINE int only_in_device_memory(void)
{
    void *a, *b;
    if (cudaMalloc(&a, 8 * KiB) != cudaSuccess || cudaMalloc(&b, 8 * KiB) != cudaSuccess)
        return 1;
    *(void **)a = b;
    device_holder = a;
    return 0;
}

/* 64 MiB of host heap full of small blocks, so that a scan takes a while, then 3 allocations
 * kept and 3 dropped. */
static NOINLINE int large_heap(void)
{
    size_t n = 64u * 1024 * 1024 / (64 * KiB);
    void **blocks = malloc(n * sizeof *blocks);
    if (blocks == NULL)
        return 1;
    for (size_t i = 0; i < n; i++) {
        blocks[i] = malloc(64 * KiB - 64);
        if (blocks[i] == NULL)
            return 1;
        memset(blocks[i], (int)(i & 0xff), 64 * KiB - 64);
    }
    held[3] = blocks;
    for (int i = 0; i < 3; i++) {
        void *p;
        if (cudaMalloc(&p, 8 * KiB) != cudaSuccess || cudaMalloc(&p, 8 * KiB) != cudaSuccess)
            return 1;
        held[i] = p;
    }
    return 0;
}

/* 12 device pointers copied into small heap blocks (40 bytes, at their third word) that are
 * then freed: glibc keeps the first 7 freed blocks of a size in the thread's cache and puts the
 * rest in the main arena's fastbins (malloc.c), both with their stale contents after the first
 * words and with chunks that still look in use.  The blocks are free, so nothing refers to the
 * allocations: all 12 are definitely lost. */
static NOINLINE int freed_small_blocks(void)
{
    enum { N = 12 };
    void *volatile blocks[N];
    for (int i = 0; i < N; i++)
        if ((blocks[i] = malloc(40)) == NULL)
            return 1;
    for (int i = 0; i < N; i++) {
        void *p;
        if (cudaMalloc(&p, 8 * KiB) != cudaSuccess)
            return 1;
        ((void *volatile *)blocks[i])[2] = p;
    }
    /* stdout's buffer is made now: a request of 1 KiB or more after the frees would merge
     * the fastbins' blocks into free chunks (malloc_consolidate). */
    printf("freeing\n");
    fflush(stdout);
    for (int i = 0; i < N; i++)
        free(blocks[i]);
    return 0;
}

/* One allocation dropped, one kept, then one that fails with out of memory (run with
 * STANDIN_DEVICE_BYTES=65536): the out-of-memory report's scan finds one lost. */
static NOINLINE int out_of_memory(void)
{
    void *p;
    if (cudaMalloc(&p, 8 * KiB) != cudaSuccess || cudaMalloc(&p, 8 * KiB) != cudaSuccess)
        return 1;
    last_kept = p;
    p = NULL;
    clear_stack();
    void *big;
    return cudaMalloc(&big, 1u << 30) == cudaErrorMemoryAllocation ? 0 : 1;
}

/* A pointer kept in a small block malloc'd after the first CUDA call, which a global points to:
 * the block may be memory the shim freed after starting (a stale copy of its address left in
 * the shim's own memory), and is still the program's. Both allocations are reachable. */
void *volatile first_kept;
void **volatile holder_kept;
static NOINLINE int block_after_start(void)
{
    void *p;
    if (cudaMalloc(&p, 8 * KiB) != cudaSuccess)
        return 1;
    first_kept = p;
    for (size_t size = 24; size <= 1024; size *= 2) {
        void **h = malloc(size);
        if (h == NULL || cudaMalloc(&h[0], 8 * KiB) != cudaSuccess)
            return 1;
        h[1] = (void *)holder_kept; /* a chain: every block stays reachable from the global */
        holder_kept = h;
    }
    return 0;
}

/* Pointers spread over many mappings, most of whose pages are never touched: 16 mappings of
 * 32 MiB, each with one touched page in its middle holding one device pointer and one pointer to
 * a malloc'd block that holds another; then 8 allocations dropped. 32 reachable, 8 lost; of the
 * 512 MiB mapped, only the touched pages need to be read. */
static NOINLINE int spread(void)
{
    for (int m = 0; m < 16; m++) {
        char *map = mmap(NULL, 32u << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (map == MAP_FAILED)
            return 1;
        void **slot = (void **)(map + (16u << 20) + 64 * m);
        void **block = malloc(256);
        if (block == NULL || cudaMalloc(&slot[0], 8 * KiB) != cudaSuccess ||
            cudaMalloc(&block[0], 8 * KiB) != cudaSuccess)
            return 1;
        slot[1] = block;
    }
    for (int i = 0; i < 8; i++) {
        void *p;
        if (cudaMalloc(&p, 8 * KiB) != cudaSuccess)
            return 1;
        p = NULL;
    }
    clear_stack();
    return 0;
}

/* 3 device pointers kept only in shared anonymous memory (MAP_SHARED | MAP_ANONYMOUS, which
 * the kernel lists as "/dev/zero (deleted)"), 2 dropped: 3 reachable, 2 lost. */
static NOINLINE int shared_anon(void)
{
    void **map = mmap(NULL, 1u << 20, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED)
        return 1;
    for (int i = 0; i < 5; i++) {
        void *p;
        if (cudaMalloc(&p, 8 * KiB) != cudaSuccess)
            return 1;
        if (i < 3)
            map[1000 * i] = p;
        p = NULL;
    }
    device_holder = map;
    clear_stack();
    return 0;
}

/* A CUDA library's handle, in a malloc'd block of the library's that its data points to too
 * (the stand-in cuBLAS's cublasLtCreate): the program keeps 3 handles, each holding a device
 * workspace; 2 allocations of the program's own are dropped.  The handles are the library's
 * bookkeeping and the program's at once: their workspaces are possibly lost, not definitely. */
void *volatile lib_kept[3];
static NOINLINE int library_block(void)
{
    void *lib = dlopen("libcublas.so.13", RTLD_NOW);
    int (*create)(void **) = lib != NULL ? (int (*)(void **))dlsym(lib, "cublasLtCreate") : NULL;
    if (create == NULL) {
        fprintf(stderr, "reach: no cublasLtCreate: %s\n", dlerror());
        return 1;
    }
    for (int i = 0; i < 3; i++) {
        void *h;
        if (create(&h) != 0)
            return 1;
        lib_kept[i] = h;
    }
    for (int i = 0; i < 2; i++) {
        void *p;
        if (cudaMalloc(&p, 8 * KiB) != cudaSuccess)
            return 1;
        p = NULL;
    }
    return 0;
}

/* Static containers torn down at exit, as C++'s std::map and std::vector destructors do: the
 * nodes and the array are freed and the globals still point at them.  A tree of 6 nodes laid
 * out as std::map's (each value at byte 40), an array of 16 pointers; 2 allocations dropped.
 * The exit's scan is made when main returns, before the teardown: the 22 are reachable, the 2
 * dropped definitely lost. */
struct node {
    int color;
    struct node *parent, *left, *right;
    long key;
    void *dev;
    char rest[184]; /* a size of its own: a block the exit path mallocs does not reuse one */
};
struct node *volatile table_root;
void **volatile table_vec;
static void teardown(void)
{
    for (struct node *n = table_root; n != NULL;) {
        struct node *next = n->right;
        free(n);
        n = next;
    }
    free(table_vec);
}
static NOINLINE int static_table(void)
{
    struct node *last = NULL;
    for (int i = 0; i < 6; i++) {
        struct node *n = calloc(1, sizeof *n);
        if (n == NULL || cudaMalloc(&n->dev, 8 * KiB) != cudaSuccess)
            return 1;
        n->key = i;
        n->parent = last;
        if (last == NULL)
            table_root = n;
        else
            last->right = n;
        last = n;
    }
    void **vec = malloc(16 * sizeof *vec);
    if (vec == NULL)
        return 1;
    for (int i = 0; i < 16; i++)
        if (cudaMalloc(&vec[i], 8 * KiB) != cudaSuccess)
            return 1;
    table_vec = vec;
    for (int i = 0; i < 2; i++) {
        void *p;
        if (cudaMalloc(&p, 8 * KiB) != cudaSuccess)
            return 1;
        p = NULL;
    }
    return atexit(teardown);
}

/* A thread on a stack the program gave it (pthread_attr_setstack on a mapping of its own, as a
 * fiber arena is), blocked on a condition; the mapping's low end, below the thread's stack
 * pointer, holds 3 device pointers (another fiber's data); 1 allocation dropped.  Below a
 * blocked thread's stack pointer the scan reads dead frames of stacks glibc made only: here it
 * may be data, and the 3 are possibly lost. */
static NOINLINE void *thread_on_given_stack(void *arg)
{
    (void)arg;
    sleeper = (pid_t)syscall(SYS_gettid);
    pthread_mutex_lock(&mu);
    allocated = 1;
    pthread_cond_broadcast(&cv);
    while (allocated)
        pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    return NULL;
}
static NOINLINE int custom_stack(void)
{
    size_t size = 1u << 20;
    void **arena = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (arena == MAP_FAILED)
        return 1;
    for (int i = 0; i < 4; i++) {
        void *p;
        if (cudaMalloc(&p, 8 * KiB) != cudaSuccess)
            return 1;
        if (i < 3)
            arena[64 * i] = p;
        p = NULL;
    }
    pthread_attr_t attr;
    pthread_t t;
    if (pthread_attr_init(&attr) != 0 || pthread_attr_setstack(&attr, arena, size) != 0 ||
        pthread_create(&t, &attr, thread_on_given_stack, NULL) != 0)
        return 1;
    pthread_mutex_lock(&mu);
    while (!allocated)
        pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    for (int i = 0; i < 10000 && !sleeping(sleeper); i++) {
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
    clear_stack();
    return 0;
}

/* Three allocations, all freed: nothing to scan for. */
static NOINLINE int all_freed(void)
{
    for (int i = 0; i < 3; i++) {
        void *p;
        if (cudaMalloc(&p, 8 * KiB) != cudaSuccess || cudaFree(p) != cudaSuccess)
            return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: reach <scenario>\n");
        return 2;
    }
    const char *s = argv[1];
    int rc;
    if (strcmp(s, "overwrite") == 0)
        rc = overwrite_in_loop();
    else if (strcmp(s, "global") == 0)
        rc = global_array();
    else if (strcmp(s, "heap-struct") == 0)
        rc = heap_struct_dropped();
    else if (strcmp(s, "thread-stack") == 0)
        rc = other_thread_stack();
    else if (strcmp(s, "interior") == 0)
        rc = interior_only();
    else if (strcmp(s, "xor") == 0)
        rc = xor_hidden();
    else if (strcmp(s, "device-only") == 0)
        rc = only_in_device_memory();
    else if (strcmp(s, "oom") == 0)
        rc = out_of_memory();
    else if (strcmp(s, "large-heap") == 0)
        rc = large_heap();
    else if (strcmp(s, "freed-small-blocks") == 0)
        rc = freed_small_blocks();
    else if (strcmp(s, "all-freed") == 0)
        rc = all_freed();
    else if (strcmp(s, "block-after-start") == 0)
        rc = block_after_start();
    else if (strcmp(s, "spread") == 0)
        rc = spread();
    else if (strcmp(s, "shared-anon") == 0)
        rc = shared_anon();
    else if (strcmp(s, "library-block") == 0)
        rc = library_block();
    else if (strcmp(s, "static-table") == 0)
        rc = static_table();
    else if (strcmp(s, "custom-stack") == 0)
        rc = custom_stack();
    else {
        fprintf(stderr, "reach: unknown scenario %s\n", s);
        return 2;
    }
    clear_stack();
    if (rc != 0) {
        fprintf(stderr, "reach %s failed\n", s);
        return 1;
    }
    printf("ok\n");
    fflush(stdout);
    return 0;
}
